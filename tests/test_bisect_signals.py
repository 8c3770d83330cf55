"""`cudump bisect` stopped by a signal: its side run (cudump and the program) stops with it,
its temporary work directory goes, and it exits with 128 + the signal's number."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudump.analysis.bisect.options import prepare_work
from cudump.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
WAIT_SECONDS = 60      # a bound on waiting for a condition, never a timing assumption


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent that is not reaping counts as ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X")


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_stops_the_side_runs_and_removes_the_work_directory(
        fake, shim_lib, tmp_path, signum):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pidfile = tmp_path / "program.pid"
    # The program of side A runs until it is stopped; it says it started (its pid).
    program = ["sh", "-c", f'echo $$ > {pidfile}.new; mv {pidfile}.new {pidfile}; '
               "while :; do sleep 0.05; done"]
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib), "TMPDIR": str(tmp),
                        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    bisect = subprocess.Popen([sys.executable, "-m", "cudump", "bisect", "--env-a", "X=1",
                               "--env-b", "X=2", "--", *program], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    program_pid = side_pid = None
    try:
        wait_for(pidfile.exists, "side A's program started")
        program_pid = int(pidfile.read_text())
        side_pid = parent_of(program_pid)            # side A's cudump
        assert side_pid != bisect.pid and alive(side_pid)
        (work,) = tmp.iterdir()
        bisect.send_signal(signum)
        out, err = bisect.communicate(timeout=WAIT_SECONDS)
        assert bisect.returncode == 128 + signum, err
        assert "Traceback" not in err, err
        assert f"stopped by {signal.Signals(signum).name}" in err, err
        wait_for(lambda: not alive(program_pid), "side A's program ended")
        wait_for(lambda: not alive(side_pid), "side A's cudump ended")
        assert not work.exists() and list(tmp.iterdir()) == []
    finally:
        for pid in (program_pid, side_pid):
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)
        if bisect.poll() is None:
            os.killpg(bisect.pid, signal.SIGKILL)
            bisect.wait()


def test_a_work_directory_that_is_a_symlink_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(UsageError, match="is a symlink"):
        prepare_work(tmp_path / "link")
    assert prepare_work(tmp_path / "new" / "work") == (tmp_path / "new" / "work", False)
