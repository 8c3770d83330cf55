"""The test harness's sessions (tests/sessions.py): a run that times out leaves no process
of its own running, not only the one it started."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import sessions


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return state[state.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def test_a_timeout_kills_the_programs_under_the_process_too(tmp_path):
    pidfile = tmp_path / "pid"
    # The started process's child, in a process group of its own (as a program under
    # cudump's prompt is): killing the started process alone, or its group, leaves it running.
    child = ("import subprocess, sys\n"
             "p = subprocess.Popen(['sleep', '600'], process_group=0)\n"
             f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
             "p.wait()\n")
    for timeout in (5, 20, 80):     # until the child had the time to start
        with pytest.raises(subprocess.TimeoutExpired):
            sessions.run([sys.executable, "-c", child], timeout=timeout)
        if pidfile.exists() and pidfile.read_text():
            break
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 30
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)
