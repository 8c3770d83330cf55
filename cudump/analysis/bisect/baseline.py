"""Nondeterminism (bisect --baseline-runs N): side A run again N times, and the buffers that
differ between its identical runs; a difference between A and B at one of them is not the
divergence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cudump.analysis.diff.align import PairKey, PairResult, align
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.parallel import compare_pairs
from cudump.analysis.diff.runs import launches_in_order
from cudump.analysis.report.formats import plural
from cudump.analysis.report.text import launch_place
from cudump.rundir.runs import Run


@dataclass(frozen=True)
class Nondeterminism:
    """What differed between A's digest run and its baseline runs."""

    runs: int                                      # baseline runs compared with A's
    keys: frozenset[PairKey] = field(default_factory=frozenset)
    first: PairResult | None = None                # the first such pair, in A's launch order

    def lines(self) -> list[str]:
        """Step 1's account of it."""
        if self.first is None:
            return [f"  deterministic: no buffer differs between A and its "
                    f"{plural(self.runs, 'baseline run', 'baseline runs')}"]
        snap = self.first.launch_snapshot
        r = snap.record
        return [f"  nondeterministic: {plural(len(self.keys), 'buffer', 'buffers')} differ "
                f"between identical runs of A; the first: {launch_place(snap)}, arg {r.arg} "
                f"{r.phase}"]


def learn(a: Run, again: Sequence[Run], tol: Tolerance, jobs: int | None) -> Nondeterminism:
    """The pairs (kernel, occurrence, argument, phase, instance) that differ, or are in one
    run only, between A's digest run and any of its baseline runs."""
    keys: set[PairKey] = set()
    differing: list[PairResult] = []
    for other in again:
        pairs = align(a, other)
        list(compare_pairs(pairs, tol, jobs))
        differing += [p for p in pairs if p.different and p.key not in keys]
        keys.update(p.key for p in pairs if p.different)
    in_a = [p for launch in launches_in_order(differing) for p in launch]
    first = in_a[0] if in_a else (differing[0] if differing else None)
    return Nondeterminism(len(again), frozenset(keys), first)
