"""Benchmark: `cudump diff` of two runs against the time to just load both sides' arrays.

The goal (the performance issue): diffing 1,000 pairs of 1920x1080 RGBA uint8 snapshots takes
at most 2x the time of loading both sides' arrays, whether the pairs are equal, differ in a
small region, or differ in every element.

- load: every pair's two arrays loaded as the diff loads them (`load_array`: np.load
  memory-mapped) and every byte touched by a cheap reduction (a sum of 8-byte words), --jobs
  at a time and spread the way the diff spreads its pairs (worker processes for runs this
  large, see cudump.analysis.diff.parallel.parallel_kind). This is the floor: the diff
  cannot compare bytes it has not read.
- diff: `cudump diff A B -j JOBS` on the two run directories, run in-process
  (`cudump.cli.main`, its output thrown away).

Cases, B against A: equal (identical bytes), region (a 64x64 patch of 3 channels changed),
all (every element changed by 1 to 3). `--cases random` adds B independent of A (about 99.6%
of the elements differ, by up to 255), the costliest data for the diff; it is not part of
the goal and not run by default.

Writing 1,000 distinct 8 MB files per side would take 33 GB of disk for the four sides, so
each side holds --distinct files and its manifest's 1,000 records point at them in turn. The
files are read from the page cache (both measurements): the numbers are about memory and
CPU, not the disk. Each measurement is repeated --repeat times, load and diff interleaved;
the median is shown. The data are written once, to a temporary directory (or under --dir).

    python bench/bench_diff.py [--pairs 1000] [--distinct 50] [--jobs N] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cudump import native  # noqa: E402
from cudump.analysis.diff.align import align
from cudump.analysis.diff.parallel import parallel_kind
from cudump.cli import main as cudump_main  # noqa: E402
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord  # noqa: E402
from cudump.rundir.runs import Run, load_array  # noqa: E402

SHAPE = (1080, 1920, 4)
CASES = ("equal", "region", "all")
EXTRA_CASES = ("random",)
GOAL = 2.0
KERNEL = "cam::paint<(sl::YUV_CONVENTION)2>(uchar4*, int)"


# ---------------------------------------------------------------------------------------
# Data


def variant(img: np.ndarray, case: str, rng: np.random.Generator) -> np.ndarray:
    """B's snapshot for A's `img`."""
    b = img.copy()
    if case == "region":        # a 64x64 patch changed: the usual "one region differs"
        b[500:564, 900:964, :3] ^= 0x10
    elif case == "all":         # every element changes
        b ^= rng.integers(1, 4, img.shape, dtype=np.uint8)
    elif case == "random":      # nothing in common: large differences, a few equal by chance
        b = rng.integers(0, 256, img.shape, dtype=np.uint8)
    return b


def write_side(root: Path, files: list[np.ndarray], pairs: int) -> None:
    root.mkdir(parents=True)
    for i, img in enumerate(files):
        np.save(root / f"f{i:03d}.npy", img)
    writer = ManifestWriter(root)
    for n in range(pairs):
        writer.append(SnapshotRecord(
            kernel=KERNEL, mangled="_Z5paint", launch=n + 1, occurrence=n + 1, pid=1,
            grid=[60, 34, 1], block=[32, 32, 1], stream="0x0", arg=0, type="uchar4*",
            phase="after", address="0x7f0000000000", dtype="uint8", shape=list(SHAPE),
            file=f"f{n % len(files):03d}.npy"))
    writer.close()


def generate(scratch: Path, pairs: int, distinct: int,
             cases: tuple[str, ...] = CASES) -> dict[str, Path]:
    """Run directories: "a", and B's side for each case."""
    rng = np.random.default_rng(0)
    base = [rng.integers(0, 256, SHAPE, dtype=np.uint8) for _ in range(distinct)]
    sides = {"a": scratch / "a"} | {case: scratch / f"b-{case}" for case in cases}
    write_side(sides["a"], base, pairs)
    for case in cases:
        write_side(sides[case], [variant(img, case, rng) for img in base], pairs)
    return sides


# ---------------------------------------------------------------------------------------
# Measurements


def touch(arr: np.ndarray) -> int:
    """Read every byte of an array, as cheaply as numpy can: a sum of 8-byte words."""
    flat = arr.reshape(-1).view(np.uint8)
    words = flat.view(np.uint64) if flat.size % 8 == 0 else flat
    return int(np.add.reduce(words))


def load_pair(paths: tuple[Path, Path]) -> int:
    return touch(load_array(paths[0])) ^ touch(load_array(paths[1]))


def time_load(a: Path, b: Path, jobs: int) -> float:
    """Seconds to load both sides' arrays of every pair, `jobs` at a time, spread the way
    `cudump diff` spreads its comparisons (threads, or worker processes for large runs)."""
    t0 = time.perf_counter()
    pairs = align(Run.open(a), Run.open(b))
    paths = [(p.a.path, p.b.path) for p in pairs if p.a is not None and p.b is not None]
    kind = parallel_kind(pairs, jobs)
    if kind == "serial":
        for pair in paths:
            load_pair(pair)
    else:
        pool: Executor
        if kind == "processes":
            pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork"))
            batch = max(1, min(8, len(paths) // (8 * jobs)))
        else:
            pool = ThreadPoolExecutor(max_workers=jobs)
            batch = 1
        with pool:
            for _ in pool.map(load_pair, paths, chunksize=batch):
                pass
    return time.perf_counter() - t0


def time_diff(a: Path, b: Path, jobs: int, expect: int) -> float:
    """Seconds `cudump diff A B -j JOBS` takes, run in-process."""
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = cudump_main(["diff", str(a), str(b), "-j", str(jobs)])
    dt = time.perf_counter() - t0
    if code != expect:
        raise SystemExit(f"cudump diff {a} {b} exited {code}, not {expect}:\n"
                         + "\n".join(out.getvalue().splitlines()[-5:]))
    return dt


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--distinct", type=int, default=50,
                        help="distinct files per side (records cycle through them)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="pairs at a time, for the load and cudump diff -j "
                             "(default: the CPU count, as cudump diff)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=CASES + EXTRA_CASES,
                        default=list(CASES))
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args()
    distinct = max(1, min(args.distinct, args.pairs))

    size_mb = np.prod(SHAPE) / 1e6
    print(f"{args.pairs} pairs of {SHAPE} uint8 ({size_mb:.1f} MB per array), {distinct} "
          f"distinct files per side, -j {args.jobs}, median of {args.repeat}")
    print(f"machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), "
          f"{cpu_model()}; Python {platform.python_version()}, numpy {np.__version__}")
    print(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}; "
          f"load average {os.getloadavg()[0]:.2f} (other work on the machine skews the numbers)")
    print("8-bit comparisons: " + ("the native loop (libcudumpdiff.so)" if native.available()
                                     else "numpy only (libcudumpdiff.so not built: "
                                          "python3 shim/build.py)"))
    scratch = Path(tempfile.mkdtemp(prefix="cudump-bench-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        sides = generate(scratch, args.pairs, distinct, tuple(args.cases))
        kind = parallel_kind(align(Run.open(sides["a"]), Run.open(sides[args.cases[0]])),
                             args.jobs)
        print(f"data written in {time.perf_counter() - t0:.1f} s to {scratch}; "
              f"pairs spread: {kind}")
        print()
        goal = f"goal (<= {GOAL:g}x)"
        print(f"{'case':<8} {'load s':>8} {'diff s':>8} {'ratio':>7}  {goal:<13} "
              f"spread (min-max)")
        for case in args.cases:
            a, b = sides["a"], sides[case]
            expect = 0 if case == "equal" else 1
            time_load(a, b, args.jobs)                   # warm: the page cache, the imports
            time_diff(a, b, args.jobs, expect)
            loads, diffs = [], []
            for _ in range(args.repeat):
                loads.append(time_load(a, b, args.jobs))
                diffs.append(time_diff(a, b, args.jobs, expect))
            load, diff = statistics.median(loads), statistics.median(diffs)
            ratio = diff / load
            verdict = "met" if ratio <= GOAL else "not met"
            print(f"{case:<8} {load:8.2f} {diff:8.2f} {ratio:6.2f}x  {verdict:<13} "
                  f"load {min(loads):.2f}-{max(loads):.2f}, diff {min(diffs):.2f}-{max(diffs):.2f}",
                  flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
