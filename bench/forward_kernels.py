"""Where a model's forward spends its GPU time, cudump's kernel apart from the model's.

Run inside the program (bare, or under cudump): times N forwards for N in 10, 30, 100 and
300 in turn (the first includes start-up; the rest show whether the figure has settled),
then how long the CPU takes to queue two forwards against how long they take (fifty times,
averaged: whether the forward waits for the CPU or for the GPU), then profiles 20 forwards
with torch.profiler and prints, per forward, the kernels' GPU time and count: cudump's own
kernel (`cudump_tools`) apart from the model's, and the GPU's idle time between kernels, split
into the gaps where the next kernel's launch call had already returned (the GPU's own latency
from one kernel to the next) and those where it had not (the GPU waited for a CPU).

usage: python3 bench/forward_kernels.py resnet18|bert
       cudump --check-nan python3 bench/forward_kernels.py resnet18
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))
from torch_forward import build, timed  # noqa: E402

PROFILED = 20


def queued(forward: Callable[[], object], rounds: int = 50, per_round: int = 2
           ) -> tuple[float, float, float]:
    """Milliseconds per forward to queue `per_round` forwards from an idle GPU, the CPU time
    this thread spent doing so, and the time to have them done, averaged over `rounds`: few
    enough forwards that the launch queue never fills (a full queue would make the CPU wait
    for the GPU inside the launch call)."""
    queue = cpu = total = 0.0
    for _ in range(rounds):
        torch.cuda.synchronize()
        start, start_cpu = time.perf_counter(), time.thread_time()
        for _ in range(per_round):
            forward()
        queue += time.perf_counter() - start
        cpu += time.thread_time() - start_cpu
        torch.cuda.synchronize()
        total += time.perf_counter() - start
    n = rounds * per_round
    return queue / n * 1e3, cpu / n * 1e3, total / n * 1e3


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in ("resnet18", "bert"):
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    _, forward = build(sys.argv[1])
    with torch.no_grad():
        for n in (10, 30, 100, 300):
            print(f"{n} forwards: {timed(forward, n):.3f} ms/forward", flush=True)
        queue_ms, cpu_ms, total_ms = queued(forward)
        print(f"queued in {queue_ms:.3f} ms/forward ({cpu_ms:.3f} ms of the thread's CPU), "
              f"done in {total_ms:.3f} ms/forward (two forwards from an idle GPU)", flush=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            ms = timed(forward, PROFILED)
    time_us = {"cudump": 0.0, "model": 0.0}
    count = {"cudump": 0, "model": 0}
    for event in prof.events():
        if event.device_type.name != "CUDA":
            continue
        who = "cudump" if "cudump" in event.name else "model"
        time_us[who] += event.device_time
        count[who] += 1
    print(f"profiled {PROFILED} forwards: {ms:.3f} ms/forward; GPU per forward: cudump's "
          f"kernel {time_us['cudump'] / PROFILED / 1e3:.3f} ms ({count['cudump'] / PROFILED:.0f} "
          f"launches), the model's {time_us['model'] / PROFILED / 1e3:.3f} ms "
          f"({count['model'] / PROFILED:.0f} launches)")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        latency_us, waited_us, unmatched = idle_gaps(json.loads(trace.read_text()))
    print(f"GPU idle between kernels per forward: {latency_us / PROFILED / 1e3:.3f} ms with the "
          f"next launch already made, {waited_us / PROFILED / 1e3:.3f} ms waiting for its launch "
          f"({unmatched} kernels without a launch call seen)")
    return 0


def idle_gaps(trace: dict) -> tuple[float, float, int]:
    """Microseconds the GPU sat idle between consecutive kernels of one stream, summed: where
    the next kernel's launch call had returned before the previous kernel ended, and where it
    had not; and how many kernels had no launch call in the trace."""
    events = trace.get("traceEvents", [])
    launched = {e["args"]["correlation"]: e["ts"] + e.get("dur", 0) for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    latency = waited = 0.0
    unmatched = 0
    end: dict[object, float] = {}
    for k in kernels:
        stream = k.get("args", {}).get("stream")
        made = launched.get(k.get("args", {}).get("correlation"))
        if made is None:
            unmatched += 1
        if stream in end and k["ts"] > end[stream]:
            gap = k["ts"] - end[stream]
            if made is not None and made > end[stream]:
                waited += gap
            else:
                latency += gap
        end[stream] = max(end.get(stream, 0.0), k["ts"] + k.get("dur", 0))
    return latency, waited, unmatched


if __name__ == "__main__":
    sys.exit(main())
