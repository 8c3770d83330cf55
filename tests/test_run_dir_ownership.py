"""A run directory is one run's: `--out` refuses a symlink, a directory another run is
writing, and the numbered cudump-out/<n>/ each run gets is its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cudump.controller.session import default_run_dir
from cudump.rundir import files as runfiles
from cudump.rundir import ownership
from cudump.rundir.layout import LOCK_FILE

ROOT = Path(__file__).resolve().parent.parent
WAIT_SECONDS = 60      # a bound on waiting for a condition, never a timing assumption


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("cudump: error: "), stderr
    return lines[0]


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def cudump_env(fake, shim_lib: Path) -> dict[str, str]:
    return fake.env() | {"CUDUMP_SHIM": str(shim_lib),
                         "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def held_program(tmp_path: Path) -> list[str]:
    """A program that says it started (a file) and runs until told to end (another)."""
    started, go = tmp_path / "started", tmp_path / "go"
    return ["sh", "-c", f"touch {started}; while [ ! -e {go} ]; do sleep 0.02; done"]


# -- symlinks ---------------------------------------------------------------------------

@pytest.mark.parametrize("dangling", [False, True])
def test_an_out_that_is_a_symlink_is_refused(fake, cudump_run, tmp_path, dangling):
    elsewhere = tmp_path / "elsewhere"
    if not dangling:
        elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere, target_is_directory=True)
    ran = cudump_run([str(fake.programs["linked"])], "--trace", run_dir=link)
    assert ran.returncode == 2 and ran.stdout == ""      # the program did not run
    line = one_error_line(ran.stderr)
    assert f"--out {link} is a symlink" in line and "File exists" not in line, line
    assert not elsewhere.exists() or list(elsewhere.iterdir()) == []
    assert link.is_symlink()


def test_a_cudump_out_that_is_a_symlink_is_refused(fake, shim_lib, tmp_path):
    """cudump-out/ is a folder cudump makes: one there as a symlink is not written through."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "cudump-out").symlink_to(elsewhere, target_is_directory=True)
    done = subprocess.run([sys.executable, "-m", "cudump", str(fake.programs["linked"])],
                          env=cudump_env(fake, shim_lib), capture_output=True, text=True,
                          timeout=WAIT_SECONDS, cwd=cwd)
    assert done.returncode == 2 and done.stdout == ""
    assert "cudump-out is a symlink" in one_error_line(done.stderr)
    assert list(elsewhere.iterdir()) == []


def test_make_dirs_makes_each_missing_folder_and_refuses_a_symlink(tmp_path):
    assert runfiles.make_dirs(tmp_path / "a" / "b" / "c").is_dir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(NotADirectoryError):
        runfiles.make_dirs(tmp_path / "link")
    # a folder above that is there already is the user's, symlink or not
    assert runfiles.make_dirs(tmp_path / "link" / "new").is_dir()


# -- one run per directory --------------------------------------------------------------

def test_a_second_run_into_a_directory_in_use_is_refused(fake, shim_lib, tmp_path):
    """Two runs at once into one --out: the first keeps it (its summary stays its own), the
    second is one line naming the first, before its program runs."""
    out = tmp_path / "run"
    env = cudump_env(fake, shim_lib)
    first = subprocess.Popen([sys.executable, "-m", "cudump", "--out", str(out), "--",
                              *held_program(tmp_path)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "started").exists(), "the first run's program started")
        second = subprocess.run([sys.executable, "-m", "cudump", "--out", str(out), "--",
                                 "sh", "-c", "echo second ran"], env=env, capture_output=True,
                                text=True, timeout=WAIT_SECONDS)
        assert second.returncode == 2 and second.stdout == ""
        line = one_error_line(second.stderr)
        assert (f"--out {out} is in use by another cudump run (process {first.pid})"
                in line), line
        (tmp_path / "go").touch()
        _, err = first.communicate(timeout=WAIT_SECONDS)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert first.returncode == 0, err
    assert json.loads((out / "summary.json").read_text())["exit_status"] == 0
    assert not os.path.lexists(out / LOCK_FILE)      # given up at the end


def test_a_crashed_run_leaves_its_directory_usable(fake, shim_lib, tmp_path):
    """A run killed with SIGKILL cannot remove its marker, but the kernel drops its lock:
    the next run takes the directory."""
    out = tmp_path / "run"
    env = cudump_env(fake, shim_lib)
    first = subprocess.Popen([sys.executable, "-m", "cudump", "--out", str(out), "--",
                              *held_program(tmp_path)], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "started").exists(), "the first run's program started")
        assert (out / LOCK_FILE).is_file()
    finally:
        os.killpg(first.pid, signal.SIGKILL)      # cudump and its program, at once
        first.wait()
    assert (out / LOCK_FILE).is_file()           # left behind, unlocked
    again = subprocess.run([sys.executable, "-m", "cudump", "--out", str(out), "--",
                            "sh", "-c", "echo again"], env=env, capture_output=True, text=True,
                           timeout=WAIT_SECONDS)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "again\n"
    assert json.loads((out / "summary.json").read_text())["exit_status"] == 0


def test_ownership_is_refused_while_held_and_free_once_released(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    held = ownership.take(run_dir)
    with pytest.raises(ownership.RunDirTaken) as taken:
        ownership.take(run_dir)
    assert taken.value.owner == os.getpid()
    held.release()
    assert not os.path.lexists(run_dir / LOCK_FILE)
    ownership.take(run_dir).release()


def test_a_stale_marker_is_taken_over_and_a_planted_symlink_refused(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_FILE).write_text("999999\n")     # a crashed run's: no lock on it
    ownership.take(run_dir).release()
    (run_dir / LOCK_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ownership.MarkerInTheWay):
        ownership.take(run_dir)
    assert not (tmp_path / "elsewhere").exists()


def test_runs_started_at_once_each_get_their_own_number(tmp_path):
    base = tmp_path / "cudump-out"
    got: list[Path] = []
    barrier = threading.Barrier(8)

    def one() -> None:
        barrier.wait()
        got.append(default_run_dir(base)[0])

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(int(p.name) for p in got) == list(range(1, 9))


def test_numbering_skips_names_of_other_digits_and_directories_taken(tmp_path):
    """A folder named with digits of another script (int() of '²' fails) is not a run's
    number; a number whose directory another run holds is left to it."""
    base = tmp_path / "cudump-out"
    base.mkdir()
    (base / "²").mkdir()
    (base / "٣").mkdir()
    run_dir, held = default_run_dir(base)
    assert run_dir == base / "1"
    assert (run_dir / LOCK_FILE).is_file()
    held.release()
