"""The one route by which what came back of a launch's copies reaches the run: failures
recorded, bytes handed to the writer, digests into their records, and NaN/Inf scans weighed
(nan.NanWatch: the report, its records, and the snapshots that follow a producer).

Each copy strategy works out, its own way, what became of each copy and hands the list
here, in the launch's order: the plain one from staging (collect.Collector.collect), the
one that writes behind the program from its write-behind area (Collector.collect_behind),
and the repeated one from its result ring slot, whether the shim reported the slot
(MSG_REPEAT: a held launch, or one whose thread waited) or the ring's reader found it after
the hold was not served in time (repeat.Repeater). The last is `late`: the launch's stream
went on, so the snapshots a producer would have had are recorded as not taken, with why.
"""

from __future__ import annotations

from typing import NamedTuple

from cudump.policy.snapshot.failures import Failures
from cudump.policy.snapshot.nan import CatchUp, NanWatch, Scans, add_scan
from cudump.policy.snapshot.place import Placer
from cudump.policy.snapshot.planned import (
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_SUPPORTED,
    CUDA_ERROR_TIMEOUT,
    STALLED_COPY,
    PlannedCopy,
    PlannedLaunch,
)
from cudump.policy.snapshot.records import digest_fields
from cudump.policy.snapshot.state import SnapshotState
from cudump.policy.snapshot.writer import SnapshotWriter, WriteJob
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


class Failed(NamedTuple):
    """A copy not taken, and why (the manifest record's reason)."""

    copy: PlannedCopy
    reason: str


class Computed(NamedTuple):
    """What cudump's kernel computed over a buffer (a digest or a NaN/Inf scan): its
    result's bytes (protocol.h's TOOL_OUT words)."""

    copy: PlannedCopy
    result: bytes


class Copied(NamedTuple):
    """A copy's bytes, for the writer thread."""

    copy: PlannedCopy
    job: WriteJob


Outcome = Failed | Computed | Copied


class ResultRoute:
    """Where every copy strategy hands what became of a launch's copies."""

    def __init__(self, state: SnapshotState, failures: Failures, placer: Placer,
                 writer: SnapshotWriter, nan: NanWatch) -> None:
        self.state = state
        self.failures = failures
        self.placer = placer
        self.writer = writer
        self.nan = nan

    def deliver(self, launch: PlannedLaunch, outcomes: list[Outcome], catch_up: CatchUp,
                late: str | None = None) -> PlannedLaunch | None:
        """What became of `launch`'s copies, in order. Returns the copies to make now, after
        the launch, as it left its buffers (a NaN/Inf producer's snapshots), kept pending
        for the launch; with `late` (why they cannot be made) none: they are recorded as
        not taken. `catch_up` takes the process's result ring up to now."""
        scans: Scans = {}
        for outcome in outcomes:
            copy = outcome.copy
            if isinstance(outcome, Failed):
                self.placer.discard_target(copy)
                self.failures.fail(copy.record, outcome.reason)
            elif isinstance(outcome, Copied):
                self.writer.put(outcome.job)
            elif copy.tool == p.ToolMode.DIGEST:
                self._digest(copy, outcome.result)
            else:
                add_scan(scans, copy, outcome.result)
        if not scans:
            return None
        follow = self.nan.producers(launch, scans, catch_up)
        if follow is None:
            return None
        if late is not None:
            for copy in follow.copies:
                self.failures.fail(copy.record, late)
            return None
        assert launch.ctx is not None    # a producer's snapshots follow a launch of its own
        self.state.proc(launch.ctx.proc.pid).pending[launch.ctx.event.seq] = follow
        return follow

    def _digest(self, copy: PlannedCopy, result: bytes) -> None:
        """A digest of a buffer, into its manifest record."""
        record = copy.record
        record.extra.update(digest_fields(copy.plan, int.from_bytes(result[:8], "little"),
                                          copy.sum_of, int.from_bytes(result[8:16], "little")))
        state = self.state
        with state.lock:
            state.append_locked(record)
            state.tally.digests += 1
