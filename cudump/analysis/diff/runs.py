"""Two runs compared: RunDiff, diff_runs and the first divergent launch."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field

from cudump.analysis.diff.align import PairKey, PairResult, align
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.parallel import compare_pairs
from cudump.kernels.pattern import KernelPattern
from cudump.rundir.runs import Run, Snapshot

DIVERGED = ("differ", "mismatch")
# "close": digests that differ, but sums of |x| within the tolerance (by_digest.py)
MATCHED = ("equal", "uncaptured", "close")


@dataclass(frozen=True)
class DivergentLaunch:
    """The first launch (in A's launch order) with a pair whose buffers differ."""

    pair: PairResult          # its first such pair (before ahead of after, then by argument)
    matched: int              # launches before it whose every pair was equal
    process: int              # its process's place among A's processes, from 1
    processes: int            # A's processes

    @property
    def snapshot(self) -> Snapshot:
        return self.pair.launch_snapshot


def launches_in_order(pairs: Sequence[PairResult]) -> list[list[PairResult]]:
    """A's launches in order, each as its pairs in order (pairs only B has are left out)."""
    by_launch: dict[tuple[int, int, int, int], list[PairResult]] = {}
    for pair in sorted((p for p in pairs if p.a is not None),
                       key=lambda p: p.launch_snapshot.sort_key()):
        by_launch.setdefault(pair.launch_snapshot.launch_key(), []).append(pair)
    return list(by_launch.values())


def divergent_launches(pairs: Sequence[PairResult], noise: Collection[PairKey] = (),
                       statuses: Collection[str] = DIVERGED) -> Iterator[DivergentLaunch]:
    """Each launch with a pair that differs (its status in `statuses`), in A's launch order;
    pairs in `noise` (nondeterministic: they differ between identical runs) count as
    matched. `matched` is how many launches before it had every pair equal."""
    processes = max((p.a.process for p in pairs if p.a is not None), default=0)
    matched = 0
    for launch in launches_in_order(pairs):
        differing = [p for p in launch if p.status in statuses and p.key not in noise]
        if differing:
            yield DivergentLaunch(differing[0], matched, differing[0].launch_snapshot.process,
                                  processes)
        elif all(p.status in MATCHED or p.key in noise for p in launch) and any(
                p.status == "equal" or p.key in noise for p in launch):
            matched += 1


def first_divergent_launch(pairs: Sequence[PairResult], noise: Collection[PairKey] = ()
                           ) -> DivergentLaunch | None:
    """The first launch with a pair that differs (divergent_launches)."""
    return next(divergent_launches(pairs, noise), None)


@dataclass
class RunDiff:
    """The outcome of comparing two runs."""

    pairs: list[PairResult]
    # Pairs that differ between identical runs of A (bisect --baseline-runs): not a divergence.
    noise: frozenset[PairKey] = field(default_factory=frozenset)

    @property
    def compared(self) -> list[PairResult]:
        return [p for p in self.pairs if p.a is not None and p.b is not None]

    @property
    def only_a(self) -> list[PairResult]:
        return [p for p in self.pairs if p.status == "only-a"]

    @property
    def only_b(self) -> list[PairResult]:
        return [p for p in self.pairs if p.status == "only-b"]

    @property
    def errors(self) -> list[PairResult]:
        return [p for p in self.pairs if p.status == "error"]

    @property
    def uncaptured(self) -> list[PairResult]:
        """Pairs that neither run captured, for the same reason: not a difference."""
        return [p for p in self.pairs if p.status == "uncaptured"]

    @property
    def first_divergent(self) -> PairResult | None:
        """The earliest pair (in A's launch order) whose buffers differ (noise aside)."""
        launch = self.first_divergent_launch
        return launch.pair if launch is not None else None

    @property
    def first_divergent_launch(self) -> DivergentLaunch | None:
        """The first launch with a pair whose buffers differ, and how many matched before."""
        return first_divergent_launch(self.pairs, self.noise)

    @property
    def exit_code(self) -> int:
        """0 equal within tolerance, 1 different, 2 some pair could not be compared."""
        if self.errors:
            return 2
        return 1 if any(p.different for p in self.pairs) else 0


def diff_runs(
    a: Run,
    b: Run,
    tol: Tolerance | None = None,
    *,
    kernel: str | KernelPattern | None = None,
    jobs: int | None = None,
    on_result: Callable[[PairResult], None] | None = None,
) -> RunDiff:
    """Align two runs and compare every pair; `on_result` sees each pair as it completes."""
    tol = tol or Tolerance()
    pairs = align(a, b, kernel)
    for pair in compare_pairs(pairs, tol, jobs):
        if on_result is not None:
            on_result(pair)
    return RunDiff(pairs)
