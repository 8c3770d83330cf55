"""The target: the first divergent launch of the digest runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cudump.analysis.bisect.errors import BisectError, NotReproduced
from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.runs import DivergentLaunch
from cudump.kernels.pattern import regex_source
from cudump.policy.rules import Rule
from cudump.rundir.manifest import SnapshotRecord


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
        if any(c in r.kernel for c in "*?") or regex_source(r.kernel) is not None:
            raise BisectError(f"cannot write a rule naming exactly {r.kernel!r}")
        return {"kernel": r.kernel, "match": "demangled"}

    def wants(self, pair: PairResult) -> bool:
        """Whether a pair of the snapshot runs is of this launch."""
        k = pair.key
        return (k[0] == self.record.kernel and k[1] == self.occurrence
                and k[4] == self.instance and k[5] == self.launch.pair.key[5])

    def rule_applies(self, rule: Rule) -> bool:
        return rule.matches(self.record.kernel, self.record.mangled)


DEFAULT_TARGET_RULE: dict[str, Any] = {"name": "cudump bisect", "args": "pointers"}


def not_reached(target: Target) -> NotReproduced:
    r = target.record
    return NotReproduced(f"the snapshot re-runs did not reach launch {r.launch} (occurrence "
                         f"{target.occurrence} of {r.kernel}); the program does not run the "
                         "same launches each time")
