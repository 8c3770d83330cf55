"""Two runs compared scope by scope: each occurrence of a scope in A against the same one in
B (scope_tree.ScopeKey), by what it left behind, then the first one that differs, narrowed
to its innermost module and, where both sides' launches inside it line up, to a launch.

Outputs a module declared (--module-outputs, declared.py) pair by their place in its return,
where both sides declared them and their types agree. Other outputs pair by geometry, in the
order of their last writes: the two implementations of a
module may launch other kernels and leave other temporaries, but the result a module hands
on is what it wrote last. Outputs group by their size in bytes; in a group with as many on
both sides, they pair in order; in one with more on one side, only the last-written of each
side pair (which of the earlier ones match cannot be told). Where both records have an
element type (not bytes) and their dtype or shape differ, they are not the same output and
stay unpaired; where one side has bytes only (a kernel whose signature gives no types), it
is compared as the other side's type. Outputs left over on either side are "unpaired":
listed, never a difference.

Compared within the tolerance as `cudump diff` compares (compare.py, by_digest.py):
digests compare exactly unless a tolerance is given and both records have sums of |x|.
A scope differs when one of its paired outputs differs beyond it; scopes in one run only
are listed and are not a difference (the two implementations may not have the same
modules, and nothing can be compared there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from cudump.analysis.diff.align import NO_RANK, PairKey, PairResult, kept_snapshots
from cudump.analysis.diff.arrays import compare_arrays
from cudump.analysis.diff.compare import compare_pair
from cudump.analysis.diff.declared import (
    UNDECIDED,
    OutputSnapshot,
    compare_part_digests,
    nbytes,
    parts,
)
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.scope_tree import (
    Launch,
    ScopeKey,
    ScopeOccurrence,
    ScopeTree,
    has_scopes,
    scope_tree,
)
from cudump.errors import CudumpError
from cudump.kernels.pattern import KernelPattern
from cudump.rundir.runs import Run, Snapshot

DIVERGED = ("differ", "mismatch")
UNTYPED = ("uint8", "int8")


def _typed(snap: Snapshot) -> tuple[str, tuple[int, ...]] | None:
    """A record's element type and shape, None where it holds bytes of no known type."""
    r = snap.record
    if r.dtype is None or r.shape is None or r.dtype in UNTYPED:
        return None
    return r.dtype, tuple(r.shape)


def geometry(snap: Snapshot) -> str:
    """`float32[8,256,14,14]`, or `4096 bytes`."""
    r = snap.record
    if r.dtype is not None and r.shape is not None:
        return f"{r.dtype}[{','.join(str(n) for n in r.shape)}]"
    size = nbytes(snap)
    return f"{size} bytes" if size is not None else "a buffer of unknown size"


def pair_key(snap: Snapshot, ranked: bool) -> PairKey:
    r = snap.record
    return (r.kernel, r.occurrence, r.arg, r.phase, 0,
            r.rank if ranked and r.rank is not None else NO_RANK)


@dataclass
class Outputs:
    """A scope occurrence's outputs, paired (in A's order of last writes) or not."""

    pairs: list[PairResult] = field(default_factory=list)
    places: list[int] = field(default_factory=list)       # each pair's place in A's outputs
    unpaired_a: list[Snapshot] = field(default_factory=list)
    unpaired_b: list[Snapshot] = field(default_factory=list)


def pair_declared(a: list[OutputSnapshot], b: list[OutputSnapshot], ranked: bool = False
                  ) -> Outputs:
    """Two sides' declared outputs paired by their place in the module's return, where
    their types agree."""
    theirs = {s.declared.index: s for s in b if s.declared is not None}
    out = Outputs()
    used: set[int] = set()
    for i, snap in enumerate(a):
        assert snap.declared is not None
        other = theirs.get(snap.declared.index)
        if other is None or _typed(snap) != _typed(other):
            out.unpaired_a.append(snap)
            continue
        out.pairs.append(PairResult(pair_key(snap, ranked), snap, other))
        out.places.append(i)
        used.add(snap.declared.index)
    out.unpaired_b = [s for s in b if s.declared is not None and s.declared.index not in used]
    return out


def pair_occurrences(a: ScopeOccurrence, b: ScopeOccurrence, ranked: bool = False) -> Outputs:
    """Two occurrences' outputs paired: by what the module returned where both sides
    declared it, else by the buffers each wrote (pair_outputs)."""
    if a.declared and b.declared:
        return pair_declared(a.declared_outputs(), b.declared_outputs(), ranked)
    return pair_outputs(a.written(), b.written(), ranked)


def pair_outputs(a: list[Snapshot], b: list[Snapshot], ranked: bool = False) -> Outputs:
    """Pair two sides' outputs (each in order of last write): see the module's text."""
    groups_a: dict[int | None, list[int]] = {}
    groups_b: dict[int | None, list[int]] = {}
    for groups, side in ((groups_a, a), (groups_b, b)):
        for i, snap in enumerate(side):
            groups.setdefault(nbytes(snap), []).append(i)
    matched: list[tuple[int, int]] = []
    for size, ia in groups_a.items():
        ib = groups_b.get(size, [])
        if size is None:
            continue
        # As many on both sides: in order. Otherwise only the last-written of each: which
        # of the earlier ones match is anyone's guess (temporaries, reused memory).
        together = zip(ia, ib, strict=True) if len(ia) == len(ib) else (
            [(ia[-1], ib[-1])] if ib else [])
        for i, j in together:
            ga, gb = _typed(a[i]), _typed(b[j])
            if ga is not None and gb is not None and ga != gb:
                continue
            matched.append((i, j))
    matched.sort()
    out = Outputs()
    for i, j in matched:
        out.pairs.append(PairResult(pair_key(a[i], ranked), a[i], b[j]))
        out.places.append(i)
    used_a, used_b = {i for i, _ in matched}, {j for _, j in matched}
    out.unpaired_a = [s for i, s in enumerate(a) if i not in used_a]
    out.unpaired_b = [s for j, s in enumerate(b) if j not in used_b]
    return out


def _untyped_view(snap: Snapshot) -> Snapshot:
    """The same record without an element type: its digest compares as bytes."""
    return replace(snap, record=replace(snap.record, dtype=None, shape=None))


def compare_output(pair: PairResult, tol: Tolerance) -> PairResult:
    """One output pair compared within `tol`; where one side is typed and the other holds
    bytes only, the bytes are read as the typed side's elements."""
    a, b = pair.a, pair.b
    assert a is not None and b is not None
    if parts(a, b) and (a.digest_only or b.digest_only):
        assert isinstance(a, OutputSnapshot) and isinstance(b, OutputSnapshot)
        pair.status, pair.reason = compare_part_digests(a, b)
        return pair
    ta, tb = _typed(a), _typed(b)
    if (ta is None) == (tb is None):
        return compare_pair(pair, tol)
    if a.digest_only or b.digest_only:
        bare = PairResult(pair.key, _untyped_view(a), _untyped_view(b))
        compare_pair(bare, tol)
        pair.status, pair.reason, pair.digests, pair.sums = (bare.status, bare.reason,
                                                            bare.digests, bare.sums)
        return pair
    typed = ta or tb
    assert typed is not None
    dtype, shape = typed
    try:
        arr_a, arr_b = (np.ascontiguousarray(s.load()).reshape(-1).view(dtype).reshape(shape)
                        if t is None else s.load() for s, t in ((a, ta), (b, tb)))
        pair.metrics = compare_arrays(arr_a, arr_b, tol)
        pair.status = "equal" if pair.metrics.equal else "differ"
    except (CudumpError, OSError, ValueError, MemoryError) as err:
        pair.status, pair.reason = "error", f"{type(err).__name__}: {err}"
    return pair


def _compared_as(snap: Snapshot) -> object:
    """What a record is compared as: itself, or the part of it a module declared."""
    if isinstance(snap, OutputSnapshot) and snap.declared is not None:
        return (snap.index, snap.offset, snap.declared.bytes, snap.declared.dtype)
    return snap.index


@dataclass
class ScopePair:
    """One occurrence of a scope in A and in B (either may be missing)."""

    key: ScopeKey
    a: ScopeOccurrence | None
    b: ScopeOccurrence | None
    outputs: Outputs = field(default_factory=Outputs)
    children: list[ScopePair] = field(default_factory=list)
    # equal | differ | only-a | only-b | unpaired (no output pairs) | error | pending |
    # undecided (an output is part of a larger digest that differs: its elements tell)
    status: str = "pending"

    @property
    def both(self) -> bool:
        return self.a is not None and self.b is not None

    @property
    def differing(self) -> list[tuple[int, PairResult]]:
        """The output pairs that differ beyond the tolerance, with their place in A's
        outputs."""
        return [(place, p) for place, p in zip(self.outputs.places, self.outputs.pairs,
                                               strict=True) if p.status in DIVERGED]

    def walk(self) -> Iterator[ScopePair]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True)
class LaunchesInside:
    """The launches inside the first differing scope, A's and B's: lined up (the same
    count of the same kernels) and the first pair that differs, or not."""

    a: list[Launch]
    b: list[Launch]
    first: PairResult | None = None     # the first differing pair of the first such launch

    @property
    def lined_up(self) -> bool:
        return len(self.a) == len(self.b) and all(
            x.kernel == y.kernel for x, y in zip(self.a, self.b, strict=True))


def launches_inside(pair: ScopePair, tol: Tolerance, ranked: bool = False) -> LaunchesInside:
    """Where both sides' launches in the occurrence line up, the first launch (in order)
    with a record that differs beyond `tol`, and its first such record."""
    assert pair.a is not None and pair.b is not None
    found = LaunchesInside(pair.a.launches, pair.b.launches)
    if not found.lined_up:
        return found
    for la, lb in zip(found.a, found.b, strict=True):
        theirs = {(s.record.arg, s.record.phase, s.record.extra.get("offset")): s
                  for s in lb.snapshots}
        for snap in la.snapshots:
            r = snap.record
            other = theirs.get((r.arg, r.phase, r.extra.get("offset")))
            if other is None:
                continue
            result = compare_output(PairResult(pair_key(snap, ranked), snap, other), tol)
            if result.status in DIVERGED:
                return replace(found, first=result)
    return found


@dataclass
class ScopeDiff:
    """Two runs aligned by scope: A's occurrences (and their pairs in B) in run order."""

    a: ScopeTree
    b: ScopeTree
    roots: list[ScopePair]
    ranked: bool
    # Outputs that differ between identical runs of A (bisect --baseline-runs), by their
    # launch-order key: a difference there is no divergence.
    noise: frozenset[PairKey] = frozenset()
    _compared: dict[tuple[object, object], PairResult] = field(default_factory=dict)

    @cached_property
    def pairs(self) -> list[ScopePair]:
        """Every scope pair, in A's run order (B's own ones after their A neighbours)."""
        return [p for root in self.roots for p in root.walk()]

    @property
    def in_common(self) -> bool:
        """Whether any scope occurrence is in both runs."""
        return any(p.both for p in self.pairs)

    def compare(self, pair: ScopePair, tol: Tolerance) -> ScopePair:
        """Fill in a scope pair's status (each output pair compared once, however many
        scopes hold it)."""
        if pair.a is None or pair.b is None:
            pair.status = "only-a" if pair.b is None else "only-b"
            return pair
        done: list[PairResult] = []
        for out in pair.outputs.pairs:
            assert out.a is not None and out.b is not None
            key = (_compared_as(out.a), _compared_as(out.b))
            if key not in self._compared:
                self._compared[key] = compare_output(out, tol)
            seen = self._compared[key]
            out.status, out.metrics, out.reason = seen.status, seen.metrics, seen.reason
            out.digests, out.sums = seen.digests, seen.sums
            if out.status in DIVERGED and out.key in self.noise:
                out.status = "noise"
                out.reason = "differs between identical runs of A (nondeterministic)"
            done.append(out)
        if any(p.status in DIVERGED for p in done):
            pair.status = "differ"
        elif any(p.status == "error" for p in done):
            pair.status = "error"
        elif any(p.status == UNDECIDED for p in done):
            pair.status = UNDECIDED         # parts of larger digests that differ
        elif not done:
            pair.status = "unpaired"
        else:
            pair.status = "equal"
        return pair

    def compare_all(self, tol: Tolerance) -> None:
        for pair in self.pairs:
            self.compare(pair, tol)

    def first_differing(self, differs: Callable[[ScopePair], bool] | None = None
                        ) -> ScopePair | None:
        """The first scope (in A's run order) whose outputs differ, narrowed to its
        innermost module: among its children, the first that differs, and so on; where no
        child differs (or it has none), that scope. `differs` judges a pair of both sides
        (default: its status, after compare_all)."""
        judge = differs or (lambda p: p.status == "differ")
        level, found = self.roots, None
        while True:
            nxt = next((p for p in level if p.both and judge(p)), None)
            if nxt is None:
                return found
            found, level = nxt, nxt.children

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pair in self.pairs:
            out[pair.status] = out.get(pair.status, 0) + 1
        return out


def _pair_level(a: list[ScopeOccurrence], b: list[ScopeOccurrence], ranked: bool
                ) -> list[ScopePair]:
    theirs = {occ.key: occ for occ in b}
    out: list[ScopePair] = []
    for occ in a:
        other = theirs.pop(occ.key, None)
        pair = ScopePair(occ.key, occ, other)
        if other is not None:
            pair.outputs = pair_occurrences(occ, other, ranked)
        pair.children = _pair_level(occ.children, other.children if other else [], ranked)
        out.append(pair)
    for occ in theirs.values():
        out.append(ScopePair(occ.key, None, occ,
                             children=_pair_level([], occ.children, ranked)))
    return out


def align_scopes(a: Run, b: Run, kernel: str | KernelPattern | None = None) -> ScopeDiff:
    """The two runs' scope occurrences paired (per rank where both runs have ranks); outputs
    paired, not yet compared (ScopeDiff.compare_all)."""
    sa, sb, ranked = kept_snapshots(a, b, kernel)
    ta, tb = scope_tree(a, sa, ranked), scope_tree(b, sb, ranked)
    return ScopeDiff(ta, tb, _pair_level(ta.roots, tb.roots, ranked), ranked)


def missing_scopes(a: Run, b: Run) -> str | None:
    """Why the runs cannot be aligned by scope ("run B has no scopes"), or None."""
    without = [label for label, run in (("A", a), ("B", b)) if not has_scopes(run.snapshots)]
    if not without:
        return None
    if len(without) == 2:
        return "neither run has scopes"
    return f"run {without[0]} has no scopes"
