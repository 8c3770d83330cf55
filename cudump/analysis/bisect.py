"""`cudump bisect`: from "the output changed" to this kernel, this argument, these elements.

Two sides, A and B (two programs, or one program in two environments), are each run four
times at most, as `cudump` subprocesses writing into one work directory:

1. `a-digest`, `b-digest`: a digest of every buffer of every launch (`cudump --digest`), or
   of the buffers the user's rules name (their rules with `format: digest`);
2. the two digest runs are diffed (cudump.analysis.diff): the first divergent launch, in A's launch
   order, and how many launches matched before it;
3. `a-snap`, `b-snap`: snapshots (.npy and .png) of that launch only, before and after:
   a rule matching its kernel's mangled name, `skip: occurrence - 1`, `count: 1` (the
   user's rules for that kernel, so narrowed, when rules were given);
4. the snapshots of that launch are diffed, and each differing buffer is shown with the
   diff's metrics and the elements that differ; `--html` writes the report.

Each side's re-run is checked against its own digest run at the divergent buffer: a side
whose bytes changed between its two runs is not deterministic, and a divergence that the
re-run does not show is reported as not reproduced (exit status 3).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

import cudump
from cudump.analysis.diff.align import PairResult, align
from cudump.analysis.diff.compare import compare_pair
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.parallel import compare_pairs
from cudump.analysis.diff.runs import DIVERGED, DivergentLaunch, RunDiff
from cudump.analysis.progress import Progress
from cudump.analysis.report.formats import plural
from cudump.analysis.report.html_page import HtmlReport, PageOptions
from cudump.analysis.report.text import PairTable, divergent_line, file_report
from cudump.analysis.spots import difference_spots
from cudump.errors import CudumpError, UsageError
from cudump.policy.rules import Rule, load_rules
from cudump.rundir.manifest import MANIFEST, SnapshotRecord
from cudump.rundir.runs import Run, Snapshot, short_kernel_name
from cudump.rundir.summary import SUMMARY_FILE
from cudump.rundir.watch import RunProgress, RunWatch

# Exit statuses: 0 no divergence, 1 divergence found (and shown), 2 trouble, 3 not reproduced.
NO_DIVERGENCE, DIVERGED_STATUS, NOT_REPRODUCED = 0, 1, 3
WATCH_SECONDS = 0.2          # how often a side's run is looked at for the progress line


class BisectError(CudumpError):
    """cudump bisect could not get to an answer (exit status 2)."""


class NotReproduced(BisectError):
    """The snapshot re-runs did not show the divergence the digest runs found."""

    exit_code = NOT_REPRODUCED


# ---------------------------------------------------------------------------------------
# The two sides


@dataclass(frozen=True)
class Side:
    label: str                            # "A" or "B"
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()  # set in its environment, in order

    def describe(self) -> str:
        text = shlex.join(self.argv)
        if self.env:
            text += " with " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        return text

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Its environment: ours (or `base`) and its settings; and when this cudump is not
        installed (a checkout), PYTHONPATH leading to it, so that the `python -m cudump` it
        runs under is this one."""
        env = dict(os.environ if base is None else base)
        env.update(self.env)
        root = Path(cudump.__file__).resolve().parent.parent
        if root not in _site_dirs():
            old = env.get("PYTHONPATH")
            env["PYTHONPATH"] = str(root) + (os.pathsep + old if old else "")
        return env


def _site_dirs() -> set[Path]:
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return {Path(d).resolve() for d in dirs}


def parse_env(items: Sequence[str], option: str) -> tuple[tuple[str, str], ...]:
    """NAME=VALUE settings of --env-a/--env-b; UsageError for anything else."""
    pairs: list[tuple[str, str]] = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or "\0" in item:
            raise UsageError(f"{option} {item!r}: expected NAME=VALUE")
        pairs.append((name, value))
    return tuple(pairs)


def split_programs(words: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """`[--] PROGRAM_A ARGS... [-- PROGRAM_B ARGS...]` as A's and B's command lines."""
    rest = list(words)
    if rest and rest[0] == "--":
        rest.pop(0)
    if "--" in rest:
        cut = rest.index("--")
        a, b = rest[:cut], rest[cut + 1:]
        if not b:
            raise UsageError("nothing after the second '--': give PROGRAM_B and its arguments, "
                             "or leave the '--' out and use --env-a/--env-b")
    else:
        a, b = rest, None
    if not a:
        raise UsageError("no program given; usage: cudump bisect [options] -- PROGRAM_A "
                         "[ARGS...] [-- PROGRAM_B [ARGS...]] (see 'cudump bisect --help')")
    return a, b


def make_sides(words: Sequence[str], env_a: Sequence[str],
               env_b: Sequence[str]) -> tuple[Side, Side]:
    argv_a, argv_b = split_programs(words)
    settings_a, settings_b = parse_env(env_a, "--env-a"), parse_env(env_b, "--env-b")
    if argv_b is None and not (settings_a or settings_b):
        raise UsageError("one program needs --env-a/--env-b to run it two ways; or give a "
                         "second program after another '--'")
    a = Side("A", tuple(argv_a), settings_a)
    b = Side("B", tuple(argv_b if argv_b is not None else argv_a), settings_b)
    if a.argv == b.argv and dict(a.env) == dict(b.env):
        raise UsageError("A and B would run the same command in the same environment")
    return a, b


# ---------------------------------------------------------------------------------------
# Rules: the user's, as digests (step 1) and narrowed to one launch (step 3)


@dataclass
class UserRules:
    """The user's rule files: checked (cudump.policy.rules) and as plain YAML data, rule by rule."""

    rules: list[Rule] = field(default_factory=list)
    raw: list[dict[str, Any]] = field(default_factory=list)   # the same rules, in order

    @classmethod
    def load(cls, paths: Sequence[Path]) -> UserRules:
        loaded = cls()
        for path in paths:
            checked = load_rules([path])               # RuleError says what is wrong
            raw = _raw_rules(path)
            if len(raw) != len(checked):
                raise BisectError(f"{path}: could not read its rules a second time")
            loaded.rules += checked
            loaded.raw += raw
        return loaded

    def snapshot_rules(self) -> list[tuple[Rule, dict[str, Any]]]:
        return [(r, raw) for r, raw in zip(self.rules, self.raw, strict=True)
                if not r.is_break]


def _raw_rules(path: Path) -> list[dict[str, Any]]:
    """A checked rule file's rules as mappings (a file of `rules:`, a list, or one rule)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and "rules" in data:
        data = data["rules"]
    items = data if isinstance(data, list) else [data]
    return [dict(item) for item in items]


def digest_rule(raw: dict[str, Any]) -> dict[str, Any]:
    """A user's snapshot rule taking digests instead of files."""
    return {**raw, "format": "digest"}


def target_rule(raw: dict[str, Any], target: Target) -> dict[str, Any]:
    """A user's rule (or the default one) narrowed to the target launch, before and after,
    as .npy and .png."""
    rule = {k: v for k, v in raw.items() if k not in ("every", "match", "kernel")}
    rule.update(target.selector())
    rule.update(skip=target.occurrence - 1, count=1, when="both", format="both")
    return rule


def write_rules(path: Path, rules: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"rules": rules}, sort_keys=False, allow_unicode=True),
                    encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------
# Running a side


@dataclass
class SideRun:
    side: Side
    run_dir: Path
    log: Path                  # its stdout and stderr (the program's and cudump's)
    returncode: int
    exit_status: int | None    # the program's, from summary.json; None: it did not run

    def note(self) -> str | None:
        """A line about a program that failed, or None."""
        if self.exit_status:
            return (f"{self.side.label}: the program exited with status {self.exit_status} "
                    f"(its output: {self.log})")
        return None


def _last_error(log: Path) -> str:
    """cudump's error line in a log, else its last non-empty line."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    errors = [ln for ln in lines if ln.startswith("cudump: error:")]
    return (errors or lines or ["no output"])[-1]


def _exit_status(run_dir: Path) -> int | None:
    try:
        data = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    status = data.get("exit_status") if isinstance(data, dict) else None
    return status if isinstance(status, int) else None


def run_side(side: Side, run_dir: Path, log: Path, options: Sequence[str],
             watch: Callable[[RunProgress], None] | None = None) -> SideRun:
    """`python -m cudump --out RUN_DIR OPTIONS -- PROGRAM...` for one side; BisectError if
    cudump could not run the program (a program that fails is a SideRun with its status).
    `watch` hears how far the run has got, from the start and then every WATCH_SECONDS."""
    cmd = [sys.executable, "-m", "cudump", "--out", str(run_dir), *options, "--", *side.argv]
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with log.open("wb") as out:
            child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, env=side.environment())
    except OSError as err:
        raise BisectError(f"{side.label}: cannot start cudump: {err.strerror or err}") from None
    returncode = _wait_for(child, RunWatch(run_dir) if watch is not None else None, watch)
    ran = SideRun(side, run_dir, log, returncode, _exit_status(run_dir))
    if ran.exit_status is None:
        raise BisectError(f"{side.label}: {side.describe()} did not run under cudump: "
                          f"{_last_error(log)}")
    if not (run_dir / MANIFEST).is_file():
        why = (f"the program exited with status {ran.exit_status} before any buffer was "
               "recorded" if ran.exit_status else
               "no launch had a buffer in its arguments (or the rules matched none)")
        raise BisectError(f"{side.label}: nothing recorded: {why}; its output: {log}")
    return ran


def _wait_for(child: subprocess.Popen[bytes], runs: RunWatch | None,
              watch: Callable[[RunProgress], None] | None) -> int:
    """The child's exit status; `watch` hears its progress meanwhile. An exception here
    (Ctrl-C) ends the child first, as subprocess.run would."""
    try:
        if runs is None or watch is None:
            return child.wait()
        while True:
            watch(runs.poll())
            try:
                return child.wait(timeout=WATCH_SECONDS)
            except subprocess.TimeoutExpired:
                pass
    except BaseException:
        child.kill()
        child.wait()
        raise


# ---------------------------------------------------------------------------------------
# The target: the first divergent launch


@dataclass(frozen=True)
class Target:
    """The first divergent launch of the digest runs, and the pair that showed it."""

    launch: DivergentLaunch

    @property
    def record(self) -> SnapshotRecord:
        return self.launch.snapshot.record

    @property
    def occurrence(self) -> int:
        return int(self.record.occurrence)

    @property
    def instance(self) -> int:
        """Which record of (kernel, occurrence, arg, phase) across processes (alignment)."""
        return self.launch.pair.key[4]

    def selector(self) -> dict[str, str]:
        """Rule keys matching its kernel and nothing else."""
        r = self.record
        if r.mangled and not any(c in r.mangled for c in "*?"):
            return {"kernel": r.mangled, "match": "mangled"}
        if any(c in r.kernel for c in "*?") or r.kernel.startswith("re:"):
            raise BisectError(f"cannot write a rule naming exactly {r.kernel!r}")
        return {"kernel": r.kernel, "match": "demangled"}

    def wants(self, pair: PairResult) -> bool:
        """Whether a pair of the snapshot runs is of this launch."""
        k = pair.key
        return k[0] == self.record.kernel and k[1] == self.occurrence and k[4] == self.instance

    def rule_applies(self, rule: Rule) -> bool:
        return rule.matches(self.record.kernel, self.record.mangled)


DEFAULT_TARGET_RULE: dict[str, Any] = {"name": "cudump bisect", "args": "pointers"}


# ---------------------------------------------------------------------------------------
# Showing the differing buffers


def _shown_path(snap: Snapshot, work: Path, shown: Path | None) -> str:
    """A snapshot's file as the user can find it: under the work directory as they named it
    (`shown`), or relative to a work directory that will be removed."""
    path = snap.path or snap.run_dir
    try:
        inside = path.relative_to(work.resolve())
    except ValueError:
        return str(path)
    return str(shown / inside if shown is not None else inside)


def buffer_report(pair: PairResult, tol: Tolerance, work: Path,
                  shown: Path | None = None) -> list[str]:
    """A differing pair of the snapshot runs: the file diff's report and where it differs."""
    assert pair.a is not None and pair.b is not None
    r = pair.a.record
    head = f"  arg {r.arg}" + (f" ({r.type})" if r.type else "") + f" {r.phase}:"
    if pair.metrics is None:
        return [head, f"    {pair.reason or pair.status}"]
    names = (_shown_path(pair.a, work, shown), _shown_path(pair.b, work, shown))
    lines = [head] + ["    " + ln for ln in file_report(*names, pair.metrics, tol)]
    try:
        spots = difference_spots(pair.a.load(), pair.b.load(), tol)
    except (CudumpError, OSError, ValueError, MemoryError) as err:
        return lines + [f"    (cannot read the arrays again to list the elements: {err})"]
    return lines + ["    " + ln for ln in spots.lines()]


# ---------------------------------------------------------------------------------------
# The whole thing


@dataclass
class BisectOptions:
    sides: tuple[Side, Side]
    rules: list[Path] = field(default_factory=list)
    out: Path | None = None            # the work directory (default: a temporary one)
    keep: bool = False                 # keep a temporary work directory
    html: Path | None = None           # a report: FILE.html, or a directory (index.html)
    tol: Tolerance = field(default_factory=Tolerance)
    jobs: int | None = None


def html_target(path: Path) -> tuple[Path, PageOptions]:
    """Where --html PATH puts the report: PATH itself when it names an .html file (its
    images in PATH's stem + '-img' beside it), else PATH/index.html (images in PATH/img)."""
    if path.suffix.lower() in (".html", ".htm") and not path.is_dir():
        return path.parent, PageOptions(index=path.name, images=f"{path.stem}-img")
    return path, PageOptions()


def prepare_work(out: Path | None) -> tuple[Path, bool]:
    """The work directory and whether it is ours to remove: --out DIR (new or empty, kept)
    or a fresh temporary directory."""
    if out is None:
        return Path(tempfile.mkdtemp(prefix="cudump-bisect-")), True
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: give a new or empty directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {out}: cannot create it: {err.strerror or err}") from None
    return out, False


class Bisect:
    """Runs the four steps, saying what it does on `say` (one line at a time)."""

    def __init__(self, options: BisectOptions, work: Path, user: UserRules,
                 say: Callable[[str], None] = print, progress: Progress | None = None) -> None:
        self.options = options
        self.work = work
        self._say = say
        self.user = user
        self.statuses: tuple[int | None, ...] = ()      # the programs' in the digest runs
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
        result = self._diff_digests(digest_a, digest_b)
        first = result.first_divergent_launch
        if first is None:
            return self._no_divergence(result)
        target = Target(first)
        r = target.record
        self.say(f"step 3: snapshots of launch {r.launch} ({short_kernel_name(r.kernel)}, "
                 f"occurrence {r.occurrence}), before and after")
        snaps = self._snapshot_runs(target)
        return self._show(target, snaps)

    def _digest_runs(self) -> tuple[Run, Run]:
        what = ("the buffers the rules name" if self.options.rules
                else "every buffer of every launch")
        self.say(f"step 1: digests of {what}")
        options = self._digest_options()
        (ran_a, a), (ran_b, b) = (self._run(side, "digest", options)
                                  for side in self.options.sides)
        self.statuses = (ran_a.exit_status, ran_b.exit_status)
        if not a.snapshots and not b.snapshots:
            raise BisectError("neither run recorded a buffer: no kernel launch had a buffer in "
                              "its arguments" + (" that the rules name" if self.options.rules
                                                 else ""))
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

    def _run(self, side: Side, step: str, options: list[str]) -> tuple[SideRun, Run]:
        name = f"{side.label.lower()}-{step}"
        what = "digests" if step == "digest" else "snapshots"

        def watch(at: RunProgress) -> None:
            where = (f"launch {at.launch:,} ({at.lines:,} manifest lines)"
                     if at.launch is not None else "starting")
            self.progress.update(f"bisect: run {side.label} ({what}): {where}")

        try:
            ran = run_side(side, self.work / name, self.work / "logs" / f"{name}.log", options,
                           watch if self.progress.enabled else None)
        finally:
            self.progress.clear()
        run = Run.open(ran.run_dir)
        self.say(f"  {side.label}: {plural(len(run.snapshots), 'record', 'records')} in "
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
        result = RunDiff(pairs)
        compared = len(result.compared) - len(result.uncaptured)
        differ = sum(1 for p in result.compared if p.status in DIVERGED)
        self.say(f"  {compared} pairs compared, {differ} differ, {len(result.only_a)} only in "
                 f"A, {len(result.only_b)} only in B")
        if result.errors:
            self.say(f"  note: {len(result.errors)} pairs could not be compared; first: "
                     f"{result.errors[0].reason}")
        first = result.first_divergent_launch
        if first is not None:
            self.say(f"  {divergent_line(first)}")
            if first.pair.key[3] == "before":
                self.say("  note: its input already differs before it runs: the difference "
                         "comes from outside the recorded launches (host copies, memsets, "
                         "launches without buffers or not matched by the rules)")
        return result

    def _no_divergence(self, result: RunDiff) -> int:
        if result.errors:
            raise BisectError(f"{len(result.errors)} pairs of digests could not be compared; "
                              f"first: {result.errors[0].reason}")
        one_sided = result.only_a + result.only_b
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

    def _snapshot_runs(self, target: Target) -> tuple[Run, Run]:
        path = write_rules(self.work / "rules" / "target.yaml", self._target_rules(target))
        (_, a), (_, b) = (self._run(side, "snap", ["--rule", str(path)])
                          for side in self.options.sides)
        return a, b

    def _target_rules(self, target: Target) -> list[dict[str, Any]]:
        if not self.options.rules:
            return [target_rule(DEFAULT_TARGET_RULE, target)]
        rules = [target_rule(raw, target) for rule, raw in self.user.snapshot_rules()
                 if target.rule_applies(rule)]
        if not rules:
            raise BisectError(f"no rule names {target.record.kernel}, though its digests came "
                              "from the rules")
        return rules

    # -- step 4

    def _show(self, target: Target, snaps: tuple[Run, Run]) -> int:
        self.say("step 4: the buffers of that launch")
        pairs = [p for p in align(*snaps) if target.wants(p)]
        if not pairs:
            raise NotReproduced(f"the snapshot re-runs did not reach launch "
                                f"{target.record.launch} (occurrence {target.occurrence} of "
                                f"{target.record.kernel}); the program does not run the same "
                                "launches each time")
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
        self._report(target, pairs)
        return DIVERGED_STATUS

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
        if self.options.html is None:
            return
        out, page = html_target(self.options.html)
        a, b = self.options.sides
        page = replace(page, title="cudump bisect", divergent=False,
                       notes=(divergent_line(target.launch) + " (in the digest runs)",))
        try:
            index = HtmlReport(out, RunDiff(pairs), a.describe(), b.describe(),
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
        _check_html(options.html)
    work, temporary = prepare_work(options.out)
    try:
        status = Bisect(options, work, user, say, progress).run()
    except BaseException:
        say(f"work directory (kept, with the runs' logs): {work}")
        raise
    if temporary and not options.keep:
        shutil.rmtree(work, ignore_errors=True)
        say(f"(the runs were in {work}, now removed; --keep or --out DIR keeps them)")
    else:
        say(f"work directory: {work}")
    return status


def _check_html(path: Path) -> None:
    from cudump.commands.diff import report_dir

    out, page = html_target(path)
    report_dir(out, page.index, path)
