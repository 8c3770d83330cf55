"""A simulated job of many ranks, and how the columnar index answers on it.

Each rank is a run directory shaped like a real one (the records a run with --trace and
--check-nan writes, field for field: a data-parallel step of LAYERS layers, each a vecAdd in
its module scope followed by NCCL's all-reduce kernel), eight ranks a node, under one job
directory. One rank leaves NaN at one layer of one step; optionally one rank stops launching
collectives. For 8, 64, 256 and 1,024 ranks it prints:

- the time to write the index (every node's partitions, as each node does at its run's end);
- the time `cudump query JOB "first non-finite rank"` takes, end to end (a new process:
  Python's start, the index's freshness checked, DuckDB's views, the query);
- the disk the index takes per rank, beside the JSONL it comes from.

Usage: python3 bench/job_index.py [--ranks 8,64,256,1024] [--steps 10] [--layers 16]
                                  [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ADD = "vecAdd(float const*, float const*, float*, int)"
ADD_MANGLED = "_Z6vecAddPKfS0_Pfi"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE_MANGLED = "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"
RANKS_PER_NODE = 8
QUERY_RUNS = 3
FIRST_NONFINITE = ("SELECT rank, node, step, collective, collective_op, layer, kernel, launch "
                   "FROM reports ORDER BY step, collective, within, rank LIMIT 1")


@dataclass(frozen=True)
class Plant:
    rank: int
    step: int
    layer: int


def _launch(seq: int, pid: int, rank: int, step: int, layer: int | None,
            collectives: int) -> dict[str, object]:
    kernel, mangled = (ADD, ADD_MANGLED) if layer is not None else (ALLREDUCE,
                                                                     ALLREDUCE_MANGLED)
    record: dict[str, object] = {
        "event": "launch", "launch": seq, "pid": pid, "rank": rank, "device": 0,
        "kernel": kernel, "mangled": mangled,
        "grid": [4, 1, 1] if layer is not None else [1, 1, 1],
        "block": [256, 1, 1] if layer is not None else [64, 1, 1], "smem": 0,
        "stream": "0x0", "api": "cuLaunchKernel", "captured": False}
    if layer is not None:
        record.update(scope=[f"layers.{layer}"], layer=f"layers.{layer}", **{"pass": "forward"})
    record["step"] = step
    if collectives:
        record.update(collective=collectives, collective_op="all-reduce")
    return record


def _report(seq: int, pid: int, rank: int, step: int, layer: int, collectives: int,
            arg: int) -> dict[str, object]:
    """The manifest record --check-nan writes for a launch that produced NaN/Inf."""
    record: dict[str, object] = {
        "kernel": ADD, "mangled": ADD_MANGLED, "launch": seq, "occurrence": seq // 2 + 1,
        "pid": pid, "grid": [4, 1, 1], "block": [256, 1, 1], "stream": "0x0", "arg": arg,
        "type": "float*", "phase": "after", "address": f"0x{0x7f0000000000 + arg * 4096:x}",
        "dtype": "float32", "shape": [1024], "file": None, "png": None, "status": "ok",
        "reason": None, "range": None, "device": 0, "rank": rank,
        "scope": [f"layers.{layer}"], "layer": f"layers.{layer}", "pass": "forward",
        "step": step, "nonfinite": 1, "first_nonfinite": 5, "nonfinite_before": 0,
        "elements": 1024, "nan_producer": True, "origin": "produced"}
    if collectives:
        record.update(collective=collectives, collective_op="all-reduce")
    return record


def write_rank(run: Path, rank: int, steps: int, layers: int, plant: Plant | None,
               hang_after: int | None) -> None:
    """One rank's trace.jsonl (and manifest.jsonl where it left NaN) in `run`, appended."""
    pid = 100000 + rank
    trace, manifest = [], []
    seq, collectives = 0, 0
    for step in range(steps):
        for layer in range(layers):
            seq += 1
            trace.append(_launch(seq, pid, rank, step, layer, collectives))
            if plant is not None and (plant.rank, plant.step, plant.layer) == (rank, step, layer):
                manifest.append(_report(seq, pid, rank, step, layer, collectives, 2))
            if hang_after is None or collectives < hang_after:
                seq += 1
                trace.append(_launch(seq, pid, rank, step, None, collectives))
                collectives += 1
    with (run / "trace.jsonl").open("a") as out:
        out.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in trace)
    if manifest:
        with (run / "manifest.jsonl").open("a") as out:
            out.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in manifest)


def make_job(job: Path, ranks: int, steps: int = 10, layers: int = 16,
             plant: Plant | None = None, hang: tuple[int, int] | None = None) -> Path:
    """A job directory of `ranks` ranks, RANKS_PER_NODE a node (nodes/node0, node1, ...).
    `hang`: (rank, collectives after which it launches no more)."""
    (job / "nodes").mkdir(parents=True)
    (job / "cudump-job.json").write_text(json.dumps({"job": job.name, "format": 1}) + "\n")
    for rank in range(ranks):
        run = job / "nodes" / f"node{rank // RANKS_PER_NODE}"
        run.mkdir(exist_ok=True)
        write_rank(run, rank, steps, layers, plant,
                   hang[1] if hang is not None and hang[0] == rank else None)
    return job


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass
class Measured:
    ranks: int
    build_s: float
    query_s: float          # `cudump query` end to end, a new process (median of 3)
    answer: str
    index_per_rank: float   # bytes
    jsonl_per_rank: float


def measure(base: Path, ranks: int, steps: int, layers: int) -> Measured:
    from cudump.rundir.index import build, duckdb_module, indexed

    job = make_job(base / f"job{ranks}", ranks, steps, layers,
                   Plant(rank=ranks * 2 // 3, step=steps // 2, layer=layers // 2))
    con = duckdb_module().connect(":memory:")
    start = time.perf_counter()
    build(con, indexed(job))
    build_s = time.perf_counter() - start
    con.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    times = []
    for _ in range(QUERY_RUNS):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "cudump", "query", str(job),
                               FIRST_NONFINITE], capture_output=True, text=True, env=env,
                              check=True)
        times.append(time.perf_counter() - start)
    query_s = statistics.median(times)
    answer = done.stdout.splitlines()[1].split()[0] if len(done.stdout.splitlines()) > 1 else "?"
    jsonl = sum(disk_bytes(n) for n in (job / "nodes").iterdir())
    index = disk_bytes(job / "index")
    return Measured(ranks, build_s, query_s, answer, index / ranks, jsonl / ranks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="8,64,256,1024")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--dir", type=Path, help="where the jobs are made (kept)")
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="cudump-job-bench-"))
    print(f"{args.steps} steps of {args.layers} layers a rank: "
          f"{args.steps * args.layers * 2} launches a rank, {RANKS_PER_NODE} ranks a node")
    print(f"{'ranks':>6} {'index write s':>14} {'query s':>8} {'first rank':>10} "
          f"{'index KiB/rank':>15} {'JSONL KiB/rank':>15}")
    try:
        for ranks in (int(r) for r in args.ranks.split(",")):
            m = measure(base, ranks, args.steps, args.layers)
            print(f"{m.ranks:>6} {m.build_s:>14.2f} {m.query_s:>8.2f} {m.answer:>10} "
                  f"{m.index_per_rank / 1024:>15.1f} {m.jsonl_per_rank / 1024:>15.1f}",
                  flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
