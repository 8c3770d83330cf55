"""torch.compile(mode="reduce-overhead"): Inductor fuses y = sin(x) * 2 + x into one Triton
kernel, and from the third call on PyTorch replays it through a CUDA graph (cudagraph trees),
with each step's input copied into the graph's static buffer. A debugger's snapshots of the
Triton kernel inside those replays can be checked against each step's y, and y must not change
under the debugger.

usage: python3 torch_compiled.py DIR [STEPS]   (default 6)
Writes DIR/y-S.npy for step S (0..STEPS-1) and prints each step's y as a hash of its bytes.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import torch


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2 + x


def main() -> int:
    out = Path(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    compiled = torch.compile(f, mode="reduce-overhead")
    for step in range(steps):
        x = torch.arange(4096, device="cuda", dtype=torch.float32) / 100 + step
        torch.compiler.cudagraph_mark_step_begin()
        y = compiled(x).clone()
        torch.cuda.synchronize()
        host = y.cpu().numpy()
        if not np.allclose(host, np.sin(x.cpu().numpy()) * 2 + x.cpu().numpy(), atol=1e-5):
            print(f"step {step}: wrong result", file=sys.stderr)
            return 1
        np.save(out / f"y-{step}.npy", host)
        print(f"step {step} y {hashlib.sha256(host.tobytes()).hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
