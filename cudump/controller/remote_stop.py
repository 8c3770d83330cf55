"""A launch held in the target, and the requests the prompt makes of it.

A launch that stops is held on its own thread in the target (shim/stop.c).
The connection thread that talks to that process stays with the stop and runs
the prompt's requests (reads, allocation queries, backtrace) one at a time on
the socket, so the socket keeps a single owner; the prompt, on the main
thread, hands it work through a queue and waits for the answer.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from cudump.controller.interfaces import ProcessLink
from cudump.kernels.args import decode_args
from cudump.kernels.demangle import demangle
from cudump.kernels.geometry import Allocation
from cudump.kernels.signature import parse_signature
from cudump.kernels.symbols import symbolize
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState, pointer_allocation
from cudump.launches.scopes import NOWHERE, Where
from cudump.launches.stop import Frame, GraphNode, StopInfo, TargetError
from cudump.wire import protocol as p


def write_held(conn: ProcessLink, address: int, data: bytes) -> None:
    """Writes `data` to device memory at `address` while a launch of the process is held:
    the bytes go into the staging area (the stop's own while it is held) and the shim copies
    them from there (MSG_WRITE). Runs on the connection's thread: `set var` at the prompt
    (RemoteStop.write) and --inject (controller.inject). TargetError says why not."""
    shared = conn.shared
    size = len(data)
    limit = shared.staging_size if shared is not None else 0
    if size == 0:
        raise TargetError("nothing to write: the size must be at least one byte")
    if size > limit:
        raise TargetError(f"{size} bytes is more than one write can take "
                          f"({limit}); raise --staging or write less")
    if address < 0 or address + size > 1 << 64:
        raise TargetError(f"0x{address:x} and the {size} bytes from it do not fit in the "
                          "64-bit address space")
    assert shared is not None
    shared.staging(0, size)[:] = data
    rc, _ = conn.request(p.Kind.WRITE, p.WRITE.pack(dst=address, size=size, offset=0))
    if rc != 0:
        raise TargetError(f"cannot write {size} bytes at 0x{address:x}: "
                          + ("refused by the shim" if rc == -1 else f"CUDA error {rc}"))


@dataclass
class Halt:
    """Why a launch is (to be) held: decided on the connection's thread before the stop."""

    func: FuncInfo
    event: LaunchEvent
    reason: str
    breakpoint: int | None
    after: bool = False     # decided after the launch ran (its reason is not a step)

    def stop_info(self, pid: int, phase: str, where: Where = NOWHERE) -> StopInfo:
        """The stop as the prompt shows it, at `phase` ("before" or "after") of the launch
        (made `where`, in its process's names)."""
        event, func = self.event, self.func
        sig = parse_signature(func.demangled)
        info = StopInfo(
            pid=pid, tid=event.tid, kernel=func.demangled, mangled=func.mangled,
            launch=event.seq, occurrence=event.occurrence, device=event.device,
            grid=tuple(event.grid), block=tuple(event.block),  # type: ignore[arg-type]
            smem=event.smem, stream=event.stream_hex, api=event.api, phase=phase,
            reason="step" if phase == "after" and not self.after else self.reason,
            breakpoint=self.breakpoint,
            signature=sig, args=decode_args(sig, event.raw_args or []),
            pointers=dict(event.pointers), tensormaps=dict(event.tensormaps), where=where)
        if event.flags & p.LaunchFlag.GRAPH:
            info.graph, info.replay, info.node = event.graph, event.replay, event.node
        return info


class RemoteStop:
    """A launch held in the target (implements target.StoppedLaunch)."""

    def __init__(self, conn: ProcessLink, proc: ProcessState, info: StopInfo,
                 halt: Halt) -> None:
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
        self._call(lambda: write_held(self.conn, address, data))

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
                found = symbolize(path, where, self.info.pid)
                if found is not None:
                    symbol, where = found
            frames.append(Frame(len(frames), int(addr, 16), path,
                                demangle(symbol) if symbol else None, where))
        return frames


__all__ = ["Halt", "RemoteStop", "write_held"]
