"""The controller: runs the target under the shim and serves one connection per process.

The shim is mechanism and this is policy: each process tells the controller
which kernel functions it meets, the controller decides what it wants of each
(trace, snapshots, stops), and the shim caches the answer with the control
generation it holds for, so that a launch nobody wants never comes here.
When breakpoints or rules change, the controller bumps the generation in every
process's control page and each function is asked about again at its next
launch.

Messages are dispatched through a table keyed by the protocol's message kind.
"""

from __future__ import annotations

import hmac
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudump.console import say, warn
from cudump.controller.debugger import DebugController
from cudump.controller.gc_pauses import short_collections
from cudump.controller.preload import preload_env
from cudump.controller.process import (
    FuncInfo,
    ProcessState,
    decode_func,
    decode_launch,
    pointer_allocation,
)
from cudump.controller.target import StopInfo
from cudump.errors import CudumpError
from cudump.kernels.geometry import Allocation
from cudump.policy.rules import Rule
from cudump.policy.snapshot.coordinator import Snapshots
from cudump.policy.snapshot.planned import plan_payload
from cudump.policy.snapshot.results import slot_of
from cudump.policy.trace import (
    EVENT_FIELDS,
    TRACE_FILE,
    GraphLaunch,
    LaunchFeed,
    TraceDrain,
    TraceWriter,
)
from cudump.rundir.manifest import ManifestWriter
from cudump.rundir.summary import RunSummary
from cudump.rundir.timeline import Timeline
from cudump.wire import protocol as p
from cudump.wire.shm import SharedFile

# How long to wait, once the target has exited, for its processes' last
# messages (children that outlive it are not waited for longer than this).
DRAIN_SECONDS = 5.0
# Slots of each process's trace ring (128 bytes each): 16 MiB of shared memory, touched
# only as far as the trace ever runs ahead of the controller.
TRACE_RING_SLOTS = 1 << 17
# Slots of each process's result ring (16,512 bytes each: 8.1 MiB): launches whose digests and scans
# may be on their way at once before the shim waits for the controller.
RESULT_RING_SLOTS = 1 << 9
# Device memory each process may lend a launch's snapshot copies (see --scratch).
DEFAULT_SCRATCH = 1 << 30
_UCRED = struct.Struct("3i")


@dataclass
class RunOptions:
    argv: list[str]
    run_dir: Path
    trace: bool = False
    rules: list[Rule] = field(default_factory=list)
    max_bytes: int | None = None
    max_bytes_default: bool = False   # max_bytes is the default budget, not --max-bytes
    staging_bytes: int = 256 << 20
    scratch_bytes: int = DEFAULT_SCRATCH
    breaks: list[str] = field(default_factory=list)
    batch: Path | None = None
    ring_slots: int = TRACE_RING_SLOTS
    break_on_nan: bool = False
    timeline: Path | None = None      # --timeline FILE: the run as trace-event JSON

    @property
    def debugging(self) -> bool:
        return bool(self.breaks or self.batch or self.break_on_nan
                    or any(r.action == "break" for r in self.rules))


class Controller:
    """State shared by all connections of one run."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
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
        self.generation = 1
        self.allocations = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self.protocol_errors = 0
        self.nan_halted = False      # --break-on-nan stops once, at the first producer
        self._manifest: ManifestWriter | None = None
        snapshot_rules = [r for r in options.rules if r.action == "snapshot"]
        self.snapshots = (Snapshots(snapshot_rules, options.run_dir, options.max_bytes,
                                    self.manifest, options.max_bytes_default)
                          if snapshot_rules else None)
        self.debugger = DebugController(self) if options.debugging else None
        self._closed = False
        self.timeline_written: Path | None = None

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
        wants = p.Want.TRACE if self.traced else p.Want(0)
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
            self.drain.add(proc, shared)
        if self.snapshots is not None:
            self.snapshots.attach(proc, shared)

    def stopped(self, info: StopInfo) -> None:
        """A launch is held at the prompt."""
        if self.timeline is not None:
            self.timeline.stop(info)

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
                        result.kernels[func.demangled] += n + g
                        result.launches += n
                        if g:
                            result.graph_kernels[func.demangled] += g
                            result.graph_kernel_launches += g
        if self.snapshots is not None:
            self.snapshots.fill(result)
        if self.drain is not None:
            result.trace_dropped = self.drain.dropped()
        return result

    def close(self, complete: bool = True) -> None:
        """Ends the run's writers; `complete` is False when the program never ran (then no
        timeline is written)."""
        if self._closed:
            return
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
            for shared in self.shared.values():
                shared.close()
        if self.timeline is not None:
            # Last: the snapshots' and the stops' events are in.
            self.timeline_written = self.timeline.close(complete)


Handler = Callable[[p.Message], None]


class Connection:
    """One process's conversation with the controller."""

    def __init__(self, controller: Controller, sock: socket.socket) -> None:
        self.controller = controller
        self.sock = sock
        self.proc: ProcessState | None = None
        self.shared: SharedFile | None = None
        # Buffered: a burst of small events costs one system call, not two each.
        self.reader = sock.makefile("rb")
        self.handlers: dict[int, Handler] = {
            p.Kind.HELLO: self.on_hello,
            p.Kind.FUNC: self.on_func,
            p.Kind.ASK: self.on_ask,
            p.Kind.LAUNCH: self.on_launch,
            p.Kind.GRAPH: self.on_graph,
            p.Kind.MEMORY: self.on_memory,
            p.Kind.STATS: self.on_stats,
            p.Kind.BEGIN: self.on_begin,
            p.Kind.END: self.on_end,
            p.Kind.PIECE: self.on_piece,
            p.Kind.REPEAT: self.on_repeat,
            p.Kind.STOPPED: self.on_stopped,
            p.Kind.IMAGE: self.on_image,
            p.Kind.NOTICE: self.on_notice,
        }

    def send(self, kind: p.Kind, payload: bytes = b"", tag: int = 0) -> None:
        self.sock.sendall(p.encode(kind, payload, tag))

    def receive(self) -> p.Message | None:
        return p.read_message(self.reader)

    def serve(self) -> None:
        try:
            while True:
                msg = self.receive()
                if msg is None:
                    break
                handler = self.handlers.get(msg.kind)
                if handler is None or (self.proc is None and msg.kind != p.Kind.HELLO):
                    raise p.ProtocolError(f"unexpected message kind {msg.kind}")
                handler(msg)
        except OSError:
            pass
        except (p.ProtocolError, ValueError, KeyError, IndexError, struct.error) as err:
            # A broken peer: drop it (the shim turns into a pass-through) and say so.
            self.controller.protocol_errors += 1
            who = f"process {self.proc.pid}" if self.proc else "a process"
            warn(f"dropped the connection of {who}: {err}")
        finally:
            if self.controller.debugger is not None:
                self.controller.debugger.connection_closed(self)
            self.reader.close()
            self.sock.close()

    # -- handlers -----------------------------------------------------------------

    def on_hello(self, msg: p.Message) -> None:
        if self.proc is not None:
            raise p.ProtocolError("second hello")
        ctl = self.controller
        hello = p.HELLO.unpack(msg.payload)
        if (hello["magic"] != p.MAGIC or hello["version"] != p.VERSION
                or not hmac.compare_digest(hello["token"], ctl.token.encode())):
            raise p.ProtocolError("hello without this run's token or protocol version")
        exe = msg.payload[p.HELLO.size:].decode("utf-8", "replace")
        self.proc = ProcessState(hello["pid"], hello["ppid"], exe)
        try:
            self.shared = SharedFile(f"cudump-{self.proc.pid}", ctl.options.staging_bytes,
                                     ctl.options.ring_slots if ctl.traced else 0,
                                     RESULT_RING_SLOTS if ctl.snapshots is not None else 0,
                                     scratch_mib=ctl.options.scratch_bytes >> 20)
        except OSError as err:
            raise p.ProtocolError(f"no shared memory of {ctl.options.staging_bytes} bytes for "
                                  f"it ({err.strerror}); try a smaller --staging") from None
        ctl.add_process(self.proc, self.shared)
        options = p.Option.TRACE_GRAPHS if ctl.traced else p.Option(0)
        if any(r.replay for r in ctl.options.rules):
            options |= p.Option.CAPTURE
        payload = p.WELCOME.pack(version=p.VERSION, options=int(options),
                                 staging_size=self.shared.staging_size)
        socket.send_fds(self.sock, [p.encode(p.Kind.WELCOME, payload)], [self.shared.fd])
        self.shared.handed_over()

    def _wants_reply(self, func: FuncInfo) -> None:
        ctl = self.controller
        assert self.proc is not None
        generation = ctl.generation
        selectors: list[p.Selector] = []
        try:
            func.wants, selectors = ctl.decide(self.proc, func)
        except Exception as err:  # a rule that cannot be applied must not stop the others
            warn(f"cannot decide what to do with {func.demangled}: {err}")
            func.wants = 0
        self.send(p.Kind.WANTS, p.wants_payload(func.wants, generation, selectors))

    def on_func(self, msg: p.Message) -> None:
        assert self.proc is not None
        func = decode_func(msg.payload)
        self.proc.funcs[func.id] = func
        self._wants_reply(func)

    def on_ask(self, msg: p.Message) -> None:
        assert self.proc is not None
        fid = p.ASK.unpack(msg.payload)["id"]
        func = self.proc.funcs.get(fid)
        if func is None:
            self.send(p.Kind.WANTS, p.wants_payload(0, self.controller.generation))
            return
        self._wants_reply(func)

    def on_launch(self, msg: p.Message) -> None:
        assert self.proc is not None
        h = p.LAUNCH.unpack(msg.payload)
        if self.controller.feed is not None:
            self.controller.feed.launches(self.proc, [[h[f] for f in EVENT_FIELDS]])

    def on_graph(self, msg: p.Message) -> None:
        assert self.proc is not None
        g = p.GRAPH.unpack(msg.payload)
        if self.controller.feed is not None:
            self.controller.feed.graph_launch(self.proc, GraphLaunch(
                g["seq"], g["exec"], g["stream"], p.api_name(g["api"]), g["device"]))

    def on_notice(self, msg: p.Message) -> None:
        assert self.proc is not None
        n = p.NOTICE.unpack(msg.payload)
        if n["kind"] == p.NoticeKind.DEVICE_GRAPH:
            warn(f"graph {n['graph']} of process {self.proc.pid} was instantiated for device "
                 f"launch: cudump sees its launches from the host only; launches from device "
                 f"code are neither traced nor snapshotted")

    def on_memory(self, msg: p.Message) -> None:
        assert self.proc is not None
        self.controller.on_memory(self.proc, p.MEMORY.unpack(msg.payload))

    def on_stats(self, msg: p.Message) -> None:
        assert self.proc is not None
        st = p.STATS.unpack(msg.payload)
        if st["nfuncs"] > (len(msg.payload) - p.STATS.size) // p.COUNT.size:
            raise p.ProtocolError("stats count runs past the message")
        funcs = []
        for i in range(st["nfuncs"]):
            c = p.COUNT.unpack(msg.payload, p.STATS.size + i * p.COUNT.size)
            funcs.append((c["id"], c["launches"], c["graph_launches"]))
        st["funcs"] = funcs
        self.proc.stats = st

    def on_begin(self, msg: p.Message) -> None:
        assert self.proc is not None and self.shared is not None
        event = decode_launch(msg.payload)
        func = self.proc.funcs.get(event.func_id)
        planned = None
        halt = None
        repeat = None
        if func is not None:
            func.launches = max(func.launches, event.occurrence)
            snapshots = self.controller.snapshots
            stop_only = bool(event.flags & p.LaunchFlag.STOP_ONLY)
            if snapshots is not None and func.wants & p.Want.SNAPSHOT and not stop_only:
                failures = snapshots.thread_failures()
                try:
                    planned = snapshots.plan(self.proc, func, event, self.shared.staging_size)
                    if not func.wants & p.Want.STOP:
                        repeat = snapshots.repeat_id(self.proc, func, event, planned, failures)
                except Exception as err:  # one failing launch never stops the others
                    warn(f"no snapshots of launch {event.seq} of {func.demangled}: {err}")
                    planned = None
            debugger = self.controller.debugger
            if debugger is not None:
                halt = debugger.decide_halt(self, func, event)
        flags = p.PlanFlag.HALT if halt else p.PlanFlag(0)
        if repeat is not None and not halt:
            flags |= p.PlanFlag.REPEAT
            if not self.controller.options.break_on_nan:
                # --break-on-nan holds the launching thread at a producer, so its
                # scans are waited for; otherwise the GPU holds the stream instead.
                flags |= p.PlanFlag.GATE
        if (planned is not None and planned.copies and not halt
                and all(c.tool is None for c in planned.copies)):
            # Plain copies: their MSG_END is answered with nothing, whenever it comes.
            flags |= p.PlanFlag.DEFER
        self.send(p.Kind.PLAN, plan_payload(planned, flags, repeat), tag=event.seq)

    def on_image(self, msg: p.Message) -> None:
        assert self.proc is not None
        if self.controller.snapshots is None:
            raise p.ProtocolError("a module image nobody asked for")
        try:
            self.controller.snapshots.images.receive(self.proc.pid, msg.payload)
        except OSError as err:
            warn(f"a module image of process {self.proc.pid} is lost: {err.strerror or err}")

    def on_piece(self, msg: p.Message) -> None:
        assert self.proc is not None and self.shared is not None
        piece = p.PIECE.unpack(msg.payload)
        if self.controller.snapshots is not None:
            try:
                self.controller.snapshots.piece(self.proc, msg.tag, piece["index"], piece["rc"],
                                                self.shared.staging)
            except Exception as err:
                warn(f"a piece of a snapshot of launch {msg.tag} is lost: {err}")
        self.send(p.Kind.ACK, tag=msg.tag)

    def on_end(self, msg: p.Message) -> None:
        assert self.proc is not None and self.shared is not None
        end = p.END.unpack(msg.payload)
        n = end["ncopies"]
        if n > p.MAX_COPIES or len(msg.payload) < p.END.size + 4 * n:
            raise p.ProtocolError("end message with a bad copy count")
        codes = list(struct.unpack_from(f"<{n}i", msg.payload, p.END.size))
        follow = None
        if self.controller.snapshots is not None:
            try:
                follow = self.controller.snapshots.collect(
                    self.proc, msg.tag, end["launch_rc"], end["sync_rc"], codes,
                    self.shared.staging)
            except Exception as err:
                warn(f"snapshots of launch {msg.tag} are lost: {err}")
        # Usually nothing follows; copies that do are taken after the launch, as it left them.
        self.send(p.Kind.PLAN, plan_payload(follow, self._nan_halt(msg.tag)), tag=msg.tag)

    def _nan_halt(self, seq: int) -> p.PlanFlag:
        """--break-on-nan: hold the first launch found to leave NaN/Inf, once it has run
        (and its buffers are copied)."""
        ctl = self.controller
        assert self.proc is not None
        found = ctl.snapshots.take_nan(self.proc.pid, seq) if ctl.snapshots else None
        if found is None or not ctl.options.break_on_nan or ctl.debugger is None:
            return p.PlanFlag(0)
        with ctl.lock:
            if ctl.nan_halted:
                return p.PlanFlag(0)
            ctl.nan_halted = True
        func, event, reason = found
        return p.PlanFlag.HALT if ctl.debugger.halt_after(self, func, event, reason) \
            else p.PlanFlag(0)

    def on_repeat(self, msg: p.Message) -> None:
        """A launch made with a repeated plan whose scans found something: as MSG_END."""
        assert self.proc is not None
        slot = slot_of(msg.payload)
        follow = None
        if self.controller.snapshots is not None:
            try:
                follow = self.controller.snapshots.repeat_report(self.proc, slot)
            except Exception as err:
                warn(f"snapshots of launch {msg.tag} are lost: {err}")
        self.send(p.Kind.PLAN, plan_payload(follow, self._nan_halt(msg.tag)), tag=msg.tag)

    def on_stopped(self, msg: p.Message) -> None:
        stopped = p.STOPPED.unpack(msg.payload)
        debugger = self.controller.debugger
        if debugger is None:
            raise p.ProtocolError("a stop nobody asked for")
        debugger.serve_stop(self, msg.tag, stopped)

    # -- requests while a launch is held (called by the debugger on this thread) ---

    def request(self, kind: p.Kind, payload: bytes = b"") -> tuple[int, bytes]:
        """Sends a command to the held launch; returns (rc, data) of its MSG_RESULT."""
        self.send(kind, payload)
        msg = self.receive()
        if msg is None:
            raise OSError("the process went away")
        if msg.kind != p.Kind.RESULT:
            raise p.ProtocolError(f"expected a result, got message kind {msg.kind}")
        r = p.RESULT.unpack(msg.payload)
        return r["rc"], bytes(msg.payload[p.RESULT.size:p.RESULT.size + r["nbytes"]])


def default_run_dir(base: Path = Path("cudump-out")) -> Path:
    """A fresh numbered directory under cudump-out/."""
    base.mkdir(parents=True, exist_ok=True)
    numbers = [int(q.name) for q in base.iterdir() if q.name.isdigit()]
    n = max(numbers, default=0) + 1
    while True:
        try:
            (base / str(n)).mkdir()
            return base / str(n)
        except FileExistsError:
            n += 1


def exit_status_of(returncode: int, program: str) -> int:
    """The shell's convention: a signal N becomes 128+N, with a one-line message."""
    if returncode >= 0:
        return returncode
    signum = -returncode
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    say(f"cudump: {program} was killed by {name} (signal {signum})")
    return 128 + signum


def _early_interrupt(debugger: DebugController) -> Callable[..., None]:
    from cudump.prompt.repl import END_MESSAGE, INTERRUPT_MESSAGE

    count = [0]

    def handler(*_: object) -> None:
        count[0] += 1
        if count[0] == 1:
            say(INTERRUPT_MESSAGE)
            debugger.interrupt()
        else:
            say(END_MESSAGE)
            debugger.end()

    return handler


def _peer_uid(sock: socket.socket) -> int | None:
    try:
        data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    except OSError:
        return None
    return _UCRED.unpack(data)[1]


class Session:
    """One run of a target program under cudump."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self._threads: list[threading.Thread] = []
        self._server: socket.socket | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.controller = Controller(options)

    def _accept_loop(self) -> None:
        assert self._server is not None
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            if _peer_uid(sock) != os.geteuid():
                sock.close()  # only this user's processes may talk to the controller
                continue
            conn = Connection(self.controller, sock)
            thread = threading.Thread(target=conn.serve, name="cudump-conn", daemon=True)
            self._threads.append(thread)
            thread.start()

    def run(self) -> int:
        # The abstract namespace: no file to leave behind, whatever happens to cudump.
        # Who may connect is checked on each connection (uid, then the run's token).
        name = f"cudump-{os.getpid()}-{secrets.token_hex(8)}"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind("\0" + name)
        self._server.listen(64)
        acceptor = threading.Thread(target=self._accept_loop, name="cudump-accept", daemon=True)
        acceptor.start()
        program = self.options.argv[0]
        debugger = self.controller.debugger
        if debugger is not None:
            # Loaded before the target starts: Ctrl-C must find the prompt ready.
            import cudump.prompt  # noqa: F401

            if sys.stdin.isatty():
                import prompt_toolkit  # noqa: F401
            # Until the prompt is ready, Ctrl-C asks for a stop (twice: ends the run).
            signal.signal(signal.SIGINT, _early_interrupt(debugger))
        try:
            env = preload_env(dict(os.environ), "@" + name)
            env["CUDUMP_TOKEN"] = self.controller.token
            env["CUDUMP_CONTROLLER_PID"] = str(os.getpid())
            # cudump's first line: where the files go (the program's stdout stays its own).
            # Not for a program that cannot start: its run directory is removed.
            if shutil.which(program, path=env.get("PATH")) is not None:
                say(f"cudump: writing to {self.options.run_dir}")
            try:
                # Under the prompt the target gets its own process group, so that
                # Ctrl-C in the terminal reaches cudump (which stops the target at
                # its next launch) rather than killing the target.
                self.child = subprocess.Popen(self.options.argv, env=env,
                                              process_group=0 if debugger else None)
            except FileNotFoundError:
                raise CudumpError(f"cannot run {program}: no such file or command "
                                  "(check the path, or put it on PATH)", exit_code=127) from None
            except PermissionError:
                raise CudumpError(f"cannot run {program}: permission denied "
                                  "(is it executable?)", exit_code=126) from None
            except OSError as err:
                raise CudumpError(f"cannot run {program}: {err.strerror}",
                                  exit_code=126) from None
            with short_collections():
                if debugger is not None:
                    returncode = self._debug(debugger, self.child)
                else:
                    returncode = self._wait(self.child)
            status = exit_status_of(returncode, program)
            self._drain()
            self.controller.close()  # waits for the last snapshots to be written
            summary = self.controller.summary(status)
            self._say_timeline()
            # The last line: what the run did, and where its files are.
            say(summary.line(self.options.run_dir))
            try:
                summary.write(self.options.run_dir)
            except OSError as err:
                warn(f"could not write {self.options.run_dir / 'summary.json'}: "
                     f"{err.strerror or err}")
            return status
        finally:
            if debugger is not None:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            self._server.close()
            # A program that never started leaves no timeline.
            self.controller.close(complete=self.child is not None)

    def _say_timeline(self) -> None:
        timeline = self.controller.timeline
        if timeline is None or self.controller.timeline_written is None:
            return
        full = (f"; full: events after the first {timeline.limit:,} left out"
                if timeline.full else "")
        say(f"cudump: timeline: {self.controller.timeline_written} ({timeline.events:,} "
            f"events{full})")

    def _debug(self, debugger: DebugController, child: subprocess.Popen[bytes]) -> int:
        from cudump.prompt import run_prompt

        debugger.attach(child)
        waiter = threading.Thread(target=debugger.watch, args=(child,), name="cudump-wait",
                                  daemon=True)
        waiter.start()
        old_term = signal.signal(signal.SIGTERM, lambda *_: debugger.end())
        try:
            run_prompt(debugger, batch=self.options.batch, stdin_is_tty=sys.stdin.isatty())
        finally:
            signal.signal(signal.SIGTERM, old_term)
        return self._wait_on_its_own(child)

    @staticmethod
    def _wait_on_its_own(child: subprocess.Popen[bytes]) -> int:
        """After the prompt (detach, its input ran out, kill): the program runs on its own,
        and, as after gdb's detach, Ctrl-C is the program's. It runs in its own process
        group (so that the prompt got the terminal's Ctrl-C), so the terminal's SIGINT
        reaches cudump only: cudump passes it on to the program's process group. SIGTERM
        is passed on too."""
        def forward(signum: int, _frame: object) -> None:
            if child.returncode is None:
                try:
                    os.killpg(child.pid, signum)
                except OSError:
                    pass

        return Session._wait_with(child, forward)

    @staticmethod
    def _wait(child: subprocess.Popen[bytes]) -> int:
        # Ctrl-C reaches the target through the terminal; cudump stays to
        # report how it ended. SIGTERM is passed on.
        return Session._wait_with(child, signal.SIG_IGN)

    @staticmethod
    def _wait_with(child: subprocess.Popen[bytes],
                   on_sigint: Callable[[int, Any], Any] | int) -> int:
        """Waits for the program with SIGINT handled as given and SIGTERM passed on."""
        old_int = signal.signal(signal.SIGINT, on_sigint)
        old_term = signal.signal(signal.SIGTERM, lambda *_: child.terminate())
        try:
            return child.wait()
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)

    def _drain(self) -> None:
        deadline = time.monotonic() + DRAIN_SECONDS
        for thread in list(self._threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
