"""The digests of launches the shim repeated on its own, in bulk: digests.bin.

A training loop or a model's forward under `--digest` makes tens of thousands of launches a
second, each with a handful of digests. Formatting a JSON line for each of them costs the
controller more than the program takes to make the launch, and the program then waits for
the controller. So the result drain (policy/snapshot/results.py) writes them as fixed-size
binary records, a batch at a time, and puts one line in the manifest for the batch
(`digest_batch`: where in digests.bin it is and how many records it has), after the
`digest_template` lines of the plans it uses. read_manifest gives them back as one record per
digest, at the place of the batch's line, like any other.

This module is the format, shared by the writer and the reader: a batch is its launches
(LAUNCH, one per launch) followed by its digests (DIGEST, each naming its launch's row in the
batch and its place among the template's digests), little-endian, with no padding between
them. The batch is written to digests.bin before its line is written to the manifest, so a
line never names bytes that are not there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from cudump.errors import SnapshotError
from cudump.rundir.layout import DIGESTS_FILE

BATCH = "digest_batch"     # the manifest line's key; its value is the file's name

LAUNCH = np.dtype({
    "names": ["launch", "stream", "occurrence", "pid", "plan", "device", "grid", "block"],
    "formats": ["<u8", "<u8", "<u8", "<u4", "<u4", "<i4", ("<u4", (3,)), ("<u4", (3,))],
    "offsets": [0, 8, 16, 24, 28, 32, 36, 48],
    "itemsize": 64,
})

HAS_SUM = 1                # DIGEST.flags: `sum` is the buffer's sum of |x| (float64)

DIGEST = np.dtype({
    "names": ["digest", "sum", "row", "copy", "flags"],
    "formats": ["<u8", "<f8", "<u4", "<u2", "<u2"],
    "offsets": [0, 8, 16, 20, 22],
    "itemsize": 24,
})


@dataclass(frozen=True)
class DigestBatch:
    launches: np.ndarray    # LAUNCH records, in the order the launches were made
    digests: np.ndarray     # DIGEST records, by launch row, then in the template's order

    def __post_init__(self) -> None:
        if self.launches.dtype != LAUNCH or self.digests.dtype != DIGEST:
            raise TypeError("a digest batch of the wrong record types")

    @property
    def nbytes(self) -> int:
        return self.launches.nbytes + self.digests.nbytes

    def to_bytes(self) -> bytes:
        return self.launches.tobytes() + self.digests.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, launches: int, digests: int
                   ) -> DigestBatch:
        """The batch in `data`, which must be exactly its size; SnapshotError if not, or
        if a digest names a launch row the batch does not have."""
        if len(data) != launches * LAUNCH.itemsize + digests * DIGEST.itemsize:
            raise SnapshotError(f"{DIGESTS_FILE} ends before the batch does")
        split = launches * LAUNCH.itemsize
        batch = cls(np.frombuffer(data, dtype=LAUNCH, count=launches),
                    np.frombuffer(data, dtype=DIGEST, count=digests, offset=split))
        if digests and int(batch.digests["row"].max()) >= launches:
            raise SnapshotError(f"a digest in {DIGESTS_FILE} names a launch its batch lacks")
        return batch

    def line(self, offset: int) -> str:
        """The batch's manifest line, for a batch written at `offset`. `launch`, its last
        launch, is there for readers of a growing manifest (rundir/watch.py)."""
        last = int(self.launches["launch"][-1]) if len(self.launches) else 0
        return json.dumps({BATCH: DIGESTS_FILE, "offset": offset,
                           "launches": len(self.launches), "digests": len(self.digests),
                           "launch": last}, separators=(",", ":"))


@dataclass(frozen=True)
class BatchLine:
    """A `digest_batch` manifest line, checked."""

    offset: int
    launches: int
    digests: int

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> BatchLine:
        if not isinstance(data[BATCH], str) or data[BATCH] != DIGESTS_FILE:
            raise SnapshotError(f"field '{BATCH}' should be \"{DIGESTS_FILE}\"")
        values = []
        for name in ("offset", "launches", "digests"):
            value = data.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SnapshotError(f"field '{name}' should be a whole number")
            if value >= 1 << 63:        # an offset or a count: no file is that large
                raise SnapshotError(f"field '{name}' should be a whole number below 2^63")
            values.append(value)
        return cls(*values)

    @property
    def size(self) -> int:
        return self.launches * LAUNCH.itemsize + self.digests * DIGEST.itemsize
