"""A value that overflows at one step: y = x * s with x = 1e38, s = 0.5 except at step BAD
where s = 10, so that launch of PyTorch's multiply kernel leaves Inf in y.

usage: torch_nan.py STEPS BAD [--dump DIR]
Prints `inf at step K: N` for every step with Inf in y, then `launches mul=STEPS`.
--dump DIR writes DIR/x.npy (the filled tensor).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

N = 3000


def main() -> int:
    steps, bad = int(sys.argv[1]), int(sys.argv[2])
    x = torch.full((N,), 1e38, device="cuda")
    if len(sys.argv) > 4 and sys.argv[3] == "--dump":
        np.save(Path(sys.argv[4]) / "x.npy", x.cpu().numpy())
    for k in range(1, steps + 1):
        y = x * (10.0 if k == bad else 0.5)
        found = int(torch.isinf(y).sum())
        if found:
            print(f"inf at step {k}: {found}")
    print(f"launches mul={steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
