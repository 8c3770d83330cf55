"""Breakpoints at run time: deciding which launches stop, and serving a stopped launch.

A stopped launch is served on its connection's thread (remote_stop.RemoteStop); the
prompt, on the main thread, drives the run through the DebugController here.

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
from pathlib import Path
from typing import Any

from cudump.console import warn
from cudump.controller.ctrl_c import pass_ctrl_c_on
from cudump.controller.interfaces import ProcessLink, RunControl
from cudump.controller.remote_stop import Halt, RemoteStop
from cudump.kernels.args import arg_values, decode_args
from cudump.kernels.signature import parse_signature
from cudump.launches.process import FuncInfo, LaunchEvent, how_it_ended, process_lives
from cudump.launches.scopes import Where
from cudump.launches.stop import KernelSeen, ResumeMode, TargetError
from cudump.policy.breakpoints import Breakpoints
from cudump.policy.rules import RuleCounter
from cudump.rundir.manifest import SnapshotRecord
from cudump.wire import protocol as p

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


class DebugController:
    """The run as the prompt drives it (implements prompt.debugger.Debugger)."""

    def __init__(self, controller: RunControl) -> None:
        self.controller = controller
        self._breakpoints = Breakpoints()
        for spec in controller.options.breaks:
            self._breakpoints.add(spec)
        self.break_rules = RuleCounter([r for r in controller.options.rules if r.is_break])
        self.detached = False
        self.interrupted = False     # Debugger.interrupted
        self.ended_at_prompt: str | None = None   # "quit", "kill": the prompt ended it
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int], Halt] = {}   # (id(conn), seq) -> halt decided
        self._stepping: dict[int, Halt] = {}              # id(conn) -> the stepped launch
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
            stop = self._stops.get(timeout=timeout)
        except queue.Empty:
            return None
        self.interrupted = False
        return stop

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
            pass_ctrl_c_on(self.child)
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
        self.interrupted = True
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
        return (self._breakpoints.wants(func.demangled, func.mangled)
                or self.break_rules.wants(func.demangled, func.mangled))

    def decide_halt(self, conn: ProcessLink, func: FuncInfo, event: LaunchEvent) -> str | None:
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
            assert conn.proc is not None
            where = event.where(conn.proc)
            bp, warnings = self._breakpoints.hit(func.demangled, func.mangled, values, where)
            for text in warnings:
                warn(text)
            if bp is not None:
                kind = "temporary breakpoint" if bp.temporary else "breakpoint"
                reason, number = f"{kind} {bp.number}", bp.number
                if bp.temporary:
                    self.changed()
            else:
                reason = self._rule_halt(conn, func, where)
        if reason is None:
            return None
        assert conn.proc is not None
        key = (id(conn), event.seq)
        with self._lock:
            self._pending[key] = Halt(func, event, reason, number)
            self._held.add(key)
        self._set_hold(True)  # before the reply: no other launch slips past
        return reason

    def halt_after(self, conn: ProcessLink, func: FuncInfo, event: LaunchEvent,
                   reason: str) -> bool:
        """Holds a launch that has run, for a reason found after it (--break-on-nan); the
        shim stops it once its follow-up copies are made. False when detached."""
        if self.detached:
            return False
        key = (id(conn), event.seq)
        with self._lock:
            self._stepping[id(conn)] = Halt(func, event, reason, None, after=True)
            self._held.add(key)
        self._set_hold(True)
        return True

    def _rule_halt(self, conn: ProcessLink, func: FuncInfo, where: Where) -> str | None:
        assert conn.proc is not None
        rule = self.break_rules.selected(conn.proc.pid, func.demangled, func.mangled, where)
        return f"rule {rule.name} ({rule.path}:{rule.line})" if rule is not None else None

    def serve_stop(self, conn: ProcessLink, seq: int, stopped: dict[str, int]) -> None:
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
        info = halt.stop_info(conn.proc.pid, phase, event.where(conn.proc))
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

    def connection_closed(self, conn: ProcessLink) -> None:
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
