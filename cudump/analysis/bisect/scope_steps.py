"""Steps 2 to 4 of `cudump bisect` for runs whose records name scopes: the first module
whose outputs differ, its launches snapshotted on each side, and its outputs shown."""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

from cudump.analysis.bisect.baseline import Nondeterminism
from cudump.analysis.bisect.buffers import buffer_report
from cudump.analysis.bisect.errors import (
    DIVERGED_STATUS,
    NO_DIVERGENCE,
    NotReproduced,
)
from cudump.analysis.bisect.options import BisectOptions
from cudump.analysis.bisect.rules import UserRules, write_rules
from cudump.analysis.bisect.scopes import (
    SETTLED,
    TolerantJudge,
    find_scope,
    judge_snapshots,
    launch_rules,
    parts_of_digests,
    rerun_scope,
)
from cudump.analysis.bisect.side_run import SideRun
from cudump.analysis.bisect.sides import Side
from cudump.analysis.bisect.tolerance import FloatTypes
from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.by_scope import (
    ScopeDiff,
    ScopePair,
    compare_output,
    launches_inside,
    pair_key,
)
from cudump.analysis.diff.runs import RunDiff
from cudump.analysis.report.scope_text import (
    first_scope_line,
    inside_lines,
    no_difference_line,
    summary_line,
    untyped_note,
)
from cudump.analysis.report.text import PairTable
from cudump.rundir.manifest import SnapshotRecord
from cudump.rundir.runs import Run


class Bisect(Protocol):
    """What the steps use of bisect's run (steps.Bisect)."""

    options: BisectOptions
    work: Path
    user: UserRules
    noise: Nondeterminism
    statuses: tuple[int | None, ...]

    def say(self, line: str) -> None: ...

    def _run(self, side: Side, step: str, options: list[str],
             again: str = "") -> tuple[SideRun, Run]: ...

    def _write_html(self, result: RunDiff, notes: tuple[str, ...]) -> None: ...


class ScopeSteps:
    """Bisect's steps 2 to 4 by scope, for one Bisect (its options, runs and output)."""

    def __init__(self, b: Bisect) -> None:
        self.b = b


    def run(self, a: Run, b: Run, scopes: ScopeDiff) -> int:
        """The first module whose outputs differ (by_scope), its launches snapshotted on
        each side, and its outputs shown."""
        tol = self.b.options.tol
        self.b.say("step 2: the first module whose outputs differ (the runs aligned by scope)")
        judge = None
        types = FloatTypes([PairResult(pair_key(s, False), s, None) for s in a.snapshots])
        # Declared outputs that are part of their records' digests are judged by their
        # elements too, within the tolerance or exactly.
        judged = self.b.options.tolerant or parts_of_digests(scopes)
        if judged:
            rounds = iter(range(1, 1 << 30))

            def snapshot(batch: list[ScopePair]) -> dict[int, bool]:
                n = next(rounds)
                within = f"atol {tol.atol:g}, rtol {tol.rtol:g}"
                names = batch[0].key.text() + (f" and {len(batch) - 1} more" if len(batch) > 1
                                               else "")
                self.b.say(f"step 3: snapshots of the outputs of {names} (digests differ), "
                         f"compared within {within}")
                wanted = [p for sp in batch for p in sp.outputs.pairs
                          if p.status not in SETTLED]
                snaps = self.side_snapshots(wanted, f"snapout{n}", "after")
                return judge_snapshots(batch, snaps, tol, types)

            def judge(diff: ScopeDiff) -> TolerantJudge:
                return TolerantJudge(diff, snapshot, self.b.options.batch, self.b.options.by_sums)

        found = find_scope(a, b, tol, judge, self.b.noise.keys, scopes)
        diff = found.diff
        self.b.say(f"  {summary_line(diff, by_digest=self.b.options.tolerant)}")
        first = found.first
        if first is None:
            if judged:
                self.b.say(no_difference_line(tol))
            else:
                sa, sb = self.b.statuses
                but = (f", but the programs' exit statuses differ (A {sa}, B {sb})"
                       if sa != sb else "")
                self.b.say("no divergence: every aligned scope's outputs have the same digest "
                         f"in A and B{but}")
            return NO_DIVERGENCE
        assert first.a is not None and first.b is not None
        name = first.key.text(diff.ranked)
        if found.inside is not None:
            self.b.say(f"  {first_scope_line(first, tol, diff.ranked)}")
        else:
            self.b.say(f"  first module whose outputs differ beyond the tolerance: {name}")
        self.b.say(f"step 3: snapshots of the launches in {name} "
                 f"({len(first.a.launches)} in A, {len(first.b.launches)} in B), before and "
                 "after")
        records = ([ln.record for ln in first.a.launches], [ln.record for ln in first.b.launches])
        snaps = self.side_snapshots(records, "snap", "both")
        return self.show_scope(first, snaps, diff.ranked, types)

    def side_snapshots(self, wanted: list[PairResult] | tuple[list[SnapshotRecord],
                                                                 list[SnapshotRecord]],
                        step: str, when: str) -> tuple[Run, Run]:
        """Snapshot runs of each side's own launches: those of the output pairs `wanted`,
        or the two lists of launch records."""
        if isinstance(wanted, tuple):
            records = wanted
        else:
            records = ([p.a.record for p in wanted if p.a is not None],
                       [p.b.record for p in wanted if p.b is not None])
        runs: list[Run] = []
        for side, mine in zip(self.b.options.sides, records, strict=True):
            path = write_rules(self.b.work / "rules" / f"{step}-{side.label.lower()}.yaml",
                               launch_rules(mine, when, "npy", self.b.user.snapshot_rules()))
            runs.append(self.b._run(side, step, ["--rule", str(path)])[1])
        return runs[0], runs[1]

    def show_scope(self, first: ScopePair, snaps: tuple[Run, Run], ranked: bool,
                    types: FloatTypes) -> int:
        tol = self.b.options.tol
        name = first.key.text(ranked)
        self.b.say(f"step 4: the outputs of {name}")
        again = rerun_scope(first, snaps, types)
        if not again.outputs.pairs:
            raise NotReproduced(f"the snapshot re-runs did not record the outputs of {name}: "
                                "the programs do not run the same launches each time")
        for pair in again.outputs.pairs:
            compare_output(pair, tol)
        table = PairTable(again.outputs.pairs)
        self.b.say("  " + table.header())
        for pair in again.outputs.pairs:
            self.b.say("  " + table.line(pair))
        differing = again.differing
        if not differing:
            raise NotReproduced(f"the re-run did not reproduce the divergence in {name}: its "
                                "outputs are equal this time; the program is not deterministic "
                                "(or depends on something that changed between runs)")
        self.b.say(f"  {first_scope_line(again, tol, ranked)}")
        note = untyped_note(again)
        if note:
            self.b.say(note)
        processes = len(snaps[0].processes)
        for line in inside_lines(launches_inside(again, tol, ranked), processes):
            self.b.say(line)
        shown = self.b.options.out or (self.b.work if self.b.options.keep else None)
        for _, pair in differing:
            for line in buffer_report(pair, tol, self.b.work, shown):
                self.b.say(line)
        self.b._write_html(RunDiff(again.outputs.pairs),
                         (f"first module whose outputs differ: {name}",))
        return DIVERGED_STATUS
