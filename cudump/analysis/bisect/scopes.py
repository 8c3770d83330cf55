"""bisect of runs whose records name scopes: the first module whose outputs differ, found in
the digest runs (cudump.analysis.diff.by_scope), and the rules that snapshot its launches on
each side (the two sides may launch other kernels: each gets its own rules).

Without a tolerance, digests say exactly which outputs differ. With one, an output pair whose
sums of |x| are further apart than it allows differs for sure, one whose digests are equal
(or, with --by-sums, whose sums are within it) does not, and the others are snapshotted,
--batch-size scopes at a time (the scope being judged and the next undecided ones in A's
order), and compared element by element.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cudump.analysis.bisect.errors import BisectError
from cudump.analysis.bisect.tolerance import FloatTypes
from cudump.analysis.diff.align import PairKey, PairResult
from cudump.analysis.diff.by_scope import (
    DIVERGED,
    LaunchesInside,
    ScopeDiff,
    ScopePair,
    align_scopes,
    compare_output,
    launches_inside,
)
from cudump.analysis.diff.declared import OutputSnapshot, parts
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.scope_tree import Launch, ScopeOccurrence
from cudump.kernels.pattern import regex_source
from cudump.policy.rules import Rule
from cudump.rundir.manifest import SnapshotRecord
from cudump.rundir.runs import Run, Snapshot


def digest_verdict(pair: ScopePair, tolerant: bool, by_sums: bool = False) -> bool | None:
    """Whether a compared scope pair of the digest runs differs: True, False, or None where
    only its elements can tell (a tolerance, and digests that differ without sums beyond
    it)."""
    statuses = [p.status for p in pair.outputs.pairs]
    if not tolerant:
        return pair.status == "differ"
    if any(p.status == "mismatch" or (p.status == "differ" and p.sums is not None)
           for p in pair.outputs.pairs):
        return True
    settled = (("equal", "uncaptured", "noise", "close") if by_sums
               else ("equal", "uncaptured", "noise"))
    if all(s in settled for s in statuses):
        return False
    return None


@dataclass
class ScopeFinding:
    """What step 2 found: the scopes aligned, the first module that differs (None: none)
    and the launches inside it."""

    diff: ScopeDiff
    first: ScopePair | None
    inside: LaunchesInside | None = None


# Output pairs the digests settle, with or without a tolerance.
SETTLED = ("equal", "uncaptured", "noise")

# Judges a batch of undecided scope pairs by their elements: id(pair) -> differs.
Snapshotter = Callable[[list[ScopePair]], dict[int, bool]]


@dataclass
class TolerantJudge:
    """Judges scope pairs within a tolerance: by the digests where they can tell, else by
    snapshots of the outputs, `batch` scopes at a time."""

    diff: ScopeDiff
    snapshot: Snapshotter
    batch: int = 32
    by_sums: bool = False
    known: dict[int, bool] = field(default_factory=dict)

    def __call__(self, pair: ScopePair) -> bool:
        verdict = digest_verdict(pair, True, self.by_sums)
        if verdict is not None:
            return verdict
        if id(pair) not in self.known:
            order = [p for p in self.diff.pairs if p.both]
            start = next(i for i, p in enumerate(order) if p is pair)
            chosen = [pair] + [p for p in order[start + 1:]
                               if id(p) not in self.known
                               and digest_verdict(p, True, self.by_sums) is None
                               ][:self.batch - 1]
            self.known.update(self.snapshot(chosen))
        return self.known[id(pair)]


def parts_of_digests(diff: ScopeDiff) -> bool:
    """Whether any paired output is a declared part of a larger digest (declared.py): its
    digests cannot say it is different, only its elements can."""
    return any(parts(p.a, p.b) for pair in diff.pairs for p in pair.outputs.pairs)


def find_scope(a: Run, b: Run, tol: Tolerance,
               judge: Callable[[ScopeDiff], Callable[[ScopePair], bool]] | None = None,
               noise: frozenset[PairKey] = frozenset(), aligned: ScopeDiff | None = None
               ) -> ScopeFinding:
    """The digest runs aligned by scope and compared within `tol`; the first module that
    differs (by what `judge` makes of the aligned scopes, default: their digests) and,
    where its launches line up on both sides, the first launch inside it that differs (by
    the digests, so only without a `judge`: digests cannot tell what is within a
    tolerance). `aligned`: the runs already aligned (align_scopes)."""
    diff = aligned if aligned is not None else align_scopes(a, b)
    diff.noise = noise
    diff.compare_all(tol)
    first = diff.first_differing(judge(diff) if judge is not None
                                 else lambda p: digest_verdict(p, False) is True)
    inside = (launches_inside(first, tol, diff.ranked)
              if first is not None and judge is None else None)
    return ScopeFinding(diff, first, inside)


def launch_rule(record: SnapshotRecord, when: str, fmt: str,
                raw: dict[str, Any] | None = None) -> dict[str, Any]:
    """A rule taking exactly this launch of its kernel (in each process): a user's rule
    `raw` narrowed to it (its arguments and overrides kept), or every pointer."""
    if record.mangled and not any(c in record.mangled for c in "*?"):
        kernel = {"kernel": record.mangled, "match": "mangled"}
    elif any(c in record.kernel for c in "*?") or regex_source(record.kernel) is not None:
        raise BisectError(f"cannot write a rule naming exactly {record.kernel!r}")
    else:
        kernel = {"kernel": record.kernel, "match": "demangled"}
    base = ({k: v for k, v in raw.items() if k not in ("every", "match", "kernel")}
            if raw is not None else {"name": f"cudump bisect: launch {record.launch}",
                                     "args": "pointers"})
    return {**base, **kernel, "skip": record.occurrence - 1, "count": 1, "when": when,
            "format": fmt}


def launch_rules(records: list[SnapshotRecord], when: str, fmt: str,
                 user: list[tuple[Rule, dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Rules for each launch (kernel and occurrence) among `records`, in order: the user's
    snapshot rules that take its kernel, narrowed to it, where rules were given (their
    digests came from them), else one taking every pointer."""
    seen: dict[tuple[str, str, int], SnapshotRecord] = {}
    for r in records:
        seen.setdefault((r.kernel, r.mangled, r.occurrence), r)
    rules: list[dict[str, Any]] = []
    for r in seen.values():
        if not user:
            rules.append(launch_rule(r, when, fmt))
            continue
        mine = [launch_rule(r, when, fmt, raw) for rule, raw in user
                if rule.matches(r.kernel, r.mangled)]
        if not mine:
            raise BisectError(f"no rule names {r.kernel}, though its digests came from the "
                              "rules")
        rules += mine
    return rules


Place = tuple[int, str, int, int, int, str, int]


def _place(snap: Snapshot) -> Place:
    """A record's place, the same in a re-run of the program: its rank (-1: none), kernel,
    occurrence, graph node, argument, phase and pointer offset. The process is left out: a
    re-run that records fewer processes numbers them otherwise. So is the launch number:
    the re-run's rule takes the kernel's same occurrence (launch_rule), but other kernels
    may launch more or less often before it (a compiled program's autotuning benchmarks
    its kernels as often as its timings say), so the number may not be the same."""
    r = snap.record
    offset = r.extra.get("offset")
    return (-1 if r.rank is None else r.rank, r.kernel, r.occurrence, snap.node,
            r.arg, r.phase, offset if isinstance(offset, int) else 0)


def _pick(found: list[Snapshot] | None, like: Snapshot) -> Snapshot | None:
    """Of the re-run's records at one place, the one of `like`'s process (by its place in
    the run) or, where only one process has it, that one."""
    if not found:
        return None
    return next((s for s in found if s.process == like.process),
                found[0] if len(found) == 1 else None)


class Rerun:
    """The snapshot re-runs, each record found by its place (_place)."""

    def __init__(self, snaps: tuple[Run, Run]) -> None:
        self.runs = snaps
        self._index: list[dict[Place, list[Snapshot]]] = [{}, {}]
        for index, run in zip(self._index, snaps, strict=True):
            for snap in run.snapshots:
                index.setdefault(_place(snap), []).append(snap)

    def find(self, side: int, snap: Snapshot) -> Snapshot | None:
        """The re-run of side `side` (0: A)'s record of a digest run's `snap`."""
        return _pick(self._index[side].get(_place(snap)), snap)

    def missing(self, side: int, snap: Snapshot) -> str:
        """What the re-run of side `side` recorded instead of `snap`: said when it has not
        got it, so that a program whose launches move from run to run shows how."""
        r = snap.record
        seen = sorted({(s.record.occurrence, s.record.arg, s.record.phase)
                       for s in self.runs[side].snapshots if s.record.kernel == r.kernel})
        shown = ", ".join(f"occurrence {o} arg {a} ({ph})" for o, a, ph in seen[:6])
        more = f" and {len(seen) - 6} more" if len(seen) > 6 else ""
        what = f"{shown}{more}" if seen else "no launch of it"
        return (f"{'AB'[side]}'s launch {r.launch} of {r.kernel} (occurrence {r.occurrence}, "
                f"arg {r.arg}, {r.phase}): its re-run recorded {what}")

    def pair(self, pair: PairResult, types: FloatTypes | None = None) -> PairResult | None:
        """An output pair of the digest runs, found again (None: a re-run lacks it)."""
        assert pair.a is not None and pair.b is not None
        a, b = self.find(0, pair.a), self.find(1, pair.b)
        if a is None or b is None:
            return None
        # a module's declared output: the same part of the re-run's record
        if isinstance(pair.a, OutputSnapshot):
            a = pair.a.again(a)
        if isinstance(pair.b, OutputSnapshot):
            b = pair.b.again(b)
        again = PairResult(pair.key, a, b)
        if types is not None:
            again.view_as = types.view(a.record)
        return again


def judge_snapshots(batch: list[ScopePair], snaps: tuple[Run, Run], tol: Tolerance,
                    types: FloatTypes | None = None) -> dict[int, bool]:
    """Each scope of a batch: whether an output differs beyond `tol` in the snapshot runs.
    An output the re-runs did not record is trouble (they did not run the same launches)."""
    verdicts: dict[int, bool] = {}
    rerun = Rerun(snaps)
    for pair in batch:
        wanted = [p for p in pair.outputs.pairs if p.status not in SETTLED]
        again = [q for q in (rerun.pair(p, types) for p in wanted) if q is not None]
        if len(again) < len(wanted):
            lost = next(rerun.missing(side, snap) for p in wanted if rerun.pair(p) is None
                        for side, snap in enumerate((p.a, p.b))
                        if snap is not None and rerun.find(side, snap) is None)
            raise BisectError(f"the snapshot re-runs did not record every output of "
                              f"{pair.key.text()}: the programs do not run the same launches "
                              f"each time ({lost})")
        verdicts[id(pair)] = any(compare_output(p, tol).status in DIVERGED for p in again)
    return verdicts


def rerun_scope(pair: ScopePair, snaps: tuple[Run, Run], types: FloatTypes | None = None
                ) -> ScopePair:
    """The scope occurrence's launches and outputs as the snapshot re-runs recorded them."""
    assert pair.a is not None and pair.b is not None

    rerun = Rerun(snaps)

    def again(occ: ScopeOccurrence, side: int) -> ScopeOccurrence:
        launches: list[Launch] = []
        for ln in occ.launches:
            found = [f for f in (rerun.find(side, s) for s in ln.snapshots) if f is not None]
            if found:
                launches.append(Launch(found, ln.where))
        return ScopeOccurrence(occ.key, launches=launches)

    out = ScopePair(pair.key, again(pair.a, 0), again(pair.b, 1))
    for place, output in zip(pair.outputs.places, pair.outputs.pairs, strict=True):
        found = rerun.pair(output, types)
        if found is not None:
            out.outputs.pairs.append(found)
            out.outputs.places.append(place)
    return out
