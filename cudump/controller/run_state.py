"""The state of one run, shared by every process's connection, and what is wanted of each
kernel function.

The shim is mechanism and this is policy: each process tells the controller
which kernel functions it meets, the controller decides what it wants of each
(trace, snapshots, stops), and the shim caches the answer with the control
generation it holds for, so that a launch nobody wants never comes here.
When breakpoints or rules change, the controller bumps the generation in every
process's control page and each function is asked about again at its next
launch.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudump.console import warn
from cudump.controller.compiled_ops import CompiledOps
from cudump.controller.debugger import DebugController
from cudump.controller.host_memory import available_bytes, behind_mib
from cudump.controller.inject import Injector
from cudump.controller.job_node import NodeOfJob
from cudump.controller.options import HOST_RING_SLOTS, RESULT_RING_SLOTS, RunOptions
from cudump.controller.shared_files import SharedFiles
from cudump.errors import CudumpError
from cudump.kernels.geometry import Allocation
from cudump.kernels.unmatched import SeenKernel
from cudump.launches.process import DeclaredOutput, FuncInfo, ProcessState, pointer_allocation
from cudump.launches.stop import StopInfo
from cudump.policy.snapshot.coordinator import Snapshots
from cudump.policy.snapshot.writer import Release
from cudump.policy.trace import LaunchFeed, TraceDrain, TraceWriter, hear_collectives
from cudump.rundir.layout import TRACE_FILE
from cudump.rundir.manifest import ManifestWriter
from cudump.rundir.outputs import OutputFormatError, OutputRecord, OutputWriter, parse_type
from cudump.rundir.summary import RunSummary
from cudump.rundir.timeline import Timeline
from cudump.wire import protocol as p
from cudump.wire.shm import FlightRing, SharedFile


class Controller:
    """State shared by all connections of one run."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        # --layers and scans: the kernels a compiled program's compiler described (XLA's
        # dump): their operations and their arguments' element types
        self.compiled_ops = (CompiledOps(options.run_dir) if options.reads_compiled_ops
                             else None)
        self.token = secrets.token_hex(p.TOKEN_SIZE // 2)
        try:
            self.trace = TraceWriter(options.run_dir) if options.trace else None
        except OSError as err:   # before the program starts: one line, not a traceback
            raise CudumpError(f"cannot create {options.run_dir / TRACE_FILE}: "
                              f"{err.strerror or err}") from None
        self.timeline: Timeline | None = None
        if options.timeline is not None:
            try:
                self.timeline = Timeline(options.timeline, options.argv)
            except OSError as err:
                if self.trace is not None:
                    self.trace.close()
                raise CudumpError(f"--timeline {options.timeline}: cannot write it: "
                                  f"{err.strerror or err}") from None
        sinks = [s for s in (self.trace, self.timeline) if s is not None]
        # --trace and --timeline take the same launch events from the shim.
        self.feed = LaunchFeed(sinks) if sinks else None
        self.drain = TraceDrain(self.feed) if self.feed is not None else None
        self.lock = threading.Lock()
        self.processes: list[ProcessState] = []
        self.shared: dict[int, SharedFile] = {}
        self.written_behind = 0    # of the processes whose shared files are closed
        self.generation = 1
        self.allocations = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self.protocol_errors = 0
        self.nan_halted = False      # --break-on-nan stops once, at the first producer
        self._manifest: ManifestWriter | None = None
        snapshot_rules = [r for r in options.rules if r.takes_buffers]
        # --inject snapshots its launches' buffers after them with rules of its own.
        self.snapshots = (Snapshots(snapshot_rules, options.run_dir, options.max_bytes,
                                      self.manifest, options.max_bytes_default, self.bump)
                          if snapshot_rules or options.injections else None)
        self.injector = (Injector(options.injections, self.snapshots, self.bump)
                         if self.snapshots is not None and options.injections else None)
        self.debugger = DebugController(self) if options.debugging else None
        # --job: one node of a job (blobs, triggers; --flight: the other nodes' triggers)
        self.node = (NodeOfJob(options.job, options.run_dir,
                             self._rings if options.flight_slots else None, self._first_error)
                     if options.job is not None else None)
        if self.node is not None and self.snapshots is not None:
            self.snapshots.state.blobs = self.node.blobs
            self.snapshots.state.on_nan = self.node.nan
        self._closed = False
        self.shared_files = SharedFiles(self.new_shared)
        self.timeline_written: Path | None = None
        # The kernel functions that ran (in every process), as summary() finds them.
        self.launched: set[SeenKernel] = set()
        # --module-outputs: outputs.jsonl, made at the first tensor a module returns
        self._outputs: OutputWriter | None = None
        self._output_warned = False

    def _rings(self) -> list[tuple[ProcessState, FlightRing]]:
        """Each process's flight ring as it is now (none once the run is closing)."""
        with self.lock:
            if self._closed:
                return []
            rings = [(proc, self.shared[proc.pid].flight()) for proc in self.processes
                     if proc.pid in self.shared]
        return [(proc, ring) for proc, ring in rings if ring is not None]

    def _first_error(self) -> tuple[ProcessState, int] | None:
        """The first process (in the order they came) whose calls returned a CUDA error."""
        with self.lock:
            for proc in self.processes:
                shared = None if self._closed else self.shared.get(proc.pid)
                error = shared.first_error() if shared is not None else 0
                if error:
                    return proc, error
        return None

    def connection_ended(self, shared: SharedFile) -> None:
        """A process's connection is over: once the writer has written what lies in its
        write-behind area, the area's pages go back to the system."""
        if not shared.behind_size:
            return
        if self.snapshots is not None and not self._closed:
            self.snapshots.writer.put(Release(shared.free_behind))
        else:
            shared.free_behind()

    def new_shared(self, name: str, reserved: int = 0) -> SharedFile:
        """A process's shared memory, sized for what this run asks of it (`reserved`: memory
        that write-behind areas made before will still take)."""
        options, snapshots = self.options, self.snapshots
        return SharedFile(name, options.staging_bytes,
                          options.ring_slots if self.traced else 0,
                          RESULT_RING_SLOTS if snapshots is not None else 0,
                          scratch_mib=options.scratch_bytes >> 20,
                          flight_slots=options.flight_slots,
                          host_slots=HOST_RING_SLOTS if snapshots is not None
                          and snapshots.records_host_writes else 0,
                          behind_mib=behind_mib(options, available_bytes(), reserved))

    @property
    def manifest(self) -> ManifestWriter:
        with self.lock:
            if self._manifest is None:
                self._manifest = ManifestWriter(
                    self.options.run_dir,
                    self.timeline.record if self.timeline is not None else None)
            return self._manifest

    @property
    def traced(self) -> bool:
        """Whether every launch is reported (--trace, --timeline)."""
        return self.feed is not None

    # -- decisions ----------------------------------------------------------------

    def decide(self, proc: ProcessState, func: FuncInfo) -> tuple[int, list[p.Selector]]:
        """What is wanted of a function's launches, and its rules the shim counts."""
        # A collective's launches are always heard of, to number them (collectives.py).
        wants = p.Want.TRACE if self.traced or func.collective is not None else p.Want(0)
        selectors: list[p.Selector] = []
        if self.snapshots is not None and self.snapshots.wants(proc, func):
            wants |= p.Want.SNAPSHOT
            if self.snapshots.captures_launches(proc, func):
                wants |= p.Want.CAPTURE
            selectors, counted = self.snapshots.selectors(proc, func)
            if counted:
                wants |= p.Want.COUNTED
        if self.debugger is not None and self.debugger.wants_stop(func):
            wants |= p.Want.STOP
        if self.injector is not None and self.injector.wants(proc):
            wants |= p.Want.STOP     # each launch asks, until the injected one is seen
        return int(wants), selectors

    def bump(self) -> int:
        """Wants may have changed: every process asks again at its next launch."""
        with self.lock:
            self.generation += 1
            for shared in self.shared.values():
                shared.set_generation(self.generation)
            return self.generation

    def each_shared(self, fn: Callable[[SharedFile], None]) -> None:
        with self.lock:
            for shared in self.shared.values():
                fn(shared)

    # -- bookkeeping --------------------------------------------------------------

    def add_process(self, proc: ProcessState, shared: SharedFile) -> None:
        with self.lock:
            self.processes.append(proc)
            self.shared[proc.pid] = shared
            shared.set_generation(self.generation)
        if self.timeline is not None:
            self.timeline.process(proc)
        if self.drain is not None:
            proc.collectives.ring_head = lambda: shared.ring_head  # launches come through it
            self.drain.add(proc, shared)
        if self.snapshots is not None:
            self.snapshots.attach(proc, shared)

    def launches_heard(self, proc: ProcessState, rows: list[list[Any]]) -> None:
        """Launch events sent as messages: to the trace's sinks; without a trace, only a
        collective's launches come, heard of to number them (collectives.py)."""
        if self.feed is not None:
            self.feed.launches(proc, rows)
        else:
            hear_collectives(proc, rows)

    def stopped(self, info: StopInfo) -> None:
        """A launch is held at the prompt."""
        if self.timeline is not None:
            self.timeline.stop(info)

    def on_output(self, proc: ProcessState, out: DeclaredOutput) -> None:
        """A tensor a module returned (--module-outputs): a line of outputs.jsonl. One with
        a type cudump cannot read is left out, said once."""
        try:
            dtype, shape = parse_type(out.type)
        except OutputFormatError as err:
            if not self._output_warned:
                self._output_warned = True
                warn(f"process {proc.pid}: a module output is left out: {err}")
            return
        where = proc.scopes.where(out.scope, out.step)
        record = OutputRecord(proc.pid, out.launches, out.index, out.address, out.bytes,
                              dtype, shape, where, proc.rank)
        with self.lock:
            if self._outputs is None:
                self._outputs = OutputWriter(
                    self.options.run_dir,
                    lambda why: warn(f"{why}; modules' outputs are not recorded from now on"))
            writer = self._outputs
        writer.append(record)

    def on_memory(self, proc: ProcessState, fields: dict[str, int]) -> None:
        op, base = fields["op"], fields["base"]
        gone: Allocation | None = None
        with self.lock:
            if op in (p.MemoryOp.ALLOC, p.MemoryOp.MAP):
                alloc = pointer_allocation(fields)
                proc.allocations[base] = alloc
                if op == p.MemoryOp.ALLOC and alloc.kind != "host":
                    self.allocations += 1
                    self.live_bytes += alloc.size
                    self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            else:
                gone = proc.allocations.pop(base, None)
                if op == p.MemoryOp.FREE and gone is not None and gone.kind != "host":
                    self.live_bytes -= gone.size
        if gone is not None and self.snapshots is not None:
            self.snapshots.freed(proc, gone)

    def summary(self, exit_status: int) -> RunSummary:
        result = RunSummary(exit_status=exit_status, allocations=self.allocations,
                            peak_bytes=self.peak_bytes)
        with self.lock:
            for proc in self.processes:
                result.processes += 1
                result.pids.append(proc.pid)
                if proc.rank is not None:
                    result.ranks[proc.pid] = proc.rank
                if proc.stats is not None:
                    counts = {fid: (n, g) for fid, n, g in proc.stats["funcs"]}
                    result.captured_launches += int(proc.stats["captured"])
                    result.graph_launches += int(proc.stats["graph_launches"])
                elif proc.counted is not None:
                    # The process ended without saying goodbye (killed, _exit): its
                    # counts as the shim left them in shared memory.
                    counts = dict(proc.counted.funcs)
                    result.captured_launches += proc.counted.captured
                    result.graph_launches += proc.counted.graph_launches
                else:
                    # Nor any shared memory: count what it reported as it went.
                    counts = {fid: (f.launches, 0) for fid, f in proc.funcs.items()}
                for fid, (n, g) in counts.items():
                    func = proc.funcs.get(fid)
                    if func is not None and (n or g):
                        self.launched.add(SeenKernel(func.demangled, func.mangled))
                        result.kernels[func.demangled] += n + g
                        result.launches += n
                        if g:
                            result.graph_kernels[func.demangled] += g
                            result.graph_kernel_launches += g
        if self.snapshots is not None:
            self.snapshots.fill(result)
        if self.injector is not None:
            result.injections = self.injector.records(self.options.run_dir)
        if self.drain is not None:
            result.trace_dropped = self.drain.dropped()
        with self.lock:
            result.written_behind = self.written_behind + (
                0 if self._closed else sum(s.behind_sent for s in self.shared.values()))
        return result

    def close(self, complete: bool = True) -> None:
        """Ends the run's writers; `complete` is False when the program never ran (then no
        timeline is written)."""
        if self._closed:
            return
        if self.node is not None:
            self.node.stop()        # before the shared memory goes
        self._closed = True
        if self.debugger is not None:
            self.debugger.close()
        if self.drain is not None:
            self.drain.close()
        if self.trace is not None:
            self.trace.close()
        if self.snapshots is not None:
            self.snapshots.close()
        with self.lock:
            if self._manifest is not None:
                self._manifest.close()
            for proc in self.processes:
                shared = self.shared.get(proc.pid)
                if shared is not None and proc.stats is None:
                    # Kept for the summary: the mapping goes now.
                    proc.counted = shared.launch_counts(list(proc.funcs))
                if shared is not None:
                    proc.flight = shared.flight()   # for the flight recorder's report
            for shared in self.shared.values():
                self.written_behind += shared.behind_sent
                shared.close()
        self.shared_files.close()
        if self.timeline is not None:
            # Last: the snapshots' and the stops' events are in.
            self.timeline_written = self.timeline.close(complete)
