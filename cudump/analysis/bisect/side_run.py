"""Running a side: this cudump again, as a subprocess writing a run directory."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudump.analysis.bisect.errors import BisectError
from cudump.analysis.bisect.relaunch import cudump_argv
from cudump.analysis.bisect.sides import Side
from cudump.rundir import files as runfiles
from cudump.rundir.layout import MANIFEST_FILE
from cudump.rundir.summary import read_exit_status
from cudump.rundir.watch import RunProgress, RunWatch

WATCH_SECONDS = 0.2          # how often a side's run is looked at for the progress line
# Compilers' caches a program fills on its first run (torch.compile's Inductor, Triton). A
# run that finds them cold launches kernels a warm one does not: it compiles, and Triton's
# autotuner benchmarks a kernel's candidates by launching them, as often as their timings
# say, so two cold runs need not launch the same kernels either. Each side gets caches of
# its own in the work directory (unless the user's environment names them), and a side
# whose first run filled them runs again warm (steps.Bisect._digest_runs): every run that
# is compared then launches alike.
COMPILE_CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


@dataclass
class SideRun:
    side: Side
    run_dir: Path
    log: Path                  # its stdout and stderr (the program's and cudump's)
    returncode: int
    exit_status: int | None    # the program's, from summary.json; None: it did not run
    filled_caches: bool = False  # it found the side's compile caches empty and left files

    def note(self) -> str | None:
        """A line about a program that failed, or None."""
        if self.exit_status:
            return (f"{self.side.label}: the program exited with status {self.exit_status} "
                    f"(its output: {self.log})")
        return None


def _last_error(log: Path) -> str:
    """cudump's error line in a log, else its last non-empty line."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    errors = [ln for ln in lines if ln.startswith("cudump: error:")]
    return (errors or lines or ["no output"])[-1]


def _holds_files(folder: Path) -> bool:
    """Whether anything at all was written under `folder` (stops at the first file)."""
    for _, _, files in os.walk(folder):
        if files:
            return True
    return False


def run_side(side: Side, run_dir: Path, log: Path, options: Sequence[str],
             watch: Callable[[RunProgress], None] | None = None,
             caches: Path | None = None) -> SideRun:
    """`cudump --out RUN_DIR OPTIONS -- PROGRAM...` for one side; BisectError if
    cudump could not run the program (a program that fails is a SideRun with its status).
    `watch` hears how far the run has got, from the start and then every WATCH_SECONDS.
    `caches`: the side's folder for the compile caches the environment does not name."""
    cmd = cudump_argv("--out", str(run_dir), *options, "--", *side.argv)
    env = side.environment()
    mine: list[Path] = []
    try:
        runfiles.make_dir(log.parent)
        for name in COMPILE_CACHES:
            if name not in env and caches is not None:
                cache = caches / name.lower()
                runfiles.make_dirs(cache)
                env[name] = str(cache)
                mine.append(cache)
        cold = bool(mine) and not any(_holds_files(c) for c in mine)
        with runfiles.create_file(log) as out:
            # A session of its own: a terminal's Ctrl-C is bisect's, and bisect stops the
            # side run's whole process group, its program included (interrupt).
            child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
    except OSError as err:
        raise BisectError(f"{side.label}: cannot start cudump: {err.strerror or err}") from None
    returncode = _wait_for(child, RunWatch(run_dir) if watch is not None else None, watch)
    ran = SideRun(side, run_dir, log, returncode, read_exit_status(run_dir),
                  cold and any(_holds_files(c) for c in mine))
    if ran.exit_status is None:
        raise BisectError(f"{side.label}: {side.describe()} did not run under cudump: "
                          f"{_last_error(log)}")
    if not (run_dir / MANIFEST_FILE).is_file():
        why = (f"the program exited with status {ran.exit_status} before any buffer was "
               "recorded" if ran.exit_status else
               "no launch had a buffer in its arguments (or the rules matched none)")
        raise BisectError(f"{side.label}: nothing recorded: {why}; its output: {log}")
    return ran


def _wait_for(child: subprocess.Popen[bytes], runs: RunWatch | None,
              watch: Callable[[RunProgress], None] | None) -> int:
    """The child's exit status; `watch` hears its progress meanwhile. An exception here
    (Ctrl-C) ends the child first, as subprocess.run would."""
    try:
        if runs is None or watch is None:
            return child.wait()
        while True:
            watch(runs.poll())
            try:
                return child.wait(timeout=WATCH_SECONDS)
            except subprocess.TimeoutExpired:
                pass
    except BaseException:
        stop_group(child)
        raise


def stop_group(child: subprocess.Popen[bytes]) -> None:
    """Ends a side run now: its cudump and everything in its process group (the program
    and the program's children), then reaps it."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:         # not ours (cannot be): at least the child itself
        child.kill()
    child.wait()
