"""A run's launches grouped by the scopes they were made in (cudump.launches.scopes): each
time a scope was entered is one occurrence, with the launches made inside it and what it
left behind (its outputs).

The records name the scopes open at each launch (`scope`, outermost first), its `pass` and
`step` (Where.fields). An occurrence is keyed by (process or rank, step, pass, the chain of
scope names, n): the n-th time, from 0, that chain was entered in that step. A scope is
entered again when a launch is made in it after a launch made outside it (a module called
twice in a step is two occurrences); two calls with no recorded launch between them cannot
be told apart, and are one.

A scope's outputs are the buffers the launches inside it wrote: for each buffer (its process
and address), the `after` record of the last launch in the occurrence that wrote it, in the
order of those last writes. A launch wrote a buffer unless its `before` record of the same
argument holds the same bytes (same digest, or equal arrays); an `after` record without a
`before` one counts as written.

Where the run recorded what each module returned (--module-outputs, outputs.jsonl), an
occurrence's outputs are those tensors (declared.py): each declaration goes to the last
occurrence of its process, step, pass and chain whose first launch came before it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from cudump.analysis.diff.declared import OutputSnapshot, found_outputs
from cudump.errors import CudumpError
from cudump.launches.scopes import Where
from cudump.rundir.manifest import SnapshotRecord
from cudump.rundir.outputs import OutputRecord, read_outputs
from cudump.rundir.runs import Run, Snapshot, in_launch_order, short_kernel_name


@dataclass(frozen=True)
class ScopeKey:
    """An occurrence of a scope, the same in two runs of one model."""

    proc: int                      # the rank where both runs have ranks, else the process
    step: int | None
    pass_: str | None
    chain: tuple[str, ...]         # the scope's name and those around it, outermost first
    nth: int                       # the n-th time this chain was entered in this step (from 0)

    @property
    def name(self) -> str:
        return self.chain[-1]

    @property
    def depth(self) -> int:
        return len(self.chain)

    def text(self, ranked: bool = False) -> str:
        """`layer3.0.conv1 (forward, step 0)`, `relu (forward, step 0, call 2)`."""
        inside = [p for p in (self.pass_, None if self.step is None else f"step {self.step}",
                              f"call {self.nth + 1}" if self.nth else None,
                              f"rank {self.proc}" if ranked else None) if p]
        return self.name + (f" ({', '.join(inside)})" if inside else "")


@dataclass
class Launch:
    """One recorded launch: its records in launch order."""

    snapshots: list[Snapshot]
    where: Where

    @property
    def record(self) -> SnapshotRecord:
        """Its first record (the launch's fields are the same in each)."""
        return self.snapshots[0].record

    @property
    def kernel(self) -> str:
        return self.record.kernel

    @property
    def short(self) -> str:
        return short_kernel_name(self.kernel)

    @cached_property
    def written(self) -> list[Snapshot]:
        """Its `after` records of the buffers it wrote (see the module's text), in order;
        worked out once, however many scopes hold the launch."""
        before = {_buffer_arg(s): s for s in self.snapshots if s.record.phase == "before"}
        return [s for s in self.snapshots if s.record.phase == "after"
                and _written(before.get(_buffer_arg(s)), s)]


@dataclass
class ScopeOccurrence:
    key: ScopeKey
    parent: ScopeOccurrence | None = None
    launches: list[Launch] = field(default_factory=list)   # nested ones' too, in order
    children: list[ScopeOccurrence] = field(default_factory=list)
    declared: list[OutputRecord] = field(default_factory=list)   # what the module returned

    def outputs(self) -> list[Snapshot]:
        """What the occurrence left behind: the tensors it declared where it did, else the
        buffers it wrote (see the module's text)."""
        if self.declared:
            return list(self.declared_outputs())          # (as Snapshots)
        return self.written()

    def declared_outputs(self) -> list[OutputSnapshot]:
        """The tensors the module declared, each in the record of the launch inside the
        occurrence that last wrote it (declared.found_outputs)."""
        return found_outputs(self.declared, self.launches)

    def written(self) -> list[Snapshot]:
        """The `after` record of the last write to each buffer, in the order of those last
        writes."""
        last: dict[tuple[int, str, int], Snapshot] = {}
        for launch in self.launches:
            for snap in launch.written:
                buffer = (snap.process, snap.record.address, _offset(snap))
                last.pop(buffer, None)          # moved to the end: written last here
                last[buffer] = snap
        return list(last.values())

    def walk(self) -> Iterator[ScopeOccurrence]:
        """This occurrence and those inside it, in run order (preorder)."""
        yield self
        for child in self.children:
            yield from child.walk()


def _offset(snap: Snapshot) -> int:
    value = snap.record.extra.get("offset")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _buffer_arg(snap: Snapshot) -> tuple[int, int]:
    return (snap.record.arg, _offset(snap))


def _written(before: Snapshot | None, after: Snapshot) -> bool:
    """Whether a launch changed a buffer: its bytes before and after differ (where both
    were recorded and can be read)."""
    if before is None or not before.ok or not after.ok:
        return True
    if before.digest_only and after.digest_only:
        da, db = before.digest, after.digest
        return da is None or db is None or (da.value, da.bytes) != (db.value, db.bytes)
    if before.digest_only or after.digest_only:
        return True
    try:
        a, b = before.load(), after.load()
    except (CudumpError, OSError, ValueError, MemoryError):
        return True
    return a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


@dataclass
class ScopeTree:
    """A run's scope occurrences: the outermost ones in run order, each with those inside."""

    run: Run
    roots: list[ScopeOccurrence]
    launches: list[Launch]

    def walk(self) -> Iterator[ScopeOccurrence]:
        for root in self.roots:
            yield from root.walk()

    def by_key(self) -> dict[ScopeKey, ScopeOccurrence]:
        return {occ.key: occ for occ in self.walk()}


# The record fields Where.fields writes (a record keeps those it does not know in `extra`).
_WHERE_FIELDS = {"scope": "scope", "layer": "layer", "pass": "pass_", "step": "step",
                 "source": "source"}


def where_of(record: SnapshotRecord) -> Where:
    """Where a record's launch was made: its scope fields, kept in `extra` (or, should the
    record come to know them, as its own)."""
    data = dict(record.extra)
    for name, attribute in _WHERE_FIELDS.items():
        value = getattr(record, attribute, None)
        if value is not None and name not in data:
            data[name] = value
    return Where.from_fields(data)


def has_scopes(snapshots: list[Snapshot]) -> bool:
    """Whether any record names a scope it was made in."""
    return any(where_of(s.record).scopes for s in snapshots)


def launches_of(snapshots: list[Snapshot]) -> list[Launch]:
    """The recorded launches, in launch order (processes in manifest order)."""
    grouped: dict[tuple[int, int, int, int], list[Snapshot]] = {}
    for snap in in_launch_order(snapshots):
        grouped.setdefault(snap.launch_key(), []).append(snap)
    return [Launch(snaps, where_of(snaps[0].record))
            for snaps in grouped.values()]


def scope_tree(run: Run, snapshots: list[Snapshot] | None = None,
               by_rank: bool = False) -> ScopeTree:
    """The scope occurrences of `snapshots` (default: all the run's), per rank where
    `by_rank`, else per process."""
    launches = launches_of(run.snapshots if snapshots is None else snapshots)
    roots: list[ScopeOccurrence] = []
    entered: Counter[tuple[int, int | None, str | None, tuple[str, ...]]] = Counter()
    stack: list[ScopeOccurrence] = []
    state: tuple[int, int | None] | None = None
    for launch in launches:
        r = launch.record
        proc = r.rank if by_rank and r.rank is not None else launch.snapshots[0].process
        w = launch.where
        if (proc, w.step) != state:         # another process, or the next step: all closed
            stack, state = [], (proc, w.step)
        chain = w.scopes
        keep = 0
        while (keep < len(stack) and keep < len(chain)
               and stack[keep].key.chain == chain[:keep + 1]):
            keep += 1
        del stack[keep:]
        for depth in range(keep, len(chain)):
            prefix = chain[:depth + 1]
            counted = (proc, w.step, w.pass_, prefix)
            occ = ScopeOccurrence(ScopeKey(proc, w.step, w.pass_, prefix, entered[counted]),
                                  stack[-1] if stack else None)
            entered[counted] += 1
            (stack[-1].children if stack else roots).append(occ)
            stack.append(occ)
        for occ in stack:
            occ.launches.append(launch)
    tree = ScopeTree(run, roots, launches)
    # the run's outputs.jsonl: none for a run made without --module-outputs; a line that
    # is not a module output is a RunFileError naming it
    _attach(tree, read_outputs(run.path))
    return tree


def _attach(tree: ScopeTree, declared: list[OutputRecord]) -> None:
    """Each declaration to its occurrence: of its process, step, pass and chain, the last
    whose first launch came before it (see the module's text)."""
    if not declared:
        return
    places: dict[tuple[int, int | None, str | None, tuple[str, ...]],
                 list[tuple[int, ScopeOccurrence]]] = {}
    for occ in tree.walk():
        if occ.launches:
            first = occ.launches[0].record
            places.setdefault((first.pid, occ.key.step, occ.key.pass_, occ.key.chain),
                              []).append((first.launch, occ))
    for out in declared:
        w = out.where
        found = None
        for first, occ in places.get((out.pid, w.step, w.pass_, w.scopes), []):
            if first <= out.launches:
                found = occ
        if found is not None:
            found.declared.append(out)
