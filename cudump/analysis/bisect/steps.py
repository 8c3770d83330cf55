"""The four steps of a bisection (Bisect) and the whole of it (bisect)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from cudump.analysis.bisect.baseline import Nondeterminism, learn
from cudump.analysis.bisect.buffers import buffer_report
from cudump.analysis.bisect.confirm import confirm_command, whole_buffers
from cudump.analysis.bisect.errors import (
    DIVERGED_STATUS,
    NO_DIVERGENCE,
    BisectError,
    NotReproduced,
)
from cudump.analysis.bisect.interrupt import Interrupted, stop_on_signals
from cudump.analysis.bisect.options import BisectOptions, check_html, html_target, prepare_work
from cudump.analysis.bisect.rules import UserRules, digest_rule, write_rules
from cudump.analysis.bisect.scope_steps import ScopeSteps
from cudump.analysis.bisect.side_run import SideRun, run_side
from cudump.analysis.bisect.sides import Side
from cudump.analysis.bisect.target import Target, not_reached
from cudump.analysis.bisect.tolerance import FloatTypes, candidates, first_beyond
from cudump.analysis.diff.align import PairResult, align
from cudump.analysis.diff.by_scope import (
    align_scopes,
    missing_scopes,
)
from cudump.analysis.diff.causes import attribute
from cudump.analysis.diff.compare import compare_pair
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.parallel import compare_pairs
from cudump.analysis.diff.runs import DIVERGED, RunDiff
from cudump.analysis.progress import Progress
from cudump.analysis.report.formats import plural
from cudump.analysis.report.html_page import HtmlReport
from cudump.analysis.report.text import PairTable, attribution_lines, divergent_line
from cudump.console import console
from cudump.errors import UsageError
from cudump.rundir.runs import Run, short_kernel_name
from cudump.rundir.watch import RunProgress


def digest_run(b: Bisect, side: Side, options: list[str]) -> tuple[SideRun, Run]:
    """A side's digest run; made again where the first filled the side's empty compile
    caches (side_run.COMPILE_CACHES), so that it and the side's later runs all find them
    warm and launch alike."""
    ran, run = b._run(side, "digest", options)
    if not ran.filled_caches:
        return ran, run
    b.say(f"  {side.label} filled its compile caches (torch.compile, Triton) in that run; "
          "run again with them warm, as every later run of it will be, since a cold run "
          "compiles and autotunes, launching kernels a warm one does not")
    return b._run(side, "digest-warm", options)


class Bisect:
    """Runs the four steps, saying what it does on `say` (one line at a time)."""

    def __init__(self, options: BisectOptions, work: Path, user: UserRules,
                 say: Callable[[str], None] = print, progress: Progress | None = None) -> None:
        self.options = options
        self.work = work
        self._say = say
        self.user = user
        self.statuses: tuple[int | None, ...] = ()      # the programs' in the digest runs
        # What differs between identical runs of A (--baseline-runs; none: nothing known).
        self.noise = Nondeterminism(0)
        self.attribution: list[str] = []                # root causes, for the report
        # How far the runs and the digest diff have got, on a terminal's stderr.
        self.progress = progress if progress is not None else Progress(enabled=False)

    def say(self, line: str) -> None:
        self.progress.before_output()
        self._say(line)

    # -- steps

    def run(self) -> int:
        a, b = self.options.sides
        self.say(f"A: {a.describe()}")
        self.say(f"B: {b.describe()}")
        digest_a, digest_b = self._digest_runs()
        missing = missing_scopes(digest_a, digest_b)
        scopes = align_scopes(digest_a, digest_b) if missing is None else None
        if scopes is not None and scopes.in_common:
            return ScopeSteps(self).run(digest_a, digest_b, scopes)
        if missing is None:
            self.say("the runs have no scope in common: comparing in launch order")
        elif missing != "neither run has scopes":
            self.say(f"{missing}: comparing in launch order")
        result = self._diff_digests(digest_a, digest_b)
        first = result.first_divergent_launch
        if first is None and not any(p.status == "close" for p in result.pairs):
            return self._no_divergence(result)
        if self.options.tolerant:
            found = self._beyond_tolerance(result)
            if found is None:
                return NO_DIVERGENCE
            target, snaps = found
            return self._show(target, snaps)
        assert first is not None
        target = Target(first)
        r = target.record
        self.say(f"step 3: snapshots of launch {r.launch} ({short_kernel_name(r.kernel)}, "
                 f"occurrence {r.occurrence}), before and after")
        snaps = self._snapshot_runs([target])
        return self._show(target, snaps)

    def _digest_runs(self) -> tuple[Run, Run]:
        what = ("the buffers the rules name" if self.options.rules
                else "every buffer of every launch")
        self.say(f"step 1: digests of {what}")
        options = self._digest_options()
        (ran_a, a), (ran_b, b) = (digest_run(self, side, options)
                                  for side in self.options.sides)
        self.statuses = (ran_a.exit_status, ran_b.exit_status)
        if not a.snapshots and not b.snapshots:
            raise BisectError("neither run recorded a buffer: no kernel launch had a buffer in "
                              "its arguments" + (" that the rules name" if self.options.rules
                                                 else ""))
        runs = self.options.baseline_runs
        if runs:
            side = self.options.sides[0]
            again = [self._run(side, f"base{n}", options, f" (baseline {n} of {runs})")[1]
                     for n in range(1, runs + 1)]
            self.noise = learn(a, again, self.options.tol, self.options.jobs)
            for line in self.noise.lines():
                self.say(line)
        return a, b

    def _digest_options(self) -> list[str]:
        if not self.options.rules:
            return ["--digest"]
        rules = [digest_rule(raw) for _, raw in self.user.snapshot_rules()]
        if not rules:
            raise UsageError("the rule files hold only 'action: break' rules; bisect needs "
                             "snapshot rules")
        if len(rules) < len(self.user.rules):
            self.say("  (rules with 'action: break' are left out)")
        return ["--rule", str(write_rules(self.work / "rules" / "digest.yaml", rules))]

    def _run(self, side: Side, step: str, options: list[str],
             again: str = "") -> tuple[SideRun, Run]:
        name = f"{side.label.lower()}-{step}"
        what = "snapshots" if step.startswith("snap") else "digests"

        def watch(at: RunProgress) -> None:
            where = (f"launch {at.launch:,} ({at.lines:,} manifest lines)"
                     if at.launch is not None else "starting")
            self.progress.update(f"bisect: run {side.label} ({what}): {where}")

        try:
            ran = run_side(side, self.work / name, self.work / "logs" / f"{name}.log", options,
                           watch if self.progress.enabled else None,
                           self.work / "compile-caches" / side.label.lower())
        finally:
            self.progress.clear()
        run = Run.open(ran.run_dir)
        self.say(f"  {side.label}{again}: {plural(len(run.snapshots), 'record', 'records')} in "
                 f"{name}/, exit status {ran.exit_status}")
        note = ran.note()
        if note:
            self.say(f"  note: {note}")
        return ran, run

    def _diff_digests(self, a: Run, b: Run) -> RunDiff:
        self.say("step 2: first divergent launch")
        pairs = align(a, b)
        total = f"{len(pairs):,}"
        self.progress.update(f"bisect: comparing digests: 0/{total} pairs")
        try:
            for done, _ in enumerate(compare_pairs(pairs, self.options.tol, self.options.jobs),
                                     1):
                self.progress.update(f"bisect: comparing digests: {done:,}/{total} pairs")
        finally:
            self.progress.clear()
        result = RunDiff(pairs, self.noise.keys)
        compared = len(result.compared) - len(result.uncaptured)
        differ = sum(1 for p in result.compared if p.status in DIVERGED)
        self.say(f"  {compared} pairs compared, {differ} differ, {len(result.only_a)} only in "
                 f"A, {len(result.only_b)} only in B")
        noisy = sum(1 for p in result.pairs if p.different and p.key in result.noise)
        if noisy:
            self.say(f"  {plural(noisy, 'of them is', 'of them are')} nondeterministic (they "
                     "differ between identical runs of A), not the divergence")
        if result.errors:
            self.say(f"  note: {len(result.errors)} pairs could not be compared; first: "
                     f"{result.errors[0].reason}")
        first = result.first_divergent_launch
        close = sum(1 for p in result.compared if p.status == "close")
        if close:
            self.say(f"  {plural(close, 'pair has digests', 'pairs have digests')} that differ "
                     "and sums of |x| within the tolerance: their elements may be within it")
        if first is not None and self.options.tolerant:
            self.say("  (digests are exact: step 3 tells differences within the tolerance "
                     "from the divergence)")
        if first is not None:
            self.say(f"  {divergent_line(first)}")
            if first.pair.key[3] == "before":
                self.say("  note: its input already differs before it runs: the difference "
                         "comes from outside the recorded launches (host copies, memsets, "
                         "launches without buffers or not matched by the rules)")
            self.attribution = attribution_lines(attribute(pairs, result.noise),
                                                 first.processes)
            for line in self.attribution:
                self.say(f"  {line}")
        return result

    def _no_divergence(self, result: RunDiff) -> int:
        if result.errors:
            raise BisectError(f"{len(result.errors)} pairs of digests could not be compared; "
                              f"first: {result.errors[0].reason}")
        one_sided = [p for p in result.only_a + result.only_b if p.key not in result.noise]
        if not one_sided and any(p.different for p in result.pairs):
            self.say(f"no divergence beyond nondeterminism ("
                     f"{plural(len(result.noise), 'buffer differs', 'buffers differ')} between "
                     "identical runs)")
            return NO_DIVERGENCE
        if not one_sided:
            a, b = self.statuses
            but = (f", but the programs' exit statuses differ (A {a}, B {b})" if a != b
                   else "")
            self.say(f"no divergence: every buffer has the same digest in A and B{but}")
            return NO_DIVERGENCE
        first = one_sided[0]
        r = first.launch_snapshot.record
        side = "A" if first.status == "only-a" else "B"
        self.say(f"no buffer differs where both have it, but {len(one_sided)} records are in "
                 f"one run only; the first: launch {r.launch} of {r.kernel} (occurrence "
                 f"{r.occurrence}), arg {r.arg} {r.phase}, only in {side}")
        return DIVERGED_STATUS

    def _snapshot_runs(self, targets: list[Target], step: str = "snap") -> tuple[Run, Run]:
        given = bool(self.options.rules)
        rules = [rule for target in targets for rule in self.user.target_rules(given, target)]
        path = write_rules(self.work / "rules" / f"{step}.yaml", rules)
        (_, a), (_, b) = (self._run(side, step, ["--rule", str(path)])
                          for side in self.options.sides)
        return a, b

    def _beyond_tolerance(self, result: RunDiff) -> tuple[Target, tuple[Run, Run]] | None:
        """With --atol/--rtol: the candidate launches (tolerance.py), snapshotted --batch-size at a
        time, until one differs beyond the tolerance (that one, and the runs that show it);
        None when every one is within it."""
        tol, batch = self.options.tol, self.options.batch
        within = f"atol {tol.atol:g}, rtol {tol.rtol:g}"
        found = candidates(result, self.options.by_sums)
        launches, types = found.launches, FloatTypes(result.pairs)
        if found.trusted:
            self.say(found.trusted_line())
        for start in range(0, len(launches), batch):
            chunk = [Target(launch) for launch in launches[start:start + batch]]
            first, last = chunk[0].record, chunk[-1].record
            span = (f"launch {first.launch}" if len(chunk) == 1
                    else f"launches {first.launch} to {last.launch}")
            self.say(f"step 3: snapshots of {plural(len(chunk), 'launch', 'launches')} whose "
                     f"digests differ ({span}), before and after, compared within {within}")
            round_ = start // batch + 1
            snaps = self._snapshot_runs(chunk, "snap" if round_ == 1 else f"snap{round_}")
            pairs = align(*snaps)
            for pair in pairs:
                pair.view_as = types.view(pair.launch_snapshot.record)
            list(compare_pairs(pairs, tol, self.options.jobs))
            beyond = first_beyond(chunk, pairs)
            if beyond is not None:
                target, inputs = beyond
                r = target.record
                self.say(f"  launch {r.launch} ({short_kernel_name(r.kernel)}) is the first "
                         f"whose buffers differ beyond the tolerance; "
                         + ("its inputs were equal within it: the root cause" if inputs else
                            "its inputs already differed beyond it before it ran (from "
                            "outside the recorded launches)"))
                return target, snaps
            self.say(f"  all {len(chunk)} equal within the tolerance" if len(chunk) > 1
                     else "  equal within the tolerance")
        self.say(found.verdict(within))
        return None

    # -- step 4

    def _show(self, target: Target, snaps: tuple[Run, Run]) -> int:
        self.say("step 4: the buffers of that launch")
        pairs = [p for p in align(*snaps) if target.wants(p)]
        if not pairs:
            raise not_reached(target)
        list(compare_pairs(pairs, self.options.tol, self.options.jobs))
        table = PairTable(pairs)
        self.say("  " + table.header())
        for pair in pairs:
            self.say("  " + table.line(pair))
        changed = self._changed_sides(target, snaps)
        for label in changed:
            self.say(f"  note: {label}'s re-run gave other bytes at this buffer than its digest "
                     f"run: {label} is not deterministic")
        differing = [p for p in pairs if p.status in DIVERGED]
        if not differing:
            why = (f"{' and '.join(changed)} changed between runs" if changed
                   else "the launch is equal this time")
            raise NotReproduced(f"the re-run did not reproduce the divergence at launch "
                                f"{target.record.launch} of {target.record.kernel}: {why}; the "
                                "program is not deterministic (or depends on something that "
                                "changed between runs)")
        shown = self.options.out or (self.work if self.options.keep else None)
        for pair in differing:
            for line in buffer_report(pair, self.options.tol, self.work, shown):
                self.say(line)
        self._confirm(target, snaps[0], pairs, shown is not None)
        self._report(target, pairs)
        return DIVERGED_STATUS

    def _confirm(self, target: Target, a_snap: Run, pairs: list[PairResult],
                 kept: bool) -> None:
        """The command that runs B on A's inputs at that launch (confirm.py), where it is
        true (the work directory kept, buffers taken whole) and short."""
        a = next((p.a for p in pairs if p.a is not None), None)
        rules = [r for r in self.user.rules if not r.is_break and target.rule_applies(r)]
        if not kept or a is None or not whole_buffers(rules):
            return
        command = confirm_command(self.options.sides[1], a_snap, a.record)
        if command is not None:
            self.say(f"  confirm: B on A's inputs at launch {a.record.launch}: {command}")

    def _changed_sides(self, target: Target, snaps: tuple[Run, Run]) -> list[str]:
        """Sides whose snapshot of the divergent buffer does not match their digest of it."""
        key = target.launch.pair.key
        found = next((p for p in align(*snaps) if p.key == key), None)
        changed = []
        for label, digest, snap in (("A", target.launch.pair.a, found.a if found else None),
                                    ("B", target.launch.pair.b, found.b if found else None)):
            if digest is None or snap is None:
                continue
            check = compare_pair(PairResult(key, digest, snap), Tolerance())
            if check.status in DIVERGED:
                changed.append(label)
        return changed

    def _report(self, target: Target, pairs: list[PairResult]) -> None:
        self._write_html(RunDiff(pairs), (divergent_line(target.launch)
                                          + " (in the digest runs)", *self.attribution))

    def _write_html(self, result: RunDiff, notes: tuple[str, ...]) -> None:
        if self.options.html is None:
            return
        out, page = html_target(self.options.html)
        a, b = self.options.sides
        page = replace(page, title="cudump bisect", divergent=False, notes=notes)
        try:
            index = HtmlReport(out, result, a.describe(), b.describe(),
                               self.options.tol, self.options.jobs, page).write()
        except OSError as err:
            raise BisectError(f"--html {self.options.html}: cannot write the report: "
                              f"{err.strerror or err}") from None
        self.say(f"report: {index}")


def bisect(options: BisectOptions, say: Callable[[str], None] = print,
           progress: Progress | None = None) -> int:
    """Run a bisection in its work directory. A temporary one is removed afterwards unless
    --keep is given or something went wrong (its logs say what)."""
    user = UserRules.load(options.rules)     # checked before anything is made or run
    if options.html is not None:
        check_html(options.html)
    work, temporary = prepare_work(options.out)
    with stop_on_signals():
        try:
            status = Bisect(options, work, user, say, progress).run()
        except Interrupted as stop:
            # The side run under way was stopped as the signal unwound it (side_run).
            removed = temporary and not options.keep
            if removed:
                shutil.rmtree(work, ignore_errors=True)
            console.say(f"cudump bisect: stopped by {stop.name}; its runs were stopped" +
                        (f" and {work} removed" if removed else f"; work directory: {work}"))
            return stop.exit_status
        except BaseException:
            say(f"work directory (kept, with the runs' logs): {work}")
            raise
    if temporary and not options.keep:
        shutil.rmtree(work, ignore_errors=True)
        say(f"(the runs were in {work}, now removed; --keep or --out DIR keeps them)")
    else:
        say(f"work directory: {work}")
    return status
