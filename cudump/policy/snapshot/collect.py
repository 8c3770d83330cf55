"""What comes back once the shim has made a launch's copies, for the plain strategy and the
one that writes behind the program: streamed pieces taken out of staging as they come, then
what became of each copy (its bytes, its digest or scan, or why it failed) handed to the
route (route.py), and the capture line written."""

from __future__ import annotations

from typing import Any

import numpy as np

from cudump.kernels.geometry import CopyPlan
from cudump.launches.process import ProcessState
from cudump.policy.snapshot.capture import Captures
from cudump.policy.snapshot.nan import CatchUp
from cudump.policy.snapshot.place import Placer
from cudump.policy.snapshot.planned import (
    CUDA_ERROR_TIMEOUT,
    STALLED_COPY,
    Piece,
    PlannedCopy,
    PlannedLaunch,
    ReadStaging,
)
from cudump.policy.snapshot.route import (
    Computed,
    Copied,
    Failed,
    Outcome,
    ResultRoute,
    copy_failure,
    tool_failure,
)
from cudump.policy.snapshot.state import SnapshotState
from cudump.policy.snapshot.writer import WriteJob
from cudump.rundir import files as runfiles
from cudump.wire import protocol as p


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
    """The plain strategy's results (taken out of staging) and those of the one that writes
    behind the program (from its write-behind area), each handed to the route."""

    def __init__(self, state: SnapshotState, placer: Placer, captures: Captures,
                 route: ResultRoute, catch_up: CatchUp) -> None:
        self.state = state
        self.placer = placer
        self.captures = captures
        self.route = route
        self.catch_up = catch_up     # the result ring's (results.ResultDrain.catch_up)

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
        results = first_codes(pending.entries, codes)
        outcomes: list[Outcome] = []
        failures: dict[int, str | None] = {}   # id(copy) -> why it failed (None: it did not)
        for copy in pending.copies:
            rc = results.get(id(copy), -1)
            failure = copy_failure(rc, launch_rc, sync_rc, copy.failed)
            failures[id(copy)] = failure
            if failure is not None:
                outcomes.append(Failed(copy, tool_failure(copy, rc, failure)))
            elif copy.tool is not None:
                outcomes.append(Computed(copy, bytes(read(copy.offset, p.TOOL_RESULT))))
            else:
                outcomes.append(Copied(copy, self._job(copy, read)))
        if pending.capture is not None and pending.ctx is not None:
            self.captures.write(pending.ctx, pending.args, pending.capture, failures)
        return self.route.deliver(pending, outcomes, self.catch_up)

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
        outcomes: list[Outcome] = []
        failures: dict[int, str | None] = {}
        for copy in pending.copies:
            rc = results.get(id(copy), -1)
            failure = copy_failure(rc, launch_rc, sync_rc, copy.failed) or bad.get(id(copy))
            if failure is None and copy.pieces is None and id(copy) not in whole:
                failure = "the copy was not made"
            failures[id(copy)] = failure
            if failure is not None or copy.tool is not None:
                outcomes.append(Failed(copy, tool_failure(
                    copy, rc, failure or "a scan cannot be written behind the program")))
            elif copy.pieces is not None:
                outcomes.append(Copied(copy, write_job(
                    copy, None, streamed=True, fill=fills.get(id(copy), []),
                    target=lambda c=copy: self.placer.open_target(c), behind=True)))
            else:
                outcomes.append(Copied(copy, write_job(
                    copy, plan_array(whole[id(copy)], copy.plan), behind=True)))
        if pending.capture is not None and pending.ctx is not None:
            self.captures.write(pending.ctx, pending.args, pending.capture, failures)
        self.route.deliver(pending, outcomes, self.catch_up)

    @staticmethod
    def _job(copy: PlannedCopy, read: ReadStaging) -> WriteJob:
        """A copy made: its job for the writer thread (its bytes copied out of staging, which
        the next launch reuses)."""
        if copy.target is not None:
            return write_job(copy, copy.target, streamed=True)
        return write_job(copy, plan_array(read(copy.offset, copy.plan.nbytes),
                                          copy.plan).copy())
