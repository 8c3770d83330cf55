"""PyTorch CUDA graph: y = x * 2 + 1 captured once with torch.cuda.graph and replayed five
times with new x values, so that a debugger's snapshots of the kernels inside the graph can be
checked against the tensors of each replay, and the graph's results must not change under it.

usage: python3 torch_graph.py DIR
Writes DIR/y-R.npy after replay R (1..5); prints each replay's y as hex of its bytes' hash.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import torch


def main() -> int:
    out = Path(sys.argv[1])
    x = torch.zeros(4096, device="cuda")
    y = torch.zeros(4096, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside the capture, as PyTorch asks
        torch.add(x * 2, 1.0, out=y)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.add(x * 2, 1.0, out=y)
    for r in range(1, 6):
        x.copy_(torch.arange(4096, device="cuda", dtype=torch.float32) * 0.25 + r)
        graph.replay()
        torch.cuda.synchronize()
        values = y.cpu().numpy()
        np.save(out / f"y-{r}.npy", values)
        print(f"replay {r} y {hashlib.sha256(values.tobytes()).hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
