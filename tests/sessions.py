"""Starting cudump (or a program) in a session of its own, so that a test that times out, or
ends, leaves nothing running: every process of the session is killed, the programs under
cudump included (which cudump may have put in process groups of their own, as it does
under the prompt). Killing only the process that was started would leave its programs
running until they end on their own."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


def _session_of(pid: str) -> int | None:
    """The session id of process `pid`, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
    fields = text[text.rfind(b")") + 2:].split()
    return int(fields[3]) if len(fields) > 3 else None


def members(sid: int) -> list[int]:
    """The processes of session `sid` (zombies included)."""
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _session_of(pid) == sid]


def kill_session(sid: int) -> None:
    """SIGKILL to every process of session `sid`, until none is left that can still run
    (a process may fork while it is killed); its zombies are for their parents to reap."""
    for _ in range(50):
        alive = [pid for pid in members(sid) if not _is_zombie(pid)]
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return True
    return text[text.rfind(b")") + 2:][:1] in (b"Z", b"X")


@contextmanager
def session(argv: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """subprocess.Popen(argv, **popen) in a new session; on leaving, whatever way, every
    process of that session is killed and the one started is reaped."""
    proc = subprocess.Popen(list(argv), start_new_session=True, **popen)
    try:
        yield proc
    finally:
        kill_session(proc.pid)     # before the wait: until it is reaped, its pid is its own
        proc.wait(timeout=30)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def run(argv: Sequence[str], *, timeout: float, input: str | None = None,
        **popen: Any) -> subprocess.CompletedProcess[str]:
    """subprocess.run(argv, capture_output=True, text=True, timeout=timeout) in a session of
    its own: on a timeout every process of the session is killed (then TimeoutExpired), and
    after a normal end any process still left in it (a program cudump left behind) too."""
    with session(argv, stdin=subprocess.PIPE if input is not None else None,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen) as proc:
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            kill_session(proc.pid)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(expired.cmd, timeout, out, err) from None
        finally:
            kill_session(proc.pid)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
