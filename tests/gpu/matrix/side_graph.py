"""torch.cuda.graph capture of `z.add_(1)` (PyTorch's global capture mode, on its side
stream), replayed 5 times: any allocation, copy or synchronisation on the capturing
stream, or anywhere in the process while it captures, invalidates the capture.

usage: python3 side_graph.py
Prints z's sum after the replays.
"""

from __future__ import annotations

import sys

import torch


def main() -> int:
    z = torch.zeros(1 << 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        z.add_(1)  # warm up outside the capture, as PyTorch asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        z.add_(1)
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    print(f"z sum {float(z.sum()):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
