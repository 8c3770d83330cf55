"""One process's conversation with the controller, on its own thread.

Messages are dispatched through a table keyed by the protocol's message kind.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import signal
import socket
import struct
from collections.abc import Callable

from cudump.console import say, warn
from cudump.controller.inject import Injection
from cudump.controller.notices import notice
from cudump.controller.ranks import environ_rank
from cudump.controller.run_state import Controller
from cudump.controller.shared_files import no_shared_memory
from cudump.launches.events import EVENT_FIELDS, GraphLaunch
from cudump.launches.process import (
    FuncInfo,
    LaunchEvent,
    ProcessState,
    decode_func,
    decode_launch,
    decode_output,
    decode_scope,
)
from cudump.policy.rules import Action
from cudump.policy.snapshot.planned import PlannedLaunch, Repeat, plan_payload
from cudump.policy.snapshot.results import slot_of
from cudump.policy.snapshot.windows import THEN_CHOICES, WindowReport
from cudump.policy.snapshot.windows import decode as decode_window
from cudump.rundir.files import write_error
from cudump.wire import protocol as p
from cudump.wire.reading import read_message
from cudump.wire.shm import SharedFile
from cudump.wire.socket_reader import SocketReader

Handler = Callable[[p.Message], None]


class Connection:
    """One process's conversation with the controller."""

    def __init__(self, controller: Controller, sock: socket.socket) -> None:
        self.controller = controller
        self.sock = sock
        self.proc: ProcessState | None = None
        self.shared: SharedFile | None = None
        self.reader = SocketReader(sock)   # buffered, and says when it has caught up
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
            p.Kind.SCOPE: self.on_scope,
            p.Kind.WATCH: self.on_watch,
            p.Kind.OUTPUT: self.on_output,
        }

    @property
    def process(self) -> ProcessState:
        """The process, once it said hello (every handler but on_hello's)."""
        assert self.proc is not None
        return self.proc

    def send(self, kind: p.Kind, payload: bytes = b"", tag: int = 0) -> None:
        self.sock.sendall(p.encode(kind, payload, tag))

    def receive(self) -> p.Message | None:
        return read_message(self.reader)

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
            if self.shared is not None:
                self.controller.connection_ended(self.shared)
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
        self.proc = ProcessState(hello["pid"], hello["ppid"], exe,
                                 rank=environ_rank(hello["pid"]), heard=self.reader)
        try:
            self.shared = ctl.shared_files.take(self.proc.pid)
        except OSError as err:
            raise p.ProtocolError(no_shared_memory(err, ctl.options.staging_bytes)) from None
        ctl.add_process(self.proc, self.shared)
        payload = p.WELCOME.pack(version=p.VERSION, options=int(_options(ctl)),
                                 staging_size=self.shared.staging_size,
                                 watch_window=ctl.options.watch_window,
                                 watch_then=int(THEN_CHOICES[ctl.options.watch_then]))
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
        func = decode_func(msg.payload)
        if (ops := self.controller.compiled_ops) is not None:
            ops.describe(func)
        self.process.add_func(func)
        self._wants_reply(func)

    def on_ask(self, msg: p.Message) -> None:
        fid = p.ASK.unpack(msg.payload)["id"]
        func = self.process.funcs.get(fid)
        if func is None:
            self.send(p.Kind.WANTS, p.wants_payload(0, self.controller.generation))
            return
        self._wants_reply(func)

    def on_launch(self, msg: p.Message) -> None:
        h = p.LAUNCH.unpack(msg.payload)
        self.controller.launches_heard(self.process, [[h[f] for f in EVENT_FIELDS]])

    def on_graph(self, msg: p.Message) -> None:
        g = p.GRAPH.unpack(msg.payload)
        if self.controller.feed is not None:
            self.controller.feed.graph_launch(self.process, GraphLaunch(
                g["seq"], g["exec"], g["stream"], p.api_name(g["api"]), g["device"]))

    def on_notice(self, msg: p.Message) -> None:
        notice(self.controller, self.process.pid, p.NOTICE.unpack(msg.payload))

    def on_watch(self, msg: p.Message) -> None:
        _watched(self.controller, self.process, decode_window(msg.payload))

    def on_scope(self, msg: p.Message) -> None:
        self.process.scopes.add(decode_scope(msg.payload))

    def on_output(self, msg: p.Message) -> None:
        self.controller.on_output(self.process, decode_output(msg.payload))

    def on_memory(self, msg: p.Message) -> None:
        self.controller.on_memory(self.process, p.MEMORY.unpack(msg.payload))

    def on_stats(self, msg: p.Message) -> None:
        st = p.STATS.unpack(msg.payload)
        if st["nfuncs"] > (len(msg.payload) - p.STATS.size) // p.COUNT.size:
            raise p.ProtocolError("stats count runs past the message")
        funcs = []
        for i in range(st["nfuncs"]):
            c = p.COUNT.unpack(msg.payload, p.STATS.size + i * p.COUNT.size)
            funcs.append((c["id"], c["launches"], c["graph_launches"]))
        st["funcs"] = funcs
        self.process.stats = st

    def on_begin(self, msg: p.Message) -> None:
        assert self.proc is not None and self.shared is not None
        event = decode_launch(msg.payload)
        func = self.proc.funcs.get(event.func_id)
        planned: PlannedLaunch | None = None
        repeat: Repeat | None = None
        halt: str | None = None
        if func is not None:
            func.launches = max(func.launches, event.occurrence)
            injector = self.controller.injector
            inject = injector.take(self.proc, func, event) if injector is not None else None
            planned, repeat = self._plan(func, event, inject)
            if inject is not None:
                assert injector is not None
                injector.planned(inject, planned)
                halt = "inject"        # held while RUN's inputs are written (inject.py)
            elif self.controller.debugger is not None:
                halt = self.controller.debugger.decide_halt(self, func, event)
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

    def _plan(self, func: FuncInfo, event: LaunchEvent, inject: Injection | None
              ) -> tuple[PlannedLaunch | None, Repeat | None]:
        """The launch's copies (the rules' and an injection's), and whether the shim may
        repeat the plan."""
        assert self.proc is not None and self.shared is not None
        snapshots = self.controller.snapshots
        stop_only = bool(event.flags & p.LaunchFlag.STOP_ONLY)
        extra = [inject.rule] if inject is not None else []
        if snapshots is None or stop_only or not (func.wants & p.Want.SNAPSHOT or extra):
            return None, None
        failures = snapshots.thread_failures()
        try:
            planned = snapshots.plan(self.proc, func, event, self.shared.staging_size, extra)
            if func.wants & p.Want.STOP:
                return planned, None
            return planned, snapshots.repeat_id(self.proc, func, event, planned, failures)
        except Exception as err:  # one failing launch never stops the others
            warn(f"no snapshots of launch {event.seq} of {func.demangled}: {err}")
            return None, None

    def on_image(self, msg: p.Message) -> None:
        if self.controller.snapshots is None:
            raise p.ProtocolError("a module image nobody asked for")
        try:
            self.controller.snapshots.images.receive(self.process.pid, msg.payload)
        except OSError as err:
            warn(f"a module image of process {self.process.pid} is lost: {write_error(err)}")

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
        if end["behind"]:   # in the write-behind area: no answer
            return end_behind(self, msg.tag, end, codes, p.behind_places(msg.payload, n))
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
        slot = slot_of(msg.payload)
        follow = None
        if self.controller.snapshots is not None:
            try:
                follow = self.controller.snapshots.repeat_report(self.process, slot)
            except Exception as err:
                warn(f"snapshots of launch {msg.tag} are lost: {err}")
        self.send(p.Kind.PLAN, plan_payload(follow, self._nan_halt(msg.tag)), tag=msg.tag)

    def on_stopped(self, msg: p.Message) -> None:
        stopped = p.STOPPED.unpack(msg.payload)
        injector = self.controller.injector
        if injector is not None and injector.holds(self.process.pid, msg.tag):
            injector.serve_stop(self, msg.tag, stopped)
            return
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


def end_behind(conn: Connection, seq: int, end: dict[str, int], codes: list[int],
               where: list[int]) -> None:
    """MSG_END of copies in the write-behind area: no answer; the writer thread writes them
    from there."""
    assert conn.proc is not None and conn.shared is not None
    snapshots = conn.controller.snapshots
    if snapshots is None:     # nothing asked for them: their bytes are free at once
        conn.shared.set_behind_done(end["behind"])
        return
    try:
        snapshots.collect_behind(conn.proc, seq, end, codes, where, conn.shared)
    except Exception as err:
        warn(f"snapshots of launch {seq} are lost: {err}")


def _options(ctl: Controller) -> p.Option:
    """The options the shim is welcomed with."""
    options = p.Option.TRACE_GRAPHS if ctl.traced else p.Option(0)
    if any(Action.CAPTURE in r.actions for r in ctl.options.rules):
        options |= p.Option.CAPTURE
    if not ctl.options.scans_ahead:
        options |= p.Option.NO_AHEAD
    if ctl.options.hand_off:
        options |= p.Option.HAND_OFF
    if ctl.options.watch_nan:
        options |= p.Option.WATCH_NAN
    return options


def _watched(ctl: Controller, proc: ProcessState, report: WindowReport) -> None:
    """What a window of launches (or a graph's scan node) found: reported, and with
    --watch-nan-then stop, the process ended once an exact scan confirms a NaN/Inf (the
    shim scans every launch exactly after the finding): a window's scan may read reused
    memory as another type, so its finding alone never ends a healthy job."""
    if ctl.snapshots is None:
        return
    ctl.snapshots.report.window(proc, report)
    if not report.launches_found or ctl.options.watch_then != "stop":
        return
    rank = f", rank {proc.rank}" if proc.rank is not None else ""

    def end() -> None:
        say(f"cudump: ending process {proc.pid}{rank} (--watch-nan-then stop): an exact scan "
            f"confirmed a NaN/Inf")
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGTERM)

    if ctl.snapshots.report.end_when_confirmed(proc.pid, end):
        say(f"cudump: process {proc.pid}{rank} is ended once an exact scan confirms a NaN/Inf "
            f"(--watch-nan-then stop)")
