"""Breakpoints at run time: deciding which launches stop, and serving a stopped launch.

A launch that stops is held on its own thread in the target (shim/stop.c).
The connection thread that talks to that process stays with the stop and runs
the prompt's requests (reads, allocation queries, backtrace) one at a time on
the socket, so the socket keeps a single owner; the prompt, on the main
thread, hands it work through a queue and waits for the answer.

All-stop: while any launch is held (or stepping), the `hold` word in every
process's control page is set and the generation bumped, so every other
launch of every process waits at its next intercepted launch.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudump.console import warn
from cudump.controller.process import FuncInfo, LaunchEvent, ProcessState, pointer_allocation
from cudump.controller.target import Frame, GraphNode, KernelSeen, ResumeMode, StopInfo, TargetError
from cudump.kernels.args import arg_values, decode_args
from cudump.kernels.demangle import demangle
from cudump.kernels.geometry import Allocation
from cudump.kernels.signature import parse_signature
from cudump.kernels.symbols import symbolize
from cudump.policy.breakpoints import Breakpoints
from cudump.rundir.manifest import SnapshotRecord
from cudump.wire import protocol as p

if TYPE_CHECKING:
    from cudump.controller.session import Connection, Controller

_MODES: dict[str, p.ResumeMode] = {
    "continue": p.ResumeMode.CONTINUE, "step": p.ResumeMode.STEP,
    "detach": p.ResumeMode.DETACH, "kill": p.ResumeMode.KILL,
}
END_GRACE_SECONDS = 2.0
# A held launch told to kill its process does so itself (SIGKILL); it is given this long
# before the run is ended from outside, so that it is not a SIGTERM that ends the program.
KILL_WAIT_SECONDS = 2.0
# The program's own process, found dead, is reaped by the watcher thread: how long the
# prompt waits for it to say how the process ended.
REAP_WAIT_SECONDS = 2.0


def process_lives(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether a process is there and not a zombie (dead, waiting to be reaped)."""
    try:
        stat = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    state = stat.rpartition(")")[2].split()[:1]
    return bool(state) and state[0] not in ("Z", "X", "x")


def how_it_ended(pid: int, returncode: int) -> str:
    """`process 4242 exited with status 3`, `process 4242 was killed by SIGKILL`."""
    if returncode >= 0:
        return f"process {pid} exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"process {pid} was killed by {name}"


@dataclass
class _Halt:
    func: FuncInfo
    event: LaunchEvent
    reason: str
    breakpoint: int | None
    after: bool = False     # decided after the launch ran (its reason is not a step)


class RemoteStop:
    """A launch held in the target (implements target.StoppedLaunch)."""

    def __init__(self, conn: Connection, proc: ProcessState, info: StopInfo,
                 halt: _Halt) -> None:
        self.conn = conn
        self.proc = proc
        self.info = info
        self.halt = halt
        self._commands: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self.alive = True
        self.resumed = False
        # Asked to go on once only: after a detach, the prompt and the controller may both
        # let the same launch go.
        self._resume_lock = threading.Lock()
        self._resume_asked = False

    @property
    def max_read(self) -> int:
        shared = self.conn.shared
        return shared.staging_size if shared is not None else 0

    # -- run on the connection's thread -------------------------------------------

    def serve(self) -> None:
        """Runs the prompt's requests until one resumes the launch (connection thread)."""
        while True:
            fn, fut = self._commands.get()
            if not self.alive:
                fut.set_exception(TargetError("the process went away"))
                continue
            try:
                fut.set_result(fn())
            except (OSError, p.ProtocolError) as err:
                self.alive = False
                fut.set_exception(TargetError(f"the process went away ({err})"))
                return
            except TargetError as err:
                fut.set_exception(err)
            except Exception as err:  # a bug must not leave the prompt waiting for ever
                kind = type(err)
                name = kind.__qualname__ if kind.__module__ == "builtins" \
                    else f"{kind.__module__}.{kind.__qualname__}"
                fut.set_exception(TargetError(f"the request failed ({name}: {err})"))
            if self.resumed:
                return

    def _call(self, fn: Callable[[], Any]) -> Any:
        if not self.alive:
            raise TargetError("the process went away")
        if self.resumed:
            raise TargetError("the launch is no longer held")
        fut: Future[Any] = Future()
        self._commands.put((fn, fut))
        return fut.result()

    def _resume(self, mode: p.ResumeMode, wait: bool = True) -> None:
        """Lets the launch go. `wait=False` only queues it, for the connection's own thread
        before it serves the stop."""
        with self._resume_lock:
            if self._resume_asked:
                return
            self._resume_asked = True

        def send() -> None:
            self.resumed = True
            self.conn.send(p.Kind.RESUME, p.RESUME.pack(mode=int(mode)))

        if not wait:
            self._commands.put((send, Future()))
            return
        try:
            self._call(send)
        except TargetError:
            pass

    def close(self) -> None:
        """The connection ended: fail whatever is still waiting."""
        self.alive = False
        while True:
            try:
                _, fut = self._commands.get_nowait()
            except queue.Empty:
                return
            fut.set_exception(TargetError("the process went away"))

    # -- the StoppedLaunch interface ----------------------------------------------

    def read(self, address: int, nbytes: int) -> bytes:
        return self.read2d(address, nbytes, 1, nbytes)

    def read2d(self, address: int, width_bytes: int, height: int, pitch: int) -> bytes:
        total = width_bytes * height
        if width_bytes <= 0 or height <= 0:
            raise TargetError("nothing to read: the size must be at least one byte")
        if total > self.max_read:
            raise TargetError(f"{total} bytes is more than one read can take "
                              f"({self.max_read}); raise --staging or read less")
        if height > 1 and pitch < width_bytes:
            raise TargetError(f"pitch {pitch} is less than the row width {width_bytes}")
        end = address + (pitch * (height - 1) + width_bytes if height > 1 else total)
        if address < 0 or end > 1 << 64:
            raise TargetError(f"0x{address:x} and the {total} bytes from it do not fit in the "
                              "64-bit address space")

        def do() -> bytes:
            rc, _ = self.conn.request(p.Kind.READ, p.READ.pack(
                src=address, width=width_bytes, height=height,
                pitch=pitch if height > 1 else width_bytes, offset=0))
            if rc != 0:
                raise TargetError(f"cannot read {total} bytes at 0x{address:x}: "
                                  + ("refused by the shim" if rc == -1 else f"CUDA error {rc}"))
            assert self.conn.shared is not None
            return bytes(self.conn.shared.staging(0, total))

        return self._call(do)  # type: ignore[no-any-return]

    def write(self, address: int, data: bytes) -> None:
        size = len(data)
        if size == 0:
            raise TargetError("nothing to write: the size must be at least one byte")
        if size > self.max_read:
            raise TargetError(f"{size} bytes is more than one write can take "
                              f"({self.max_read}); raise --staging or write less")
        if address < 0 or address + size > 1 << 64:
            raise TargetError(f"0x{address:x} and the {size} bytes from it do not fit in the "
                              "64-bit address space")

        def do() -> None:
            assert self.conn.shared is not None
            self.conn.shared.staging(0, size)[:] = data   # staging is this stop's now
            rc, _ = self.conn.request(p.Kind.WRITE, p.WRITE.pack(dst=address, size=size,
                                                                 offset=0))
            if rc != 0:
                raise TargetError(f"cannot write {size} bytes at 0x{address:x}: "
                                  + ("refused by the shim" if rc == -1 else f"CUDA error {rc}"))

        self._call(do)

    def allocation(self, address: int) -> Allocation | None:
        for alloc in self.allocations():
            if alloc.base <= address < alloc.end:
                return alloc

        def do() -> Allocation | None:
            rc, data = self.conn.request(p.Kind.QUERY, p.QUERY.pack(address=address))
            if rc != 0 or len(data) < p.POINTER.size:
                return None
            return pointer_allocation(p.POINTER.unpack(data))

        return self._call(do)  # type: ignore[no-any-return]

    def allocations(self) -> list[Allocation]:
        with self.proc.lock:
            items = list(self.proc.allocations.values())
        return sorted((a for a in items if a.kind != "host"), key=lambda a: a.base)

    def refresh_counts(self) -> None:
        """Asks the held process how often each of its functions has launched."""

        def do() -> bytes:
            rc, data = self.conn.request(p.Kind.COUNTS)
            if rc != 0:
                raise TargetError("the shim could not count launches")
            return data

        data = self._call(do)
        for pos in range(0, len(data) - p.COUNT.size + 1, p.COUNT.size):
            c = p.COUNT.unpack(data, pos)
            func = self.proc.funcs.get(c["id"])
            if func is not None:
                func.launches = c["launches"] + c["graph_launches"]

    def graph_nodes(self) -> list[GraphNode]:
        """The kernel nodes of the graph whose launch is held, in run order."""
        if self.info.graph is None:
            raise TargetError("this stop is not at a graph launch")

        def do() -> bytes:
            rc, data = self.conn.request(p.Kind.GRAPH_NODES)
            if rc != 0:
                raise TargetError("the shim knows no kernel nodes of this graph")
            return data

        data = self._call(do)
        nodes = []
        for pos in range(0, len(data) - p.GRAPH_NODE.size + 1, p.GRAPH_NODE.size):
            n = p.GRAPH_NODE.unpack(data, pos)
            func = self.proc.funcs.get(n["id"])
            nodes.append(GraphNode(n["node"], func.demangled if func else f"function {n['id']}",
                                   n["grid"], n["block"], n["smem"], bool(n["child"])))
        return nodes

    def backtrace(self) -> list[Frame]:
        def do() -> bytes:
            rc, data = self.conn.request(p.Kind.BACKTRACE)
            if rc != 0:
                raise TargetError("the shim could not walk the stack")
            return data

        text = self._call(do).decode("utf-8", "replace")
        frames: list[Frame] = []
        for line in text.splitlines():
            parts = line.split("\t")
            if len(parts) != 4:
                continue
            addr, module, symbol, offset = parts
            where = int(offset) if offset.isdigit() else None
            path = module if module != "?" else None
            if not symbol and where is not None:
                # The loader knows no name here (a static function): the file may.
                found = symbolize(path, where)
                if found is not None:
                    symbol, where = found
            frames.append(Frame(len(frames), int(addr, 16), path,
                                demangle(symbol) if symbol else None, where))
        return frames


class DebugController:
    """The run as the prompt drives it (implements target.Debugger)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self._breakpoints = Breakpoints()
        for spec in controller.options.breaks:
            self._breakpoints.add(spec)
        self.break_rules = [r for r in controller.options.rules if r.action == "break"]
        self._rule_matches: dict[tuple[int, int], int] = {}
        self.detached = False
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int], _Halt] = {}   # (id(conn), seq) -> halt decided
        self._stepping: dict[int, _Halt] = {}              # id(conn) -> the stepped launch
        self._step_waiters: dict[int, queue.Queue[RemoteStop | None]] = {}
        self._held: set[tuple[int, int]] = set()
        self._live: dict[int, list[RemoteStop]] = {}
        self._stops: queue.Queue[RemoteStop | None] = queue.Queue()
        self._finished = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None

    # -- Debugger interface ---------------------------------------------------------

    @property
    def breakpoints(self) -> Breakpoints:
        return self._breakpoints

    @property
    def run_dir(self) -> Path:
        return self.controller.options.run_dir

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def kernels(self) -> list[KernelSeen]:
        # A held process can say exactly how often each of its functions launched; the
        # others report as they go (launches the controller saw).
        with self._lock:
            lives = [s for stops in self._live.values() for s in stops]
        for stop in lives:
            try:
                stop.refresh_counts()
            except TargetError:
                pass
        seen = []
        with self.controller.lock:
            procs = list(self.controller.processes)
        for proc in procs:
            for func in list(proc.funcs.values()):
                seen.append(KernelSeen(proc.pid, func.demangled, func.mangled, func.launches))
        return seen

    def changed(self) -> None:
        self.controller.bump()

    def wait_for_stop(self, timeout: float | None = None) -> RemoteStop | None:
        try:
            return self._stops.get(timeout=timeout)
        except queue.Empty:
            return None

    def resume(self, stop: Any, mode: ResumeMode) -> RemoteStop | None:
        assert isinstance(stop, RemoteStop)
        key = (id(stop.conn), stop.info.launch)
        waiter: queue.Queue[RemoteStop | None] | None = None
        if mode == "step" and stop.info.phase == "before":
            waiter = queue.Queue()
            with self._lock:
                self._step_waiters[id(stop.conn)] = waiter
                self._stepping[id(stop.conn)] = stop.halt
        else:
            self._release(key)
        if mode == "detach":
            self.detached = True
            self.changed()
        stop._resume(_MODES["continue" if mode == "step" and waiter is None else mode])
        if mode == "detach":
            self._let_all_go()
        if mode == "kill":
            deadline = time.monotonic() + KILL_WAIT_SECONDS
            while stop.alive and not self.finished and time.monotonic() < deadline:
                time.sleep(0.01)
            self.end()
            return None
        if waiter is None:
            return None
        while True:
            try:
                return waiter.get(timeout=0.2)
            except queue.Empty:
                if not stop.alive:
                    return None

    def ended(self, stop: Any) -> str | None:
        assert isinstance(stop, RemoteStop)
        pid = stop.info.pid
        lives = process_lives(pid)
        if lives and stop.alive:
            return None
        child = self.child
        if child is not None and child.pid == pid:
            if not lives:
                self._finished.wait(REAP_WAIT_SECONDS)   # the watcher reaps it
            if child.returncode is not None:
                return how_it_ended(pid, child.returncode)
        if lives:
            return f"process {pid} no longer answers (its connection to cudump was lost)"
        return f"process {pid} has ended"

    def interrupt(self) -> None:
        self.controller.each_shared(lambda s: s.set_interrupt(True))
        self.controller.bump()

    def end(self) -> None:
        self.detached = True
        with self._lock:
            self._held.clear()
        self._set_hold(False)
        child = self.child
        if child is None or child.poll() is not None:
            return
        try:
            os.killpg(child.pid, signal.SIGTERM)
        except OSError:
            child.terminate()
        deadline = time.monotonic() + END_GRACE_SECONDS
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except OSError:
                child.kill()

    def record_dump(self, record: SnapshotRecord) -> None:
        self.controller.manifest.append(record)

    # -- session side -----------------------------------------------------------------

    def attach(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child

    def watch(self, child: subprocess.Popen[bytes]) -> None:
        """Waits for the target to end (its own thread); wakes the prompt."""
        child.wait()
        self._finished.set()
        self._stops.put(None)

    def wants_stop(self, func: FuncInfo) -> bool:
        if self.detached:
            return False
        return self._breakpoints.wants(func.demangled, func.mangled) or any(
            r.matches(func.demangled, func.mangled) for r in self.break_rules)

    def decide_halt(self, conn: Connection, func: FuncInfo, event: LaunchEvent) -> str | None:
        """Whether this launch stops (connection thread, before the plan is sent)."""
        if self.detached:
            return None
        reason: str | None = None
        number: int | None = None
        if event.interrupted:
            self.controller.each_shared(lambda s: s.set_interrupt(False))
            reason = "interrupt"
        elif func.wants & p.Want.STOP:
            sig = parse_signature(func.demangled)
            values = arg_values(decode_args(sig, event.raw_args or []))
            bp, warnings = self._breakpoints.hit(func.demangled, func.mangled, values)
            for text in warnings:
                warn(text)
            if bp is not None:
                kind = "temporary breakpoint" if bp.temporary else "breakpoint"
                reason, number = f"{kind} {bp.number}", bp.number
                if bp.temporary:
                    self.changed()
            else:
                reason = self._rule_halt(conn, func)
        if reason is None:
            return None
        assert conn.proc is not None
        key = (id(conn), event.seq)
        with self._lock:
            self._pending[key] = _Halt(func, event, reason, number)
            self._held.add(key)
        self._set_hold(True)  # before the reply: no other launch slips past
        return reason

    def halt_after(self, conn: Connection, func: FuncInfo, event: LaunchEvent,
                   reason: str) -> bool:
        """Holds a launch that has run, for a reason found after it (--break-on-nan); the
        shim stops it once its follow-up copies are made. False when detached."""
        if self.detached:
            return False
        key = (id(conn), event.seq)
        with self._lock:
            self._stepping[id(conn)] = _Halt(func, event, reason, None, after=True)
            self._held.add(key)
        self._set_hold(True)
        return True

    def _rule_halt(self, conn: Connection, func: FuncInfo) -> str | None:
        assert conn.proc is not None
        for rule in self.break_rules:
            if not rule.matches(func.demangled, func.mangled):
                continue
            key = (conn.proc.pid, id(rule))
            n = self._rule_matches.get(key, 0) + 1
            self._rule_matches[key] = n
            if rule.selects(n):
                return f"rule {rule.name} ({rule.path}:{rule.line})"
        return None

    def serve_stop(self, conn: Connection, seq: int, stopped: dict[str, int]) -> None:
        """A launch is held (connection thread): present it and serve it until resumed."""
        assert conn.proc is not None
        phase = "after" if stopped["phase"] == p.Phase.AFTER else "before"
        with self._lock:
            if phase == "before":
                halt = self._pending.pop((id(conn), seq), None)
            else:
                halt = self._stepping.pop(id(conn), None)
            waiter = self._step_waiters.pop(id(conn), None) if phase == "after" else None
        if halt is None:
            raise p.ProtocolError(f"a stop at launch {seq} that was never decided")
        event, func = halt.event, halt.func
        sig = parse_signature(func.demangled)
        info = StopInfo(
            pid=conn.proc.pid, tid=event.tid, kernel=func.demangled, mangled=func.mangled,
            launch=event.seq, occurrence=event.occurrence, device=event.device,
            grid=tuple(event.grid), block=tuple(event.block),  # type: ignore[arg-type]
            smem=event.smem, stream=event.stream_hex, api=event.api, phase=phase,
            reason="step" if phase == "after" and not halt.after else halt.reason,
            breakpoint=halt.breakpoint,
            signature=sig, args=decode_args(sig, event.raw_args or []),
            pointers=dict(event.pointers))
        if event.flags & p.LaunchFlag.GRAPH:
            info.graph, info.replay, info.node = event.graph, event.replay, event.node
        if self.detached:
            # Decided before a detach (another process's stop was let go with it, while
            # this one was on its way): nothing stops any more, so it goes on at once.
            stop = RemoteStop(conn, conn.proc, info, halt)
            self._release((id(conn), seq))
            stop._resume(p.ResumeMode.CONTINUE, wait=False)
            stop.serve()
            return
        self.controller.stopped(info)
        if phase == "after" and stopped["launch_rc"] != 0:
            warn(f"launch {event.seq} of {func.demangled} failed with CUDA error "
                 f"{stopped['launch_rc']}")
        if phase == "before" and stopped["sync_rc"] != 0:
            warn(f"waiting for the device before the stop gave CUDA error {stopped['sync_rc']}")
        stop = RemoteStop(conn, conn.proc, info, halt)
        with self._lock:
            self._live.setdefault(id(conn), []).append(stop)
        if phase == "after" and waiter is not None:
            waiter.put(stop)
        elif phase == "after":
            self._stops.put(stop)  # nobody waits for it: the prompt takes it as a stop
        else:
            self._stops.put(stop)
        stop.serve()
        with self._lock:
            lives = self._live.get(id(conn), [])
            if stop in lives:
                lives.remove(stop)

    def _release(self, key: tuple[int, int]) -> None:
        with self._lock:
            self._held.discard(key)
            empty = not self._held
        if empty:
            self._set_hold(False)

    def _set_hold(self, on: bool) -> None:
        self.controller.each_shared(lambda s: s.set_hold(on))
        if on:
            self.controller.bump()

    def connection_closed(self, conn: Connection) -> None:
        with self._lock:
            for stop in self._live.pop(id(conn), []):
                stop.close()
            waiter = self._step_waiters.pop(id(conn), None)
            self._stepping.pop(id(conn), None)
            keys = [k for k in self._held if k[0] == id(conn)]
            for k in keys:
                self._held.discard(k)
            for k in [k for k in self._pending if k[0] == id(conn)]:
                del self._pending[k]
            empty = not self._held
        if waiter is not None:
            waiter.put(None)
        if keys and empty:
            self._set_hold(False)

    def close(self) -> None:
        """The run is over: nothing may stay held."""
        self.detached = True
        self._let_all_go()

    def _let_all_go(self) -> None:
        """Detached (or the run is over): every launch still held goes on, those of other
        processes and threads too, and no launch waits for another any more. A held launch
        nobody lets go would keep every process of the run waiting (all-stop), and a
        process waiting for another (a collective) would wait for ever."""
        with self._lock:
            lives = [s for stops in self._live.values() for s in stops]
            self._held.clear()
        self._set_hold(False)
        for stop in lives:
            stop._resume(p.ResumeMode.CONTINUE)


__all__ = ["DebugController", "RemoteStop"]
