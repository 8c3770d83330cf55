"""Running the programs of bench/realworld.py: each one under a time limit, in a process group
of its own, and what cudump wrote read back and checked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from realworld_table import BenchError

KILL_AFTER_S = 10
Say = Callable[[str], None]


@dataclass
class Done:
    stdout: str
    stderr: str
    seconds: float


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
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise BenchError(f"{where}: still running {backstop} s after it started "
                                 "(killed)") from None
            raise
    stderr = err_path.read_text(errors="replace")
    err_path.unlink()
    # 124: timeout's TERM ended it; -9 and 137: its KILL did (which timeout sends to its
    # process group, itself included).
    if proc.returncode in (124, 137, -9):
        raise BenchError(f"{where}: ran past its limit of {limit_s} s (killed):\n"
                         f"{stderr[-2000:]}")
    if proc.returncode != 0:
        raise BenchError(f"{where}: exit status {proc.returncode}:\n{stderr[-3000:]}")
    return Done(stdout, stderr, time.monotonic() - start)


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

    def pinned(self, cmd: list[str]) -> list[str]:
        """`cmd` held to the CPUs of --cpus (cudump's controller and threads with it, as
        its children inherit them), or as it is."""
        return ["taskset", "-c", self.cpus, *cmd] if self.cpus else cmd


