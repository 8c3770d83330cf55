"""The controller: runs the target under the shim and serves one connection per process.

The shim is mechanism and this is policy: each process tells the controller
which kernel functions it meets, the controller decides once per function what
it wants of it (trace, snapshots), and the shim caches the answer so that a
launch nobody wants never comes here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from cudump.demangle import demangle
from cudump.errors import CudumpError
from cudump.rules import Rule
from cudump.shim import preload_env
from cudump.summary import RunSummary
from cudump.trace import TraceWriter

WANT_TRACE = 1
WANT_SNAPSHOT = 2
OPTION_TRACE_GRAPHS = 1

# How long to wait, once the target has exited, for its processes' last
# messages (children that outlive it are not waited for longer than this).
DRAIN_SECONDS = 5.0


@dataclass
class FuncInfo:
    """A kernel function as one process knows it."""

    id: int
    handle: str
    mangled: str
    demangled: str
    params: list[tuple[int, int]] | None  # (offset, size) per parameter, from the driver
    wants: int = 0
    launches: int = 0


@dataclass
class ProcessState:
    pid: int
    ppid: int
    exe: str
    funcs: dict[int, FuncInfo] = field(default_factory=dict)
    allocations: dict[int, tuple[str, int]] = field(default_factory=dict)  # base -> (kind, size)
    stats: dict[str, Any] | None = None
    traced_launches: int = 0


class SnapshotPolicy(Protocol):
    """What the snapshot side of the controller offers the connection loop."""

    def greeting(self, proc: ProcessState) -> tuple[str, int]: ...

    def wants(self, func: FuncInfo) -> bool: ...

    def fill(self, summary: RunSummary) -> None: ...

    def handle(self, proc: ProcessState, message: dict[str, Any], reply: ReplyFn) -> None: ...

    def close(self) -> None: ...


class ReplyFn(Protocol):
    def __call__(self, line: str) -> None: ...


@dataclass
class RunOptions:
    argv: list[str]
    run_dir: Path
    trace: bool = False
    rules: list[Rule] = field(default_factory=list)
    max_bytes: int | None = None
    staging_bytes: int = 256 << 20


class Controller:
    """State shared by all connections of one run."""

    def __init__(self, options: RunOptions, snapshots: SnapshotPolicy | None = None) -> None:
        self.options = options
        self.snapshots = snapshots
        self.trace = TraceWriter(options.run_dir) if options.trace else None
        self.lock = threading.Lock()
        self.processes: list[ProcessState] = []
        self.allocations = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self._closed = False

    # -- decisions ----------------------------------------------------------------

    def decide(self, func: FuncInfo) -> int:
        wants = WANT_TRACE if self.options.trace else 0
        if self.snapshots is not None and self.snapshots.wants(func):
            wants |= WANT_SNAPSHOT
        return wants

    # -- bookkeeping ----------------------------------------------------------------

    def add_process(self, proc: ProcessState) -> None:
        with self.lock:
            self.processes.append(proc)

    def on_alloc(self, proc: ProcessState, message: dict[str, Any]) -> None:
        base, size, kind = int(message["ptr"], 16), int(message["size"]), message["kind"]
        with self.lock:
            proc.allocations[base] = (kind, size)
            if kind != "host":
                self.allocations += 1
                self.live_bytes += size
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def on_free(self, proc: ProcessState, message: dict[str, Any]) -> None:
        base = int(message["ptr"], 16)
        with self.lock:
            kind, size = proc.allocations.pop(base, ("host", 0))
            if kind != "host":
                self.live_bytes -= size

    def summary(self, exit_status: int) -> RunSummary:
        result = RunSummary(exit_status=exit_status, allocations=self.allocations,
                            peak_bytes=self.peak_bytes)
        with self.lock:
            for proc in self.processes:
                result.processes += 1
                result.pids.append(proc.pid)
                if proc.stats is not None:
                    counts = {int(fid): int(n) for fid, n in proc.stats.get("funcs", [])}
                    captured = int(proc.stats.get("captured", 0))
                    graphs = int(proc.stats.get("graph", 0))
                    result.captured_launches += captured
                    result.graph_launches += graphs
                else:
                    # The process ended without saying goodbye (killed, _exit):
                    # count what it reported as it went.
                    counts = {fid: f.launches for fid, f in proc.funcs.items()}
                for fid, n in counts.items():
                    func = proc.funcs.get(fid)
                    if func is not None and n:
                        result.kernels[func.demangled] += n
                        result.launches += n
        if self.snapshots is not None:
            self.snapshots.fill(result)
        return result

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.trace is not None:
            self.trace.close()
        if self.snapshots is not None:
            self.snapshots.close()


class Connection:
    """One process's conversation with the controller."""

    def __init__(self, controller: Controller, sock: socket.socket) -> None:
        self.controller = controller
        self.sock = sock
        self.proc: ProcessState | None = None

    def reply(self, line: str) -> None:
        self.sock.sendall(line.encode() + b"\n")

    def serve(self) -> None:
        reader: BinaryIO = self.sock.makefile("rb")
        try:
            for raw in reader:
                try:
                    message = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                self.dispatch(message)
        except OSError:
            pass
        finally:
            reader.close()
            self.sock.close()

    def dispatch(self, message: dict[str, Any]) -> None:
        ev = message.get("ev")
        ctl = self.controller
        if ev == "hello":
            self.proc = ProcessState(int(message["pid"]), int(message["ppid"]), message["exe"])
            ctl.add_process(self.proc)
            options = OPTION_TRACE_GRAPHS if ctl.options.trace else 0
            staging, size = ("-", 0)
            if ctl.snapshots is not None:
                staging, size = ctl.snapshots.greeting(self.proc)
            self.reply(f"ok {options} {staging} {size}")
            return
        proc = self.proc
        if proc is None:
            return
        if ev == "func":
            params = message.get("params")
            func = FuncInfo(
                id=int(message["id"]),
                handle=message["handle"],
                mangled=message["name"],
                demangled=demangle(message["name"]) if message["name"] else message["handle"],
                params=[(int(o), int(s)) for o, s in params] if params is not None else None,
            )
            func.wants = ctl.decide(func)
            proc.funcs[func.id] = func
            self.reply(f"want {func.wants}")
        elif ev == "launch":
            func = proc.funcs.get(int(message["id"]))
            if func is None:
                return
            if not message.get("captured") and int(message.get("rc", 0)) == 0:
                func.launches += 1
            if ctl.trace is not None and int(message.get("rc", 0)) == 0:
                ctl.trace.write({
                    "event": "launch", "launch": message["seq"], "pid": proc.pid,
                    "kernel": func.demangled, "mangled": func.mangled,
                    "grid": message["grid"], "block": message["block"], "smem": message["smem"],
                    "stream": message["stream"], "api": message["api"],
                    "captured": bool(message.get("captured")),
                })
        elif ev == "graph":
            if ctl.trace is not None:
                ctl.trace.write({
                    "event": "graph-launch", "launch": message["seq"], "pid": proc.pid,
                    "graph": message["exec"], "stream": message["stream"], "api": message["api"],
                })
        elif ev == "alloc":
            ctl.on_alloc(proc, message)
        elif ev == "free":
            ctl.on_free(proc, message)
        elif ev in ("map", "unmap"):
            pass  # VMM address ranges: the physical memory behind them is counted
        elif ev == "stats":
            proc.stats = message
        elif ctl.snapshots is not None:
            ctl.snapshots.handle(proc, message, self.reply)


def default_run_dir(base: Path = Path("cudump-out")) -> Path:
    """A fresh numbered directory under cudump-out/."""
    base.mkdir(parents=True, exist_ok=True)
    numbers = [int(p.name) for p in base.iterdir() if p.name.isdigit()]
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
    print(f"cudump: {program} was killed by {name} (signal {signum})", file=sys.stderr)
    return 128 + signum


class Session:
    """One run of a target program under cudump."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self._threads: list[threading.Thread] = []
        self._server: socket.socket | None = None
        # Private to this user (mode 0700); in shared memory where there is
        # some, since the snapshot staging files live here too.
        shm = Path("/dev/shm")
        where = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
        self.private = Path(tempfile.mkdtemp(prefix="cudump-", dir=where))
        snapshots = None
        if options.rules:
            from cudump.snapshots import Snapshotter

            snapshots = Snapshotter(options.rules, options.run_dir, self.private,
                                    options.max_bytes, options.staging_bytes)
        self.controller = Controller(options, snapshots)

    def _accept_loop(self) -> None:
        assert self._server is not None
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            conn = Connection(self.controller, sock)
            thread = threading.Thread(target=conn.serve, name="cudump-conn", daemon=True)
            self._threads.append(thread)
            thread.start()

    def run(self) -> int:
        private = self.private
        socket_path = private / "ctl.sock"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(socket_path))
        self._server.listen(64)
        acceptor = threading.Thread(target=self._accept_loop, name="cudump-accept", daemon=True)
        acceptor.start()
        program = self.options.argv[0]
        try:
            env = preload_env(dict(os.environ), socket_path)
            try:
                child = subprocess.Popen(self.options.argv, env=env)
            except FileNotFoundError:
                raise CudumpError(f"cannot run {program}: no such file or command "
                                  "(check the path, or put it on PATH)", exit_code=127) from None
            except PermissionError:
                raise CudumpError(f"cannot run {program}: permission denied "
                                  "(is it executable?)", exit_code=126) from None
            returncode = self._wait(child)
            status = exit_status_of(returncode, program)
            self._drain()
            self.controller.close()  # waits for the last snapshots to be written
            summary = self.controller.summary(status)
            print(summary.line(), file=sys.stderr)
            summary.write(self.options.run_dir)
            return status
        finally:
            self._server.close()
            self.controller.close()
            shutil.rmtree(private, ignore_errors=True)

    @staticmethod
    def _wait(child: subprocess.Popen[bytes]) -> int:
        # Ctrl-C reaches the target through the terminal; cudump stays to
        # report how it ended. SIGTERM is passed on.
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
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
