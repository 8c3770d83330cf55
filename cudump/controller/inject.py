"""--inject RUN:LAUNCH: one launch run on the inputs another run recorded for it.

Until the launch is seen, every function of each process that may make it is wanted with
STOP, so that each launch asks the controller (MSG_BEGIN) as at a breakpoint. At launch
LAUNCH of the process matched with RUN's (by rank where both have ranks, else the n-th
process to make that launch for RUN's n-th), its kernel and buffers are checked against RUN's: a
launch of another kernel, a buffer of another size, is refused with one line and nothing is
done to it (the program runs on untouched). A launch that matches is held (PLAN_HALT), with
copies of its buffers after it in its plan, as a rule `when: after` on it would take. The
launching thread serves the stop (shim/stop.c); here, on the connection's thread, RUN's
"before" snapshots are written into the buffers through the staging area (MSG_WRITE, as
`set var` writes, remote_stop.write_held): whole where a buffer is contiguous, row by row
at the live pitch where it is an image in pitched memory, in pieces of the staging size.
Then the launch goes on. At the end of the run, what it left is compared with RUN's
"after" snapshots (analysis.transplant.outcome).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cudump.analysis.transplant.donor import Donor, DonorBuffer
from cudump.analysis.transplant.outcome import check_output
from cudump.console import say
from cudump.controller.interfaces import ProcessLink
from cudump.controller.remote_stop import write_held
from cudump.errors import CudumpError
from cudump.kernels.geometry import CopyPlan, GeometryError
from cudump.kernels.pattern import KernelPattern
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.launches.stop import TargetError
from cudump.policy.rules import Rule
from cudump.policy.snapshot.coordinator import Snapshots
from cudump.policy.snapshot.planned import PlannedCopy, PlannedLaunch
from cudump.rundir.formats import NPY
from cudump.rundir.injections import InjectionRecord, OutputCheck
from cudump.rundir.runs import load_array, short_kernel_name, snapshot_file
from cudump.wire import protocol as p

OPTION = "--inject"


def inject_rule() -> Rule:
    """What is taken of an injected launch: every buffer, after it ran, as .npy. It takes
    the launches it is handed (Snapshots.plan's `extra`), never any by its pattern."""
    return Rule(name=OPTION, path=Path(OPTION), line=0, matcher=KernelPattern("*"),
                when=frozenset({"after"}), formats=frozenset({NPY.name}), option=OPTION)


@dataclass
class Write:
    """One donor buffer and where it goes in the live launch."""

    buffer: DonorBuffer
    plan: CopyPlan


@dataclass
class Injection:
    """One --inject and how far it got."""

    donor: Donor
    rule: Rule
    reached: list[int] = field(default_factory=list)   # pids that made the launch, in order
    pid: int | None = None
    status: str = "waiting"      # waiting | held | written | refused | failed
    reason: str | None = None
    live_kernel: str | None = None
    live_occurrence: int | None = None
    writes: list[Write] = field(default_factory=list)
    buffers: int = 0
    bytes: int = 0
    after: list[PlannedCopy] = field(default_factory=list)

    def candidate(self, proc: ProcessState) -> bool:
        """Whether `proc` may still be the process it is made in: the one of RUN's rank
        where both have ranks (as `cudump diff` aligns processes), else any."""
        rank = self.donor.rank
        return self.status == "waiting" and (rank is None or proc.rank in (None, rank))

    def reached_by(self, proc: ProcessState) -> bool:
        """`proc` made the launch: whether it is the process it is made in (by rank, or
        the n-th process to make it for RUN's n-th)."""
        if self.donor.rank is not None and proc.rank is not None:
            return True                       # a candidate: of RUN's rank
        if proc.pid in self.reached:
            return False
        self.reached.append(proc.pid)
        return len(self.reached) == self.donor.position

    @property
    def name(self) -> str:
        return f"{OPTION} {self.donor.spec.text}"


class Injector:
    """The run's injections (connection threads call it; one lock guards them)."""

    def __init__(self, donors: list[Donor], snapshots: Snapshots,
                 bump: Callable[[], int]) -> None:
        self.injections = [Injection(d, inject_rule()) for d in donors]
        self.launches = {d.launch for d in donors}
        self.snapshots = snapshots
        self._bump = bump
        self._lock = threading.Lock()
        self._held: dict[tuple[int, int], Injection] = {}

    def wants(self, proc: ProcessState) -> bool:
        """Whether the process's launches must ask the controller (STOP) for now."""
        with self._lock:
            return any(inj.candidate(proc) for inj in self.injections)

    def take(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent) -> Injection | None:
        """The injection to make at this launch, checked (None: none). A launch that does not
        match RUN's is refused here, said in one line, and left alone."""
        if event.seq not in self.launches:
            return None
        with self._lock:
            found = None
            for inj in self.injections:
                if (inj.donor.launch != event.seq or not inj.candidate(proc)
                        or not inj.reached_by(proc)):
                    continue
                inj.pid, inj.live_kernel = proc.pid, func.demangled
                inj.live_occurrence, inj.status = event.occurrence, "held"
                found = inj
                break
        if found is None:
            return None
        self._bump()          # settled: processes no longer ask about every launch for it
        try:
            problem = self._check(found, proc, func, event)
        except Exception as err:  # a launch that cannot be checked is left alone
            problem = f"cannot check the launch ({type(err).__name__}: {err})"
        if problem is not None:
            self._refuse(found, problem)
            return None
        with self._lock:
            self._held[(proc.pid, event.seq)] = found
        return found

    def _check(self, inj: Injection, proc: ProcessState, func: FuncInfo,
               event: LaunchEvent) -> str | None:
        """Why RUN's inputs cannot be written into this launch (None: they can); the plan of
        each write otherwise."""
        donor = inj.donor
        if event.flags & p.LaunchFlag.GRAPH:
            return (f"launch {event.seq} of this run is a kernel of a CUDA graph launch; "
                    "inputs are injected into plain launches only")
        if not donor.same_kernel(func.demangled, func.mangled):
            mine, theirs = short_kernel_name(func.demangled), donor.short_kernel
            if mine == theirs:
                mine, theirs = func.demangled, donor.kernel
            return (f"launch {event.seq} of this run is {mine}, not {theirs} as in "
                    f"{donor.source}")
        try:
            reads = {(r.index, r.where): r for r in
                     self.snapshots.reads(proc, func, event, inj.rule)}
        except GeometryError as err:
            return str(err)
        for buffer in donor.inputs:
            read = reads.get((buffer.arg, buffer.offset))
            if read is None:
                return f"this launch has no buffer at {buffer.label}, which {donor.source} has"
            if read.plan is None:
                return f"{buffer.label}: {read.error or 'nothing to write to'}"
            if read.alloc is not None and read.alloc.kind == "host":
                return f"{buffer.label} points into host memory; cudump writes device memory"
            problem = buffer.fits(read.plan.height, read.plan.width_bytes, donor.source)
            if problem is not None:
                return f"sizes differ: {problem}"
            inj.writes.append(Write(buffer, read.plan))
        return None

    def _refuse(self, inj: Injection, reason: str) -> None:
        inj.status, inj.reason, inj.writes = "refused", reason, []
        say(f"cudump: error: {inj.name}: {reason}; nothing written, the program runs on "
            "untouched")

    def planned(self, inj: Injection, planned: PlannedLaunch | None) -> None:
        """The launch's plan: the copies after it that are compared with RUN's."""
        if planned is not None:
            inj.after = [c for c in planned.copies if c.rule is inj.rule]

    def holds(self, pid: int, seq: int) -> bool:
        with self._lock:
            return (pid, seq) in self._held

    def serve_stop(self, conn: ProcessLink, seq: int, stopped: dict[str, int]) -> None:
        """The launch is held (connection thread): write RUN's inputs, then let it go."""
        assert conn.proc is not None
        with self._lock:
            inj = self._held.pop((conn.proc.pid, seq))
        try:
            if stopped["sync_rc"] != 0:
                raise TargetError(f"waiting for the device before writing gave CUDA error "
                                  f"{stopped['sync_rc']}")
            for write in inj.writes:
                self._write(conn, inj, write)
            inj.status = "written"
        except (CudumpError, OSError, p.ProtocolError) as err:
            # A failed copy, a snapshot that cannot be read now, or the process gone.
            if inj.buffers or inj.bytes:
                inj.status, inj.reason = "failed", str(err)
                say(f"cudump: error: {inj.name}: writing stopped part way: {err}; the launch "
                    "runs on what was written")
            else:
                self._refuse(inj, str(err))
            if not isinstance(err, CudumpError):
                raise             # the connection is over: the process goes on alone
        conn.send(p.Kind.RESUME, p.RESUME.pack(mode=int(p.ResumeMode.CONTINUE)))

    @staticmethod
    def _write(conn: ProcessLink, inj: Injection, write: Write) -> None:
        """One buffer, in pieces that fit the staging area: rows at the live pitch."""
        plan = write.plan
        data = np.ascontiguousarray(write.buffer.load()).reshape(-1).view(np.uint8)
        limit = conn.shared.staging_size if conn.shared is not None else 0
        if limit <= 0:
            raise TargetError("the process has no staging area")
        contiguous = plan.height == 1 or plan.pitch == plan.width_bytes
        rows = [(plan.address, 0, plan.nbytes)] if contiguous else [
            (plan.address + r * plan.pitch, r * plan.width_bytes, plan.width_bytes)
            for r in range(plan.height)]
        for address, start, size in rows:
            for done in range(0, size, limit):
                n = min(limit, size - done)
                write_held(conn, address + done, data[start + done:start + done + n].tobytes())
                inj.bytes += n
        inj.buffers += 1

    def records(self, run_dir: Path) -> list[InjectionRecord]:
        """Each injection as the summary records it, its outputs compared with RUN's (once
        the run's snapshots are written)."""
        return [self._record(inj, run_dir) for inj in self.injections]

    def _record(self, inj: Injection, run_dir: Path) -> InjectionRecord:
        donor = inj.donor
        status, reason = inj.status, inj.reason
        if status == "waiting":
            status = "not-reached"
        elif status == "held":
            status, reason = "failed", "the process ended before the launch was held"
        record = InjectionRecord(
            source=donor.source, launch=donor.launch, kernel=donor.kernel,
            occurrence=donor.occurrence, source_pid=donor.pid, status=status,
            source_rank=donor.rank, pid=inj.pid, live_kernel=inj.live_kernel,
            live_occurrence=inj.live_occurrence, buffers=inj.buffers, bytes=inj.bytes,
            reason=reason)
        if status in ("written", "failed"):
            record.outputs = [self._output(inj, buffer, run_dir) for buffer in donor.outputs]
        return record

    def _output(self, inj: Injection, buffer: DonorBuffer, run_dir: Path) -> OutputCheck:
        copy = next((c for c in inj.after if (c.plan.arg, c.at) == (buffer.arg, buffer.offset)),
                    None)
        if copy is None:
            why = ("snapshots had stopped (the byte budget or a disk failure)"
                   if self.snapshots.state.stopped else "this launch has no such buffer")
            return check_output(buffer, None, missing=f"not snapshotted here: {why}")
        record = copy.record
        if record.status != "ok" or record.file is None:
            return check_output(buffer, None,
                                missing=f"not snapshotted here: {record.reason or 'no file'}")
        try:
            array = load_array(snapshot_file(run_dir, record))
        except CudumpError as err:
            return check_output(buffer, None, record.file, f"not readable here: {err}")
        return check_output(buffer, array, record.file)
