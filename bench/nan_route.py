"""Measure (no GPU): how many of cudump's files one NaN/Inf result crosses in the controller.

Runs `cudump --check-nan` on the stand-in driver (tests/fakecuda, its `nans` program: 40
launches of vecAdd, the 23rd leaving a NaN) with a profiler on every thread of the
controller, restricted to cudump/'s modules. The route of the producer's result is every
call made while handling it: the connection's handlers of messages tagged with the
producer's launch (MSG_REPEAT, the report; MSG_END, its snapshots) and any drain of a
process's result ring (ResultDrain._drain) in which its report was said. For that route it
counts the distinct files, the steps (each time the innermost cudump frame changes file, on
a call or a return), the returns (steps into a file the route had already left) and the
distinct steps (pairs of files one after the other: the route's shape, a loop over a
launch's buffers counted once), for the whole route and for its part up to the report's
line (the rest plans and takes the producer's snapshots). A catch-up of a ring on the way
counts as one step into it: what it takes inside is other launches' results, as many as
there happen to be, which would make runs differ.

    python bench/nan_route.py [--runs 3] [--json] [--keep]

Each run is traced separately (the watcher's timing decides which door a report takes); the
smallest route is printed with the door it took, and with --json every run's counts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = str(ROOT / "cudump") + os.sep
# Where a handled message, or a drained ring, begins: (file under cudump/, function).
ROOTS = {("controller/connection.py", "on_repeat"), ("controller/connection.py", "on_end"),
         ("policy/snapshot/results.py", "_drain")}
# Taking a ring up to now on the way (other launches' results, as many as there are then):
# one step into it, what it does inside left out, so that runs compare.
CATCH_UPS = {("policy/snapshot/results.py", "catch_up"),
             ("policy/snapshot/hostwrites.py", "catch_up")}
REPORT = re.compile(r"cudump: NaN/Inf: launch (\d+) of ")


@dataclass
class Extent:
    """The files one handled message or ring drain went through, in order."""

    root: str
    tag: int | None
    files: list[str] = field(default_factory=list)     # the innermost cudump file, each step
    reports: list[int] = field(default_factory=list)   # launches whose report it said
    said_at: int | None = None      # len(files) when its first report was said


@dataclass
class Route:
    door: str
    files: int
    steps: int
    returns: int
    edges: int          # distinct (file, next file) steps: the route's shape, loops counted once
    extents: int
    to_report: tuple[int, int, int, int]    # the same four, up to the report's line


def _short(filename: str) -> str:
    return filename[len(PACKAGE):]


class Tracer:
    """Records, per thread, the extents of ROOTS calls."""

    def __init__(self) -> None:
        self.done: list[Extent] = []
        self._local = threading.local()
        self._lock = threading.Lock()

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(PACKAGE):
            return
        short = _short(filename)
        extent: Extent | None = getattr(self._local, "extent", None)
        if extent is None:
            if event == "call" and (short, frame.f_code.co_name) in ROOTS:
                msg = frame.f_locals.get("msg")
                extent = Extent(f"{short}:{frame.f_code.co_name}",
                                getattr(msg, "tag", None), [short])
                self._local.extent, self._local.root = extent, frame
            return
        muted = getattr(self._local, "muted", None)
        if event == "call":
            if short == "console.py" and frame.f_code.co_name == "say":
                found = REPORT.match(str(frame.f_locals.get("line", "")))
                if found:
                    extent.reports.append(int(found.group(1)))
                    if extent.said_at is None and muted is None:
                        extent.said_at = len(extent.files)
            if muted is None:
                self._step(extent, short)
                if (short, frame.f_code.co_name) in CATCH_UPS:
                    self._local.muted = frame
            return
        if muted is not None:
            if frame is muted:
                self._local.muted = None
            else:
                return
        if frame is self._local.root:
            self._local.extent = self._local.root = None
            with self._lock:
                self.done.append(extent)
            return
        back = frame.f_back
        while back is not None and not back.f_code.co_filename.startswith(PACKAGE):
            back = back.f_back
        if back is not None:
            self._step(extent, _short(back.f_code.co_filename))

    @staticmethod
    def _step(extent: Extent, short: str) -> None:
        if extent.files[-1] != short:
            extent.files.append(short)


def route_of(extents: list[Extent]) -> Route | None:
    """The producer's route: the first reported launch's messages and the drain that said
    its report, counted over their files one after the other."""
    said = [e for e in extents if e.reports]
    if not said:
        return None
    launch = said[0].reports[0]
    mine = [e for e in extents if e.tag == launch or launch in e.reports]
    door = ("result ring" if any(e.root.endswith("_drain") and launch in e.reports
                                 for e in mine) else "watcher (MSG_REPEAT)")
    files: list[str] = []
    to_report: list[str] = []
    for e in mine:
        if not to_report and e.said_at is not None:
            to_report = files + e.files[:e.said_at]
        files += e.files
    return Route(door, *_count(files), len(mine), _count(to_report))


def _count(files: list[str]) -> tuple[int, int, int, int]:
    """Distinct files, steps, returns to a file already left, distinct steps."""
    steps = returns = 0
    left: set[str] = set()
    edges: set[tuple[str, str]] = set()
    for before, after in zip(files, files[1:], strict=False):
        if before == after:
            continue
        steps += 1
        edges.add((before, after))
        left.add(before)
        if after in left:
            returns += 1
    return len(set(files)), steps, returns, len(edges)


def child(argv: list[str], out: Path) -> int:
    sys.path.insert(0, str(ROOT))
    tracer = Tracer()
    threading.setprofile(tracer.profile)
    sys.setprofile(tracer.profile)
    from cudump.cli import main
    try:
        rc = main(argv)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)   # type: ignore[arg-type]
        out.write_text(json.dumps([asdict(e) for e in tracer.done]))
    return rc


def _build() -> tuple[Path, dict[str, str], Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    from fakecuda_build import build_fakecuda
    spec = importlib.util.spec_from_file_location("shim_build", ROOT / "shim" / "build.py")
    assert spec is not None and spec.loader is not None
    shim_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim_build)
    work = Path(tempfile.mkdtemp(prefix="nan-route-"))
    lib = shim_build.build_shim(work / "shim")
    fake = build_fakecuda()
    env = fake.env() | {"CUDUMP_SHIM": str(lib),
                        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return fake.programs["nans"], env, work


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[3:], Path(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true",
                        help="keep the runs and their traces (the folder is printed)")
    args = parser.parse_args()
    program, env, work = _build()
    try:
        return _measure(args.runs, args.json, program, env, work)
    finally:
        if args.keep:
            print(f"runs and traces in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _measure(runs: int, as_json: bool, program: Path, env: dict[str, str], work: Path) -> int:
    routes = []
    for i in range(runs):
        out = work / f"extents{i}.json"
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(out), "--check-nan", "--out",
             str(work / f"run{i}"), "--", str(program), "40", "37", "23"],
            env=env, capture_output=True, text=True, timeout=300, cwd=work)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        extents = [Extent(**e) for e in json.loads(out.read_text())]
        route = route_of(extents)
        if route is None:
            print("no NaN/Inf report in the run", file=sys.stderr)
            return 1
        routes.append(route)
    if as_json:
        print(json.dumps([asdict(r) for r in routes]))
    best = min(routes, key=lambda r: r.steps)
    print(f"one NaN/Inf result ({best.door}): {best.files} files, {best.steps} steps, "
          f"{best.returns} returns to a file already left, {best.edges} distinct steps "
          f"({best.extents} handled messages or ring drains); up to its report's line: "
          "{}/{}/{}/{}".format(*best.to_report))
    print("runs (files/steps/returns/distinct): " + ", ".join(
        f"{r.files}/{r.steps}/{r.returns}/{r.edges}" for r in routes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
