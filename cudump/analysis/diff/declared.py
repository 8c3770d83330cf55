"""A scope's outputs as the program declared them (--module-outputs, rundir/outputs.py): the
tensors a PyTorch module returned, each found in the record of the launch inside the scope
that last wrote it, and compared as exactly that tensor.

cudump records a buffer from the pointer a kernel was given to the end of its allocation,
and inside a caching allocator's block that may be megabytes holding other tensors. A
declared output is the bytes [offset, offset + size) of such a record, with the tensor's own
element type and shape: its pairs are made by the module's return (its n-th tensor on each
side), not guessed by size, and its elements are compared without the rest of the block.

A digest covers the whole record. Where the output is all of it, the digest (and its sum of
|x|) is the output's; where it is a part, equal digests still mean equal outputs, but
digests that differ may differ only outside it, so only the elements can tell: the pair is
"undecided" (UNDECIDED), which bisect settles by snapshots and diff reports as such.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from cudump.errors import SnapshotError
from cudump.rundir.outputs import OutputRecord
from cudump.rundir.runs import Digest, Snapshot


class Writes(Protocol):
    """A launch, by the records of what it wrote (scope_tree.Launch)."""

    @property
    def written(self) -> list[Snapshot]: ...


UNDECIDED = "undecided"
PART_OF_DIGEST = ("the digests cover the output's whole allocation from it on, which "
                  "differs: only its elements can tell whether the output does")


def nbytes(snap: Snapshot) -> int | None:
    """The size of a recorded buffer in bytes, None where the record does not say."""
    if snap.digest_only and snap.digest is not None:
        return snap.digest.bytes
    r = snap.record
    if r.dtype is None or r.shape is None:
        return None
    try:
        return int(np.dtype(r.dtype).itemsize * math.prod(r.shape))
    except TypeError:
        return None


def _covering(snap: Snapshot, out: OutputRecord) -> int | None:
    """The output's offset in a record that holds all its bytes, or None."""
    try:
        start = int(snap.record.address, 16)
    except (TypeError, ValueError):
        return None
    offset = out.address - start
    size = nbytes(snap)
    if offset < 0 or (size is None and offset) or (size is not None and offset + out.bytes > size):
        return None
    return offset


@dataclass
class OutputSnapshot(Snapshot):
    """A declared output: bytes [offset, offset + declared.bytes) of `source`'s buffer, read
    as the declared type. Its record is the source's, with that type and shape."""

    source: Snapshot | None = None
    declared: OutputRecord | None = None
    offset: int = 0

    @classmethod
    def of(cls, source: Snapshot, declared: OutputRecord, offset: int) -> OutputSnapshot:
        record = replace(source.record, dtype=declared.dtype, shape=list(declared.shape))
        return cls(source.index, record, source.run_dir, source.process, source.job_node,
                   source=source, declared=declared, offset=offset)

    def again(self, source: Snapshot) -> OutputSnapshot:
        """The same output in another record of its launch (a re-run's)."""
        assert self.declared is not None
        return OutputSnapshot.of(source, self.declared, self.offset)

    @property
    def whole(self) -> bool:
        """Whether the output is all of the recorded buffer (its digest is the output's)."""
        assert self.source is not None and self.declared is not None
        return self.offset == 0 and nbytes(self.source) == self.declared.bytes

    @property
    def digest(self) -> Digest | None:       # (Snapshot's is a cached_property)
        assert self.source is not None
        return self.source.digest

    def load(self) -> np.ndarray:
        assert self.source is not None and self.declared is not None
        whole = np.ascontiguousarray(self.source.load()).reshape(-1).view(np.uint8)
        end = self.offset + self.declared.bytes
        if end > whole.size:
            raise SnapshotError(f"snapshot #{self.index} holds {whole.size} bytes, not the "
                                f"{self.declared.bytes} of the output at offset {self.offset}")
        part = whole[self.offset:end]
        dtype, shape = self.declared.dtype, self.declared.shape
        if dtype == "bfloat16":      # numpy has none: the same values as float32
            return (part.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
        return part.view(dtype).reshape(shape)


def parts(a: Snapshot | None, b: Snapshot | None) -> bool:
    """Whether a pair is two declared outputs of which one is only part of its record (its
    digest covers more than the output)."""
    return (isinstance(a, OutputSnapshot) and isinstance(b, OutputSnapshot)
            and not (a.whole and b.whole))


def compare_part_digests(a: OutputSnapshot, b: OutputSnapshot) -> tuple[str, str | None]:
    """(status, reason) of two declared outputs by their records' digests, where one is a
    part of its record: equal digests of equal records at the same offset mean equal
    outputs; otherwise only the elements can tell (see the module's text)."""
    da, db = a.digest, b.digest
    if (da is not None and db is not None and a.offset == b.offset
            and (da.value, da.bytes) == (db.value, db.bytes)):
        return "equal", None
    return UNDECIDED, PART_OF_DIGEST


def found_outputs(declared: Iterable[OutputRecord], launches: list[Writes]
                  ) -> list[OutputSnapshot]:
    """Each declared output (its last declaration of each place) in the record of the last
    launch among `launches` that wrote it; one no launch there wrote is left out (a module
    that returned its input, or a tensor written before the scope)."""
    last: dict[int, OutputRecord] = {}
    for out in declared:
        last[out.index] = out
    found: list[OutputSnapshot] = []
    for index in sorted(last):
        out = last[index]
        hit = next(((snap, offset) for launch in reversed(launches)
                    for snap in reversed(launch.written)
                    if (offset := _covering(snap, out)) is not None), None)
        if hit is not None:
            found.append(OutputSnapshot.of(hit[0], out, hit[1]))
    return found
