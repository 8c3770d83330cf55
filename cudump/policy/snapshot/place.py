"""Where a launch's copies go in the process's staging file: whole while they fit, the rest
streamed through what is left of it in pieces (each handed over before the next)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cudump.kernels.geometry import CopyPlan
from cudump.policy.snapshot.failures import Failures
from cudump.policy.snapshot.planned import Piece, PlannedCopy, PlannedLaunch
from cudump.policy.snapshot.writer import new_npy_memmap
from cudump.rundir import files as runfiles
from cudump.wire import protocol as p


def aligned(nbytes: int) -> int:
    return -(-nbytes // p.STAGING_ALIGN) * p.STAGING_ALIGN


def stream_window(room: int) -> int:
    """What of `room` bytes of staging is kept for streamed pieces when not every copy fits
    whole: a quarter, in whole alignment units, and at least one unit."""
    return max(p.STAGING_ALIGN, room // 4 // p.STAGING_ALIGN * p.STAGING_ALIGN)


def split_pieces(plan: CopyPlan, offset: int, free: int) -> list[Piece] | None:
    """Pieces of at most `free` bytes (whole rows), or None if not one row fits."""
    if plan.height == 1:
        step = free
        return [Piece(plan.address + start, min(step, plan.width_bytes - start), 1,
                      min(step, plan.width_bytes - start), start, offset)
                for start in range(0, plan.width_bytes, step)] if step > 0 else None
    rows = free // plan.width_bytes
    if rows < 1:
        return None
    return [Piece(plan.address + row * plan.pitch, plan.width_bytes, min(rows, plan.height - row),
                  plan.pitch, row * plan.width_bytes, offset)
            for row in range(0, plan.height, rows)]


class Placer:
    """Places copies in staging; those that cannot be placed are recorded as failed."""

    def __init__(self, run_dir: Path, failures: Failures) -> None:
        self.run_dir = run_dir
        self.failures = failures

    def place(self, copies: list[PlannedCopy], staging_size: int, base: int,
              stream: bool) -> PlannedLaunch | None:
        fail = self.failures.fail
        offset = base
        whole: list[PlannedCopy] = []
        streamed: list[PlannedCopy] = []
        # Where some copies cannot all be placed whole, a window is kept free for streaming
        # the rest in pieces: whole copies that filled the area would leave none, and a
        # buffer as large as the area (before and after) would fail.
        limit = staging_size
        if stream and base + sum(aligned(c.staging_bytes) for c in copies) > staging_size:
            limit = max(base, staging_size - stream_window(staging_size - base))
        for copy in copies:
            nbytes = copy.staging_bytes
            if offset + nbytes <= (staging_size if copy.tool is not None else limit):
                copy.offset = offset
                offset += aligned(nbytes)
                whole.append(copy)
            elif copy.tool is not None:
                fail(copy.record, "no staging left for its result; raise --staging")
            else:
                streamed.append(copy)
        free = staging_size - min(offset, staging_size)
        entries: list[tuple[PlannedCopy, Piece | None]] = [(c, None) for c in whole]
        kept = list(whole)
        for copy in streamed:
            if not stream:
                fail(copy.record, f"{copy.plan.nbytes} bytes do not fit the "
                     f"{free} bytes of staging left for this graph launch (inside a "
                     "graph a buffer is copied whole); raise --staging")
                continue
            pieces = split_pieces(copy.plan, offset, free)
            if pieces is None or len(entries) + len(pieces) > p.MAX_COPIES:
                why = (f"a row of {copy.plan.width_bytes} bytes does not fit the "
                       f"{free} bytes of staging left" if pieces is None else
                       f"it needs {len(pieces)} pieces, more than a launch can take")
                fail(copy.record, f"{why}; raise --staging")
                continue
            # Its file is made when the first piece comes (open_target): a launch whose
            # bytes are written behind the program never waits for it.
            copy.pieces = pieces
            entries.extend((copy, piece) for piece in pieces)
            kept.append(copy)
        if len(entries) > p.MAX_COPIES:
            for copy, _ in entries[p.MAX_COPIES:]:
                fail(copy.record, f"more than {p.MAX_COPIES} buffers in one launch; "
                     "narrow the rule's args")
            entries = entries[:p.MAX_COPIES]
            kept = [c for c in kept if any(e[0] is c for e in entries)]
        if not entries:
            return None
        return PlannedLaunch(kept, entries, offset)

    def open_target(self, copy: PlannedCopy) -> np.ndarray:
        """The .npy a streamed copy is written into, piece by piece (under a temporary name)."""
        assert copy.record.file is not None
        return new_npy_memmap(runfiles.temporary_name(self.run_dir / copy.record.file),
                              np.dtype(copy.plan.dtype), tuple(copy.plan.shape))

    def discard_target(self, copy: PlannedCopy) -> None:
        """The .npy a streamed copy that failed was being written into, removed."""
        if copy.target is not None and copy.record.file is not None:
            copy.target = None
            runfiles.temporary_name(self.run_dir / copy.record.file).unlink(missing_ok=True)
