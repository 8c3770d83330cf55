"""Two runs aligned snapshot by snapshot: PairResult and align."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from cudump.analysis.diff.metrics import Metrics
from cudump.policy.pattern import KernelPattern
from cudump.rundir.runs import Run, Snapshot, in_launch_order, kernel_pattern

PairKey = tuple[str, int, int, str, int]   # kernel, occurrence, arg, phase, n-th such record


@dataclass
class PairResult:
    """One aligned pair of snapshots and how it compared."""

    key: PairKey
    a: Snapshot | None
    b: Snapshot | None
    # equal | differ | mismatch | only-a | only-b | error | uncaptured (on either side)
    status: str = "pending"
    metrics: Metrics | None = None
    reason: str | None = None
    digests: tuple[str, str] | None = None     # A's and B's, when compared by digest

    @property
    def different(self) -> bool:
        return self.status in ("differ", "mismatch", "only-a", "only-b")

    @property
    def launch_snapshot(self) -> Snapshot:
        snap = self.a or self.b
        assert snap is not None
        return snap


def _keys(snapshots: list[Snapshot]) -> dict[PairKey, Snapshot]:
    """Alignment keys: (kernel, occurrence, arg, phase) and, when several processes launched
    the same kernel, the n-th record with that key in (pid, launch) order."""
    seen: Counter[tuple[str, int, int, str]] = Counter()
    keyed: dict[PairKey, Snapshot] = {}
    for snap in in_launch_order(snapshots):
        r = snap.record
        base = (r.kernel, r.occurrence, r.arg, r.phase)
        keyed[base + (seen[base],)] = snap
        seen[base] += 1
    return keyed


def align(a: Run, b: Run, kernel: str | KernelPattern | None = None) -> list[PairResult]:
    """Pairs in A's launch order, then snapshots only B has, in B's launch order."""
    pattern = kernel_pattern(kernel)

    def keep(s: Snapshot) -> bool:
        return pattern is None or pattern.matches(s.record.kernel, s.record.mangled)

    ka = _keys([s for s in a.snapshots if keep(s)])
    kb = _keys([s for s in b.snapshots if keep(s)])
    pairs = [PairResult(k, sa, kb.get(k)) for k, sa in ka.items()]
    pairs += [PairResult(k, None, sb) for k, sb in kb.items() if k not in ka]
    for pair in pairs:
        if pair.b is None:
            pair.status = "only-a"
        elif pair.a is None:
            pair.status = "only-b"
    return pairs
