"""PyTorch CUDA graphs for digests and NaN/Inf scans inside graph replays, step after step
with a new input each step:

  compiled  torch.compile(mode="reduce-overhead"): Inductor's Triton kernels around a custom
            op whose own PyTorch kernel (x * 2) Inductor calls as it is, all replayed through
            CUDA graph trees from the third step on;
  graph     y = x * 2 + 1 captured once with torch.cuda.graph and replayed, x copied in first.

usage: python3 torch_graph_scans.py compiled|graph [--steps N] [--nan STEP]
--nan STEP puts a NaN into element 5 of that step's input (replayed inside a graph from the
third step on), which the kernels inside the graph carry into their outputs.
Prints one line per step: a hash of y's bytes and how many of its elements are NaN.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import torch

N = 4096
NAN_AT = 5


@torch.library.custom_op("cudump_sample::double", mutates_args=())
def double(x: torch.Tensor) -> torch.Tensor:
    """x * 2 by PyTorch's own elementwise kernel (Inductor leaves a custom op alone)."""
    return x * 2


@double.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def model(x: torch.Tensor) -> torch.Tensor:
    h = torch.sin(x) * 0.5 + x
    return double(h) + 1.0


def step_input(step: int, nan_step: int | None) -> torch.Tensor:
    x = torch.arange(N, device="cuda", dtype=torch.float32) / 100 + step
    if step == nan_step:
        x[NAN_AT] = float("nan")
    return x


def report(step: int, y: torch.Tensor) -> None:
    host = y.cpu().numpy()
    nans = int(torch.isnan(y).sum())
    print(f"step {step} y {hashlib.sha256(host.tobytes()).hexdigest()[:16]} nan {nans}")


def run_compiled(steps: int, nan_step: int | None) -> None:
    compiled = torch.compile(model, mode="reduce-overhead")
    for step in range(steps):
        torch.compiler.cudagraph_mark_step_begin()
        y = compiled(step_input(step, nan_step)).clone()
        torch.cuda.synchronize()
        report(step, y)


def run_graph(steps: int, nan_step: int | None) -> None:
    x = torch.zeros(N, device="cuda")
    y = torch.zeros(N, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as PyTorch asks
        torch.add(x * 2, 1.0, out=y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.add(x * 2, 1.0, out=y)
    for step in range(steps):
        x.copy_(step_input(step, nan_step))
        graph.replay()
        torch.cuda.synchronize()
        report(step, y)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["compiled", "graph"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--nan", type=int, default=None, metavar="STEP")
    args = parser.parse_args()
    with torch.no_grad():
        (run_compiled if args.mode == "compiled" else run_graph)(args.steps, args.nan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
