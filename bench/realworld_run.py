"""Running the programs of bench/realworld.py: each one under a time limit, in a process group
of its own, and what cudump wrote read back and checked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from realworld_table import BenchError
from turns import POLL_S, Ring, TurnError

KILL_AFTER_S = 10
Say = Callable[[str], None]


@dataclass
class Done:
    stdout: str
    stderr: str
    seconds: float


def device_name(who: str) -> str:
    """The GPU's name and driver, as nvidia-smi gives them; SystemExit naming `who` (the
    benchmark) where it does not answer."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SystemExit(f"{who}: nvidia-smi did not answer: {err}") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"{who}: nvidia-smi failed: {done.stderr.strip()[:300]}")
    return done.stdout.strip().splitlines()[0]


def first_line(err: Exception) -> str:
    return str(err).splitlines()[0].rstrip(":")


def sub_run(cmd: list[str], scratch: Path, where: str, limit_s: int) -> Done:
    """One program under `timeout -k` (which ends cudump and the program with it: cudump
    keeps the program in its process group), in a process group of its own that is killed
    whatever ends this script; BenchError unless it exits with 0. Runs in `scratch`, so that
    `python -m cudump` finds the installed package rather than a source tree."""
    err_path = scratch / "sub-run.err"
    start = time.monotonic()
    backstop = limit_s + 6 * KILL_AFTER_S
    with err_path.open("w") as err:
        proc = subprocess.Popen(["timeout", "-k", str(KILL_AFTER_S), str(limit_s), *cmd],
                                cwd=scratch, stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=backstop)
        except BaseException as exc:
            _kill_group(proc)
            proc.communicate()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise BenchError(f"{where}: still running {backstop} s after it started "
                                 "(killed)") from None
            raise
    stderr = err_path.read_text(errors="replace")
    err_path.unlink()
    return judged(proc.returncode, stdout, stderr, where, limit_s, time.monotonic() - start)


def judged(status: int, stdout: str, stderr: str, where: str, limit_s: int,
           seconds: float) -> Done:
    """A program run under `timeout -k`, by its exit status: BenchError unless 0."""
    # 124: timeout's TERM ended it; -9 and 137: its KILL did (which timeout sends to its
    # process group, itself included).
    if status in (124, 137, -9):
        raise BenchError(f"{where}: ran past its limit of {limit_s} s (killed):\n"
                         f"{stderr[-2000:]}")
    if status != 0:
        raise BenchError(f"{where}: exit status {status}:\n{stderr[-3000:]}")
    return Done(stdout, stderr, seconds)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_in_turns(ring: Ring, cmds: Sequence[tuple[list[str], str]], scratch: Path,
                 limit_s: int) -> list[Done | BenchError]:
    """Programs that take turns (bench/turns.py): cmds[i] = (command, where), the command
    already given ring.spec(i). All start at once, each under `timeout -k` in a process group
    of its own; the first turn goes round once every one is ready. Where one fails, the others
    are killed (their turns would not come) and say so. One result each, in order."""
    start = time.monotonic()
    procs: list[subprocess.Popen] = []
    files = []
    stopped: dict[int, str] = {}    # killed because another failed: why
    try:
        for cmd, _ in cmds:
            out = tempfile.TemporaryFile("w+", dir=scratch)
            err = tempfile.TemporaryFile("w+", dir=scratch)
            files.append((out, err))
            procs.append(subprocess.Popen(
                ["timeout", "-k", str(KILL_AFTER_S), str(limit_s), *cmd], cwd=scratch,
                stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True,
                start_new_session=True))

        def ended() -> str | None:
            for (_, where), proc in zip(cmds, procs, strict=True):
                if proc.poll() is not None:
                    return f"{where} ended (exit status {proc.returncode})"
            return None

        try:
            ring.wait_ready(limit_s, ended)
            ring.start()
        except TurnError as err:
            for i, proc in enumerate(procs):
                if proc.poll() is None:
                    stopped[i] = f"stopped: {err}"
                    _kill_group(proc)
        backstop = time.monotonic() + limit_s + 6 * KILL_AFTER_S
        while [proc.poll() for proc in procs].count(None):     # every one polled
            failed = next((where for (_, where), proc in zip(cmds, procs, strict=True)
                           if proc.returncode not in (None, 0)), None)
            if failed or time.monotonic() > backstop:
                why = (f"stopped: {failed} failed, so its turn would not go on" if failed
                       else f"still running {backstop - start:.0f} s after it started (killed)")
                for i, proc in enumerate(procs):
                    if proc.poll() is None and i not in stopped:
                        stopped[i] = why
                        _kill_group(proc)
            time.sleep(POLL_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                _kill_group(proc)
            proc.wait()
    results: list[Done | BenchError] = []
    seconds = time.monotonic() - start
    for i, ((_, where), proc, (out, err)) in enumerate(zip(cmds, procs, files, strict=True)):
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        out.close()
        err.close()
        if i in stopped:
            results.append(BenchError(f"{where}: {stopped[i]}"))
            continue
        try:
            results.append(judged(proc.returncode, stdout, stderr, where, limit_s, seconds))
        except BenchError as bench_err:
            results.append(bench_err)
    return results


def cudump_summary(out: Path, where: str, min_launches: int) -> dict:
    """The run's summary.json, checked: the shim saw the program's launches."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError) as err:
        raise BenchError(f"{where}: no readable summary.json in the run directory: {err}") from None
    if summary.get("launches", 0) < min_launches:
        raise BenchError(f"{where}: cudump counted {summary.get('launches')} launches, "
                         f"expected at least {min_launches}")
    return summary


@dataclass
class Settings:
    reps: int
    iters: int
    warmup: int
    limit_s: int
    scratch: Path                      # rules, stderr files, the models' run directories
    snap_base: Path                    # the snapshot run directories
    cupti: tuple[Path, Path] | None    # the subscriber and libcupti, where they were built
    alone: bool = False                # also the scanning modes with --no-scans-ahead
    own_thread: bool = False           # and with --no-hand-off
    modes: tuple[str, ...] = ()        # the models' modes to run (bare always): () all
    cpus: str = ""                     # taskset's CPU list every model run is held to: "" any
    chunks: int = 1                    # the models' forwards timed in chunks (torch_forward.py)
    turns: bool = False                # a repetition's model runs at once, taking turns

    def pinned(self, cmd: list[str]) -> list[str]:
        """`cmd` held to the CPUs of --cpus (cudump's controller and threads with it, as
        its children inherit them), or as it is."""
        return ["taskset", "-c", self.cpus, *cmd] if self.cpus else cmd


