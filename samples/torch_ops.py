"""PyTorch sample: elementwise ops, a cuBLAS matmul, and a CUDA graph that is
captured once and replayed ten times, each replay checked.

It prints the launch counts a debugger should report, taken from an
independent source, torch.profiler with CUDA activities (CUPTI), which
records every kernel the GPU executes:

* Session A covers everything from the first CUDA op through the end of the
  capture. Every kernel executed there was launched directly (cuLaunchKernel*):
  kernels launched during capture are recorded into the graph, not executed,
  so CUPTI does not see them.
* Session B covers the ten replays only. The kernels it sees were executed by
  cuGraphLaunch, which a debugger sees as ten graph launches and no kernel
  launches; their number over ten is the number of kernel launches recorded
  during capture (the graph body has only kernel nodes: elementwise + gemm).
* Nothing outside the two sessions launches a kernel: inputs are uploaded and
  results read back with copies (memcpy, not kernels), and checks run on CPU.

What is exactly checkable, then: direct launches (total and per kernel name),
captured launches (total and per name), and graph launches (10). The names
are CUPTI's demangled names; a debugger that demangles with the C++ ABI
demangler should print the same strings.

usage: python3 torch_ops.py [--dump DIR]
  --dump DIR   write DIR/add_out.npy: the result of the first add (a + b)
Prints one line `expected {json}` and last `launches direct=N captured=K graph_launches=10`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

GRAPH_REPLAYS = 10
ADD_N = 1 << 16
MAT = 128
GRAPH_DIM = 64


def kernels_seen(prof: profile) -> Counter[str]:
    """Kernels the GPU executed during a profiler session, by name."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    return Counter(e["name"] for e in events if e.get("cat") == "kernel" and e.get("ph") == "X")


def small_ints(shape: tuple[int, ...], low: int, high: int, seed: int) -> torch.Tensor:
    """CPU float32 tensor of small integers: sums and products of them are exact."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=gen).to(torch.float32)


def require(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"torch_ops: {what}")


def graph_body(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2.0) @ w


def eager_phase(dump: Path | None) -> None:
    a_cpu, b_cpu = small_ints((ADD_N,), -50, 50, 1), small_ints((ADD_N,), -50, 50, 2)
    a, b = a_cpu.cuda(), b_cpu.cuda()
    c = a + b                      # the first add of the run (see rules for it in tests)
    d = torch.relu(c * 3.0)
    c_host, d_host = c.cpu(), d.cpu()
    require(torch.equal(c_host, a_cpu + b_cpu), "a + b is wrong")
    require(torch.equal(d_host, torch.relu((a_cpu + b_cpu) * 3.0)), "relu(c * 3) is wrong")
    if dump is not None:
        np.save(dump / "add_out.npy", c_host.numpy())

    ma, mb = small_ints((MAT, MAT), -3, 4, 3), small_ints((MAT, MAT), -3, 4, 4)
    m = (ma.cuda() @ mb.cuda()).cpu()
    require(torch.equal(m, ma @ mb), "matmul is wrong")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dump", type=Path)
    args = parser.parse_args()
    require(torch.cuda.is_available(), "no CUDA device")
    torch.set_float32_matmul_precision("highest")   # no TF32: exact float32 products

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=activities) as session_a:
        eager_phase(args.dump)
        w_cpu = small_ints((GRAPH_DIM, GRAPH_DIM), -3, 4, 5)
        static_x = small_ints((GRAPH_DIM, GRAPH_DIM), -4, 5, 6).cuda()
        static_w = w_cpu.cuda()
        # Warm up on a side stream before capture, as PyTorch asks.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                graph_body(static_x, static_w)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):   # raises if the capture was invalidated
            static_out = graph_body(static_x, static_w)
        torch.cuda.synchronize()

    with profile(activities=activities) as session_b:
        for i in range(GRAPH_REPLAYS):
            x_cpu = small_ints((GRAPH_DIM, GRAPH_DIM), -4, 5, 100 + i)
            static_x.copy_(x_cpu)
            graph.replay()
            got = static_out.cpu()
            require(torch.equal(got, graph_body(x_cpu, w_cpu)), f"graph replay {i} is wrong")
        torch.cuda.synchronize()

    direct = kernels_seen(session_a)
    replayed = kernels_seen(session_b)
    captured: dict[str, int] = {}
    for name, count in replayed.items():
        require(count % GRAPH_REPLAYS == 0, f"{name} ran {count} times in {GRAPH_REPLAYS} replays")
        captured[name] = count // GRAPH_REPLAYS
    require(sum(direct.values()) > 0 and captured, "the profiler saw no kernels")
    expected = {
        "launches": sum(direct.values()),
        "captured_launches": sum(captured.values()),
        "graph_launches": GRAPH_REPLAYS,
        "kernels": dict(sorted(direct.items())),
        "captured_kernels": dict(sorted(captured.items())),
    }
    print("expected " + json.dumps(expected, sort_keys=True))
    print(f"launches direct={expected['launches']} captured={expected['captured_launches']} "
          f"graph_launches={GRAPH_REPLAYS}")


if __name__ == "__main__":
    main()
    sys.exit(0)
