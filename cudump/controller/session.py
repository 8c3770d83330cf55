"""One run of a target program under cudump: the listening socket, the target started with
the shim preloaded, the prompt when debugging, and the summary at the end."""

from __future__ import annotations

import contextlib
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
from pathlib import Path
from typing import Any, Protocol

from cudump.analysis.transplant.outcome import injection_lines
from cudump.console import say, warn
from cudump.controller.connection import Connection
from cudump.controller.ctrl_c import END_MESSAGE, INTERRUPT_MESSAGE, forwarder
from cudump.controller.debugger import DebugController
from cudump.controller.gc_pauses import short_collections
from cudump.controller.options import RunOptions
from cudump.controller.preload import preload_env, scopes_env
from cudump.controller.run_state import Controller
from cudump.controller.target_env import layers_env, xla_dump_env
from cudump.errors import CudumpError
from cudump.kernels.unmatched import unmatched_lines
from cudump.policy.given_patterns import given_patterns
from cudump.rundir import files as runfiles
from cudump.rundir import ownership
from cudump.rundir.index import index_at_end
from cudump.rundir.layout import FLIGHT_FILE, MODULES_DIR, SUMMARY_FILE
from cudump.rundir.ownership import Ownership

# How long to wait, once the target has exited, for its processes' last
# messages (children that outlive it are not waited for longer than this).
DRAIN_SECONDS = 5.0
_UCRED = struct.Struct("3i")


def default_run_dir(base: Path = Path("cudump-out")) -> tuple[Path, Ownership]:
    """A fresh numbered directory under cudump-out/, made and held by this run. Runs
    started at once each get their own: a number is this run's only once its mkdir made
    the directory and its lock is taken (an `--out` naming the same directory in between
    keeps it); otherwise the next number is tried. OSError where none can be made."""
    runfiles.make_dirs(base)        # never through a symlink (NotADirectoryError)
    numbers = [int(q.name) for q in base.iterdir() if q.name.isascii() and q.name.isdigit()]
    n = max(numbers, default=0) + 1
    while True:
        run_dir = base / str(n)
        n += 1
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        try:
            return run_dir, ownership.take(run_dir)
        except (ownership.RunDirTaken, ownership.MarkerInTheWay):
            continue
        except OSError:
            with contextlib.suppress(OSError):
                run_dir.rmdir()     # made just now, and nothing could be made in it
            raise


def index_run(run_dir: Path) -> None:
    """A job's node writes its part of the job's columnar index (rundir/index.py), where
    DuckDB is installed; a failure is said, and the run's own files stand."""
    try:
        index_at_end(run_dir)
    except CudumpError as err:
        warn(f"the job's index was not written: {err}")
    except Exception as err:   # the index is the JSONL's copy: never the run's exit status
        warn(f"the job's index was not written: {type(err).__name__}: {err}")


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


class RunPrompt(Protocol):
    """The prompt a debugged run is driven from (cudump.prompt's run_prompt)."""

    def __call__(self, debugger: DebugController, *, batch: Path | None,
                 stdin_is_tty: bool) -> None: ...


# The prompt lies above the controller, so the command line hands the session a loader for
# it; the session calls it before the target starts, for Ctrl-C must find the prompt ready.
PromptLoader = Callable[[], RunPrompt]


class Session:
    """One run of a target program under cudump."""

    def __init__(self, options: RunOptions, load_prompt: PromptLoader) -> None:
        self.options = options
        self.load_prompt = load_prompt
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
        run_prompt: RunPrompt | None = None
        if debugger is not None:
            # Loaded before the target starts: Ctrl-C must find the prompt ready.
            run_prompt = self.load_prompt()
            # Until the prompt is ready, Ctrl-C asks for a stop (twice: ends the run).
            signal.signal(signal.SIGINT, _early_interrupt(debugger))
        try:
            env = preload_env(dict(os.environ), "@" + name)
            env["CUDUMP_TOKEN"] = self.controller.token
            env["CUDUMP_CONTROLLER_PID"] = str(os.getpid())
            if self.options.reads_scopes:
                kept = scopes_env(env, self.options.step_range)
                if kept:
                    warn(kept)
            if self.options.layers:
                env = layers_env(env, self.options.run_dir, self.options.module_outputs)
            elif self.options.scans:
                env = xla_dump_env(env, self.options.run_dir)
            # cudump's first line: where the files go (the program's stdout stays its own).
            # Not for a program that cannot start: its run directory is removed.
            if shutil.which(program, path=env.get("PATH")) is not None:
                say(f"cudump: writing to {self.options.run_dir}")
            if self.options.writes_behind:
                self.controller.shared_files.prepare()
            if self.controller.node is not None:
                self.controller.node.start()
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
                if debugger is not None and run_prompt is not None:
                    returncode = self._debug(debugger, run_prompt, self.child)
                else:
                    returncode = self._wait(self.child)
            # gdb's quit kills the program and exits 0: so does the prompt's (the program's
            # status, 128+N, stays in summary.json), and says so, not as a failure.
            quit_at_prompt = (debugger is not None and returncode < 0
                              and debugger.ended_at_prompt == "quit")
            if quit_at_prompt:
                status = 128 - returncode
                say(f"cudump: {program} was ended at the prompt (quit)")
            else:
                status = exit_status_of(returncode, program)
            if self.controller.node is not None and not quit_at_prompt:
                ranks = [p.rank for p in self.controller.processes if p.rank is not None]
                self.controller.node.ended(status, ranks[0] if ranks else None)
            self._drain()
            self.controller.close()  # waits for the last snapshots to be written
            summary = self.controller.summary(status)
            summary.flight, flight_named = self._flight(returncode)
            if quit_at_prompt:
                summary.ended_at_prompt = "quit"
            self._say_timeline()
            for record in summary.injections:
                if record.status != "refused":     # said as it happened
                    for line in injection_lines(record):
                        say(line)
            # Each pattern that named no kernel of the run, with the names it may have meant.
            for line in unmatched_lines(given_patterns(self.options.rules, self.options.breaks),
                                        self.controller.launched):
                say(line)
            # As compute-sanitizer's --error-exitcode: a CI job fails on what was found
            # (summary.json keeps the program's own status).
            found = summary.findings(flight_named) if self.options.error_exitcode else []
            if found:
                say(f"cudump: exit status {self.options.error_exitcode} (--error-exitcode): "
                    f"{'; '.join(found)}")
            if self.controller.node is not None:
                for line in self.controller.node.blob_lines():
                    say(line)
            # The last line: what the run did, and where its files are.
            say(summary.line(self.options.run_dir))
            if summary.processes == 0:
                # The shim connects once the driver's cuInit succeeds: without a process,
                # the summary's zeros say nothing of the program, only of the driver.
                say(f"cudump: {program} ran but no process connected to the controller: it "
                    "never initialised CUDA (cuInit), or the CUDA driver (libcuda.so.1) was "
                    "not found or failed to start")
            try:
                summary.write(self.options.run_dir)
            except OSError as err:
                warn(f"could not write {self.options.run_dir / SUMMARY_FILE}: "
                     f"{err.strerror or err}")
            index_run(self.options.run_dir)
            if found:
                return self.options.error_exitcode
            return 0 if quit_at_prompt else status
        finally:
            if debugger is not None:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            self._server.close()
            # A program that never started leaves no timeline.
            self.controller.close(complete=self.child is not None)
            # Nothing of this run's left under a temporary name (a write that failed).
            for folder in (self.options.run_dir, self.options.run_dir / MODULES_DIR):
                runfiles.remove_own_temporaries(folder)

    def _flight(self, returncode: int) -> tuple[str | None, int]:
        """--flight: flight.jsonl, and what was in flight when the program failed (nothing
        printed for a clean run). The file's name, as the summary lists it, and how many
        launches the report named."""
        if not self.options.flight_slots:
            return None, 0
        from cudump.controller.flight import finish

        try:
            result = finish(self.controller.processes, self.options.run_dir, returncode)
        except OSError as err:
            warn(f"could not write {self.options.run_dir / FLIGHT_FILE}: {err.strerror or err}")
            return None, 0
        for line in result.lines:
            say(line)
        return (FLIGHT_FILE if result.written is not None else None), result.named

    def _say_timeline(self) -> None:
        timeline = self.controller.timeline
        if timeline is None or self.controller.timeline_written is None:
            return
        full = (f"; full: events after the first {timeline.limit:,} left out"
                if timeline.full else "")
        say(f"cudump: timeline: {self.controller.timeline_written} ({timeline.events:,} "
            f"events{full})")

    def _debug(self, debugger: DebugController, run_prompt: RunPrompt,
               child: subprocess.Popen[bytes]) -> int:
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
        return Session._wait_with(child, forwarder(child))

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
