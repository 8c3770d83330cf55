"""What comes back once the shim has made a launch's copies: streamed pieces taken out of
staging as they come, then each copy's bytes (or its digest, or scan) handed to the writer,
its failure recorded, the capture line written and NaN/Inf producers followed up."""

from __future__ import annotations

from typing import Any

import numpy as np

from cudump.kernels.geometry import CopyPlan
from cudump.launches.process import ProcessState
from cudump.policy.snapshot.capture import Captures
from cudump.policy.snapshot.failures import Failures
from cudump.policy.snapshot.nan import NanWatch, Scans, add_scan
from cudump.policy.snapshot.place import Placer
from cudump.policy.snapshot.planned import (
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_SUPPORTED,
    CUDA_ERROR_TIMEOUT,
    STALLED_COPY,
    Piece,
    PlannedCopy,
    PlannedLaunch,
    ReadStaging,
)
from cudump.policy.snapshot.records import digest_fields
from cudump.policy.snapshot.state import SnapshotState
from cudump.policy.snapshot.writer import SnapshotWriter, WriteJob
from cudump.rundir import files as runfiles
from cudump.wire import protocol as p

# What the driver says when it cannot make a kernel of PTX text: no binary for the GPU, the
# PTX refused, no JIT compiler, a PTX version newer than the driver.
CANNOT_LOAD_PTX = frozenset({209, 218, 221, 222})


def tool_failure(copy: PlannedCopy, rc: int, failure: str) -> str:
    """Why cudump's kernel did not run, in the words of what it was asked to do."""
    if copy.tool is None:
        return failure
    if rc in CANNOT_LOAD_PTX:
        return (f"the driver cannot load cudump's kernel from its PTX (CUDA error {rc}); "
                "it needs a CUDA 13 driver")
    if rc == CUDA_ERROR_INVALID_VALUE:
        return ("the buffer does not lie inside one allocation cudump knows (or is not "
                "aligned to its elements), so cudump's kernel does not read it")
    if rc == CUDA_ERROR_NOT_SUPPORTED and copy.record.extra.get("graph") is not None:
        return ("the driver gives cudump no way to run its kernel inside this graph launch "
                f"(CUDA error {rc})")
    return failure.replace("the copy", "cudump's kernel")


def copy_failure(rc: int, launch_rc: int, sync_rc: int, failed: str | None) -> str | None:
    """Why a copy was not taken, from the shim's codes (`rc`: its first failing piece's,
    -1: not reported), or None."""
    if rc == -1:
        return (f"the launch failed with CUDA error {launch_rc}, so there is "
                "nothing after it to copy") if launch_rc else "the copy was not made"
    if rc == CUDA_ERROR_TIMEOUT or sync_rc == CUDA_ERROR_TIMEOUT:
        return STALLED_COPY
    if rc != 0:
        return f"the copy failed with CUDA error {rc}"
    if sync_rc != 0:
        return f"waiting for the copy failed with CUDA error {sync_rc}"
    return failed or None


def first_codes(entries: list[tuple[PlannedCopy, Piece | None]], codes: list[int]
                ) -> dict[int, int]:
    """id(copy) -> its result: the first failure of any of its pieces decides, -1 where the
    shim reported none."""
    results: dict[int, int] = {}
    for i, (copy, _) in enumerate(entries):
        rc = codes[i] if i < len(codes) else -1
        if results.get(id(copy), 0) == 0:
            results[id(copy)] = rc
    return results


def plan_array(data: memoryview, plan: CopyPlan) -> np.ndarray:
    """A copy's bytes seen as the array its plan says (no copy made)."""
    return np.frombuffer(data, dtype=np.uint8).view(np.dtype(plan.dtype)).reshape(plan.shape)


def write_job(copy: PlannedCopy, array: np.ndarray | None, **streamed: Any) -> WriteJob:
    """A copy's job for the writer: its record, formats and its rule's range for the PNG."""
    override = copy.rule.overrides.get(copy.plan.arg)
    return WriteJob(copy.record, array, copy.rule.formats,
                    override.range if override is not None else None, **streamed)


class Collector:
    """Takes the results of planned launches out of staging."""

    def __init__(self, state: SnapshotState, failures: Failures, placer: Placer,
                 writer: SnapshotWriter, captures: Captures, nan: NanWatch) -> None:
        self.state = state
        self.failures = failures
        self.placer = placer
        self.writer = writer
        self.captures = captures
        self.nan = nan

    def piece(self, proc: ProcessState, seq: int, index: int, rc: int,
              read: ReadStaging) -> None:
        """One piece of a streamed copy is in staging: take it before the shim reuses it."""
        pending = self.state.proc(proc.pid).pending.get(seq)
        if pending is None or not 0 <= index < len(pending.entries):
            return
        copy, piece = pending.entries[index]
        if piece is None or copy.failed:
            return
        if rc != 0:
            copy.failed = STALLED_COPY if rc == CUDA_ERROR_TIMEOUT else \
                f"the copy failed with CUDA error {rc}"
            return
        if copy.target is None:
            try:
                copy.target = self.placer.open_target(copy)
            except OSError as err:
                copy.failed = f"cannot create its file: {runfiles.write_error(err)}"
                return
        nbytes = piece.width * piece.height
        flat = copy.target.reshape(-1).view(np.uint8)
        try:
            flat[piece.dst:piece.dst + nbytes] = np.frombuffer(read(piece.offset, nbytes),
                                                               dtype=np.uint8)
        except OSError as err:
            copy.failed = f"could not write the snapshot: {runfiles.write_error(err)}"

    def collect(self, proc: ProcessState, seq: int, launch_rc: int, sync_rc: int,
                codes: list[int], read: ReadStaging) -> PlannedLaunch | None:
        """The shim finished the copies of launch `seq`: take the bytes, queue the writes.
        Returns copies to make now, after the launch, if what came back asks for them."""
        pending = self.state.proc(proc.pid).pending.pop(seq, None)
        if pending is None:
            return None
        scans: Scans = {}
        results = first_codes(pending.entries, codes)
        outcomes: dict[int, str | None] = {}   # id(copy) -> why it failed (None: it did not)
        for copy in pending.copies:
            rc = results.get(id(copy), -1)
            failure = copy_failure(rc, launch_rc, sync_rc, copy.failed)
            outcomes[id(copy)] = failure
            if failure is not None:
                self.placer.discard_target(copy)
                self.failures.fail(copy.record, tool_failure(copy, rc, failure))
                continue
            if copy.tool is not None and copy.tool != p.ToolMode.DIGEST:
                add_scan(scans, copy, bytes(read(copy.offset, p.TOOL_RESULT)))
                continue
            if copy.tool is not None:
                self._tool_result(copy, bytes(read(copy.offset, p.TOOL_RESULT)))
                continue
            self._write(copy, read)
        if pending.capture is not None and pending.ctx is not None:
            self.captures.write(pending.ctx, pending.args, pending.capture, outcomes)
        return self.nan.producers(pending, scans) if scans else None

    def collect_behind(self, proc: ProcessState, seq: int, launch_rc: int, sync_rc: int,
                       codes: list[int], where: list[int], read: ReadStaging) -> None:
        """The shim copied launch `seq`'s buffers into the write-behind area (`where`: each
        wire entry's offset there, `read` reads it) and went on: the writer thread writes
        them from there, with no copy in between. A deferred plan has plain copies only."""
        pending = self.state.proc(proc.pid).pending.pop(seq, None)
        if pending is None:
            return
        results = first_codes(pending.entries, codes)
        fills: dict[int, list[tuple[int, memoryview]]] = {}
        whole: dict[int, memoryview] = {}     # id(copy) -> its bytes in the area
        bad: dict[int, str] = {}              # id(copy) -> where the shim said they lie, wrong
        for i, (copy, piece) in enumerate(pending.entries):
            if (codes[i] if i < len(codes) else -1) != 0:
                continue
            try:
                if piece is None:
                    whole[id(copy)] = read(where[i], copy.plan.nbytes)
                else:
                    fills.setdefault(id(copy), []).append(
                        (piece.dst, read(where[i], piece.width * piece.height)))
            except (ValueError, IndexError) as err:
                bad[id(copy)] = f"the shim put its bytes out of place: {err}"
        outcomes: dict[int, str | None] = {}
        for copy in pending.copies:
            rc = results.get(id(copy), -1)
            failure = copy_failure(rc, launch_rc, sync_rc, copy.failed) or bad.get(id(copy))
            if failure is None and copy.pieces is None and id(copy) not in whole:
                failure = "the copy was not made"
            outcomes[id(copy)] = failure
            if failure is not None or copy.tool is not None:
                self.placer.discard_target(copy)
                self.failures.fail(copy.record, tool_failure(
                    copy, rc, failure or "a scan cannot be written behind the program"))
                continue
            if copy.pieces is not None:
                self.writer.put(write_job(copy, None, streamed=True, fill=fills.get(id(copy), []),
                                          target=lambda c=copy: self.placer.open_target(c),
                                          behind=True))
            else:
                self.writer.put(write_job(copy, plan_array(whole[id(copy)], copy.plan),
                                          behind=True))
        if pending.capture is not None and pending.ctx is not None:
            self.captures.write(pending.ctx, pending.args, pending.capture, outcomes)

    def _write(self, copy: PlannedCopy, read: ReadStaging) -> None:
        """A copy made: its bytes to the writer thread (copied out of staging, which the next
        launch reuses)."""
        if copy.target is not None:
            self.writer.put(write_job(copy, copy.target, streamed=True))
            return
        self.writer.put(write_job(copy, plan_array(read(copy.offset, copy.plan.nbytes),
                                                   copy.plan).copy()))

    def _tool_result(self, copy: PlannedCopy, result: bytes) -> None:
        """What cudump's kernel computed over a buffer, into its manifest record."""
        record, plan = copy.record, copy.plan
        if copy.tool == p.ToolMode.DIGEST:
            record.extra.update(digest_fields(plan, int.from_bytes(result[:8], "little"),
                                              copy.sum_of,
                                              int.from_bytes(result[8:16], "little")))
        state = self.state
        with state.lock:
            state.append_locked(record)
            state.tally.digests += 1
