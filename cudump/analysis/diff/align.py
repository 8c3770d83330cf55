"""Two runs aligned snapshot by snapshot: PairResult and align."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from cudump.analysis.diff.metrics import Metrics
from cudump.kernels.pattern import KernelPattern
from cudump.rundir.runs import Run, Snapshot, in_launch_order, kernel_pattern

# kernel, occurrence, arg, phase, n-th such record, rank (-1: aligned without ranks)
PairKey = tuple[str, int, int, str, int, int]
NO_RANK = -1


@dataclass
class PairResult:
    """One aligned pair of snapshots and how it compared."""

    key: PairKey
    a: Snapshot | None
    b: Snapshot | None
    # equal | differ | mismatch | only-a | only-b | error | uncaptured (on either side) |
    # close (digests that differ, sums of |x| within the tolerance: by_digest.py)
    status: str = "pending"
    metrics: Metrics | None = None
    reason: str | None = None
    digests: tuple[str, str] | None = None     # A's and B's, when compared by digest
    sums: tuple[float, float] | None = None    # and their sums of |x|, with a tolerance
    view_as: str | None = None   # compare one-byte elements as this numpy type (bisect)

    @property
    def different(self) -> bool:
        return self.status in ("differ", "mismatch", "only-a", "only-b")

    @property
    def launch_snapshot(self) -> Snapshot:
        snap = self.a or self.b
        assert snap is not None
        return snap


def _keys(snapshots: list[Snapshot], by_rank: bool) -> dict[PairKey, Snapshot]:
    """Alignment keys: (kernel, occurrence, arg, phase) and, when several processes launched
    the same kernel, the n-th record with that key in (pid, launch) order; `by_rank`, per
    rank (the n-th record of that rank)."""
    seen: Counter[tuple[str, int, int, str, int]] = Counter()
    keyed: dict[PairKey, Snapshot] = {}
    for snap in in_launch_order(snapshots):
        r = snap.record
        rank = r.rank if by_rank and r.rank is not None else NO_RANK
        base = (r.kernel, r.occurrence, r.arg, r.phase, rank)
        keyed[(r.kernel, r.occurrence, r.arg, r.phase, seen[base], rank)] = snap
        seen[base] += 1
    return keyed


def has_ranks(snapshots: list[Snapshot]) -> bool:
    """Whether the processes of a run had ranks (RANK, OMPI_COMM_WORLD_RANK, ...)."""
    return any(s.record.rank is not None for s in snapshots)


def kept_snapshots(a: Run, b: Run, kernel: str | KernelPattern | None = None
                   ) -> tuple[list[Snapshot], list[Snapshot], bool]:
    """Each run's snapshots of the kernels `kernel` matches (all without it), and whether
    both runs have ranks (then they align rank by rank)."""
    pattern = kernel_pattern(kernel)

    def keep(s: Snapshot) -> bool:
        return pattern is None or pattern.matches(s.record.kernel, s.record.mangled)

    sa = [s for s in a.snapshots if keep(s)]
    sb = [s for s in b.snapshots if keep(s)]
    return sa, sb, has_ranks(sa) and has_ranks(sb)


def align(a: Run, b: Run, kernel: str | KernelPattern | None = None) -> list[PairResult]:
    """Pairs in A's launch order, then snapshots only B has, in B's launch order. Records
    align by kernel, occurrence, argument and phase, and per rank where both runs have
    ranks."""
    sa, sb, by_rank = kept_snapshots(a, b, kernel)
    # Where both runs have ranks, launches align per (rank, kernel, occurrence).
    ka, kb = _keys(sa, by_rank), _keys(sb, by_rank)
    pairs = [PairResult(k, sa, kb.get(k)) for k, sa in ka.items()]
    pairs += [PairResult(k, None, sb) for k, sb in kb.items() if k not in ka]
    for pair in pairs:
        if pair.b is None:
            pair.status = "only-a"
        elif pair.a is None:
            pair.status = "only-b"
    return pairs
