"""Progress of long offline work (`cudump diff` of runs, `cudump bisect`): one line on a
terminal's stderr, nothing at all where stderr is not a terminal."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from cudump.analysis.progress import Progress
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord
from cudump.rundir.watch import RunWatch

ROOT = Path(__file__).resolve().parent.parent
PAIRS = 200


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run(argv: list[str], env: dict[str, str], cwd: Path, *, tty: bool) -> Ran:
    """`argv` with stdout captured and stderr a pipe, or the slave side of a pty."""
    if not tty:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=300)
        return Ran(done.returncode, done.stdout, done.stderr)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:          # EIO: every writer of the slave side has gone
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    try:
        child = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                 stderr=slave, stdin=subprocess.DEVNULL)
    finally:
        os.close(slave)
    reader.start()
    out, _ = child.communicate(timeout=300)
    reader.join(timeout=60)
    os.close(master)
    return Ran(child.returncode, out.decode(), b"".join(chunks).decode(errors="replace"))


def cudump_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def write_run(root: Path, offset: int) -> Path:
    root.mkdir()
    writer = ManifestWriter(root)
    for launch in range(1, PAIRS + 1):
        name = f"l{launch}.npy"
        np.save(root / name, np.full((16, 16), launch + offset * (launch % 2), np.float32))
        writer.append(SnapshotRecord(
            kernel="k(float*)", mangled="_Z1kPf", launch=launch, occurrence=launch, pid=1,
            grid=[1, 1, 1], block=[1, 1, 1], stream="0x0", arg=0, type="float*",
            phase="after", address="0x1000", dtype="float32", shape=[16, 16], file=name))
    writer.close()
    return root


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    return write_run(tmp_path / "a", 0), write_run(tmp_path / "b", 1)


def test_diff_of_runs_shows_no_progress_when_stderr_is_not_a_terminal(
        two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = two_runs
    done = run([sys.executable, "-m", "cudump", "diff", str(a), str(b), "--html",
                str(tmp_path / "html")], cudump_env(), tmp_path, tty=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    assert "\r" not in done.stdout
    assert f"{PAIRS} pairs compared, {PAIRS // 2} differ" in done.stdout


def test_diff_of_runs_shows_progress_on_a_terminal(two_runs: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    a, b = two_runs
    done = run([sys.executable, "-m", "cudump", "diff", str(a), str(b), "--brief", "--html",
                str(tmp_path / "html")], cudump_env(), tmp_path, tty=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"\rdiff: 0/{PAIRS} pairs" in done.stderr
    assert "diff: report: " in done.stderr and "launches drawn" in done.stderr
    assert done.stderr.endswith("\r")                 # taken off the screen at the end
    assert done.stderr.strip(" \r") and not done.stderr.replace("\r", "").endswith("drawn")
    # stdout is what it always is: the table and the summary, no progress in it.
    assert "\r" not in done.stdout and "diff:" not in done.stdout
    assert f"{PAIRS} pairs compared, {PAIRS // 2} differ" in done.stdout


def bisect_env(fake, shim_lib: Path, tmp_path: Path) -> dict[str, str]:
    env = fake.env()
    env["CUDUMP_SHIM"] = str(shim_lib)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["TMPDIR"] = str(tmp_path)
    return env


@pytest.mark.parametrize("tty", [False, True])
def test_bisect_shows_progress_only_on_a_terminal(fake, shim_lib: Path, tmp_path: Path,
                                                  tty: bool) -> None:
    argv = [sys.executable, "-m", "cudump", "bisect", "--env-b", "DIVERGE_AT=5", "--",
            str(fake.programs["diverge"])]
    done = run(argv, bisect_env(fake, shim_lib, tmp_path), tmp_path, tty=tty)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "first divergent: launch 18 of" in done.stdout
    if not tty:
        assert done.stderr == ""
        assert "\r" not in done.stdout
        return
    for side in ("A", "B"):
        assert f"\rbisect: run {side} (digests): " in done.stderr
        assert f"\rbisect: run {side} (snapshots): " in done.stderr
    assert "\rbisect: comparing digests: 0/128 pairs" in done.stderr
    assert "\r" not in done.stdout and "bisect:" not in done.stdout


# ---------------------------------------------------------------------------------------
# The pieces


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_in_place_at_most_every_interval() -> None:
    now = [0.0]
    screen = _Terminal()
    progress = Progress(screen, interval=0.1, clock=lambda: now[0])
    assert progress.enabled
    progress.update("diff: 0/10 pairs")
    progress.update("diff: 1/10 pairs")               # too soon: not drawn
    now[0] = 0.5
    progress.update("diff: 9/10")                     # shorter: the rest is blanked
    progress.clear()
    assert screen.getvalue() == ("\rdiff: 0/10 pairs" + "\rdiff: 9/10" + " " * 6
                                 + "\r" + " " * 10 + "\r")
    progress.update("again")                          # after a clear: at once
    assert screen.getvalue().endswith("\ragain")


def test_progress_writes_nothing_where_it_is_not_a_terminal() -> None:
    pipe = io.StringIO()
    progress = Progress(pipe)
    assert not progress.enabled
    progress.update("diff: 1/2 pairs")
    progress.before_output(_Terminal())
    progress.clear()
    assert pipe.getvalue() == ""


def test_progress_is_cleared_before_lines_to_the_same_terminal() -> None:
    screen = _Terminal()
    progress = Progress(screen)
    progress.update("diff: 3/9 pairs")
    progress.before_output(io.StringIO())              # stdout a file: the line stays
    assert screen.getvalue() == "\rdiff: 3/9 pairs"
    progress.before_output(_Terminal())                # stdout the terminal: cleared
    assert screen.getvalue().endswith("\r" + " " * 15 + "\r")


def test_run_watch_reads_only_whole_new_lines(tmp_path: Path) -> None:
    watch = RunWatch(tmp_path)
    assert watch.poll().lines == 0                     # no manifest yet
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(b'{"launch":1,"x":1}\n{"launch":2}\n{"launch":3')
    seen = watch.poll()
    assert (seen.lines, seen.launch) == (2, 2)
    with manifest.open("ab") as f:
        f.write(b'0}\n{"digest_template":"t","records":[]}\n')
    seen = watch.poll()
    assert (seen.lines, seen.launch) == (4, 30)        # a template line has no launch
    with manifest.open("ab") as f:
        f.write(b'{"digests_of":"t","launch":31,"digests":[]}\n')
    assert (watch.poll().lines, watch.progress.launch) == (5, 31)
