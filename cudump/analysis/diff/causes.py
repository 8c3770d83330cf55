"""Root causes and consequences among the divergent launches of two runs.

A launch diverges when a pair of its buffers differs (before or after it ran). Its inputs
are its buffers as they were before it ran (its `before` pairs):

- inputs matched (every `before` pair equal, or not captured on either side) and an output
  differs: a ROOT CAUSE, the launch itself made the difference;
- an input already differed: a CONSEQUENCE of something earlier;
- no `before` pair recorded, or one that could not be compared: inputs unknown.

Pairs the caller names as nondeterministic (they differ between identical runs) count as
equal here, as they do for the first divergent launch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import Enum

from cudump.analysis.diff.align import PairKey, PairResult
from cudump.analysis.diff.runs import DIVERGED, MATCHED, launches_in_order
from cudump.rundir.runs import Snapshot


class Inputs(Enum):
    MATCHED = "matched"
    DIFFERED = "differed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class DivergentLaunchCause:
    """One divergent launch and what its inputs say of it."""

    pairs: tuple[PairResult, ...]       # the launch's pairs, in order
    inputs: Inputs
    first: PairResult                   # its first differing pair

    @property
    def snapshot(self) -> Snapshot:
        return self.first.launch_snapshot

    @property
    def root_cause(self) -> bool:
        return self.inputs is Inputs.MATCHED


@dataclass
class Attribution:
    """The divergent launches of two runs, in A's launch order, sorted into root causes,
    consequences and launches whose inputs are unknown."""

    launches: list[DivergentLaunchCause] = field(default_factory=list)

    @property
    def root_causes(self) -> list[DivergentLaunchCause]:
        return [launch for launch in self.launches if launch.root_cause]

    @property
    def consequences(self) -> list[DivergentLaunchCause]:
        return [launch for launch in self.launches if launch.inputs is Inputs.DIFFERED]

    @property
    def unknown(self) -> list[DivergentLaunchCause]:
        return [launch for launch in self.launches if launch.inputs is Inputs.UNKNOWN]


def _differs(pair: PairResult, noise: Collection[PairKey]) -> bool:
    return pair.status in DIVERGED and pair.key not in noise


def _inputs(pairs: Sequence[PairResult], noise: Collection[PairKey]) -> Inputs:
    before = [p for p in pairs if p.key[3] == "before"]
    if not before:
        return Inputs.UNKNOWN
    if any(_differs(p, noise) or p.status in ("only-a", "only-b") for p in before):
        return Inputs.DIFFERED
    if all(p.status in MATCHED or p.key in noise for p in before):
        return Inputs.MATCHED
    return Inputs.UNKNOWN


def attribute(pairs: Sequence[PairResult], noise: Collection[PairKey] = ()) -> Attribution:
    """Every divergent launch (in A's launch order) and whether its inputs matched."""
    found = Attribution()
    for launch in launches_in_order(pairs):
        differing = [p for p in launch if _differs(p, noise)]
        if differing:
            found.launches.append(DivergentLaunchCause(tuple(launch), _inputs(launch, noise),
                                                       differing[0]))
    return found
