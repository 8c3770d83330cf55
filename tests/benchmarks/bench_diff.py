"""Benchmark: diff two runs of 1,000 pairs of 1920x1080 RGBA uint8 snapshots.

Writing 1,000 distinct 8 MB files per side would take 16 GB of disk, so each side holds
--distinct files and its 1,000 manifest records point at them in turn. The files are
therefore read from the page cache after their first use: the numbers measure the
comparison (memory bandwidth and numpy), not the disk. Prints numbers, asserts nothing.

    PYTHONPATH=. python tests/benchmarks/bench_diff.py [--pairs 1000] [--distinct 50] [--jobs 2]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from cudump.diff import Tolerance, diff_runs
from cudump.manifest import ManifestWriter, SnapshotRecord
from cudump.runs import Run

SHAPE = (1080, 1920, 4)


def write_side(root: Path, images: list[np.ndarray], pairs: int) -> None:
    root.mkdir(parents=True)
    for i, img in enumerate(images):
        np.save(root / f"f{i:03d}.npy", img)
    writer = ManifestWriter(root)
    for n in range(pairs):
        writer.append(SnapshotRecord(
            kernel="cam::paint<(sl::YUV_CONVENTION)2>(uchar4*, int)", mangled="_Z5paint",
            launch=n + 1, occurrence=n + 1, pid=1, grid=[60, 34, 1], block=[32, 32, 1],
            stream="0x0", arg=0, type="uchar4*", phase="after", address="0x7f0000000000",
            dtype="uint8", shape=list(SHAPE), file=f"f{n % len(images):03d}.npy"))
    writer.close()


def variant(base: list[np.ndarray], how: str, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for img in base:
        b = img.copy()
        if how == "block":        # a 64x64 patch changed: the usual "one region differs"
            b[500:564, 900:964, :3] ^= 0x10
        elif how == "everywhere":  # every element changes: the worst case
            b ^= rng.integers(1, 4, SHAPE, dtype=np.uint8)
        out.append(b)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--distinct", type=int, default=50)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    scratch = Path(tempfile.mkdtemp(prefix="cudump-bench-", dir=args.dir))
    try:
        base = [rng.integers(0, 256, SHAPE, dtype=np.uint8) for _ in range(args.distinct)]
        write_side(scratch / "a", base, args.pairs)
        size_mb = np.prod(SHAPE) / 1e6
        print(f"{args.pairs} pairs of {SHAPE} uint8 ({size_mb:.1f} MB each), "
              f"{args.distinct} distinct files per side, page cache warm after first use")
        for how in ("identical", "block", "everywhere"):
            side = scratch / f"b-{how}"
            write_side(side, variant(base, how, rng), args.pairs)
            run_a, run_b = Run.open(scratch / "a"), Run.open(side)
            diff_runs(run_a, run_b, Tolerance(), jobs=max(args.jobs))      # warm the cache
            for jobs in args.jobs:
                t0 = time.perf_counter()
                result = diff_runs(run_a, run_b, Tolerance(), jobs=jobs)
                dt = time.perf_counter() - t0
                differ = sum(p.status == "differ" for p in result.pairs)
                read_mb = 2 * size_mb * args.pairs
                print(f"  B {how:<10}  jobs {jobs}:  {dt:6.2f} s  {args.pairs / dt:7.1f} pairs/s  "
                      f"{read_mb / dt:8.0f} MB/s compared  ({differ} pairs differ)")
            shutil.rmtree(side)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
