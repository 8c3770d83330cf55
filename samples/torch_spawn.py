"""PyTorch with multiprocessing (spawn): two worker processes each add two tensors on the
GPU and save the result, so that a debugger's snapshots of each process can be checked
against that process's own tensor.

usage: python3 torch_spawn.py DIR
Writes DIR/add-<pid>.npy per worker; prints `workers 2`.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
import torch.multiprocessing as mp


def work(rank: int, out: str) -> None:
    a = torch.full((4096,), float(rank + 1), device="cuda")
    b = torch.arange(4096, dtype=torch.float32, device="cuda")
    c = a + b
    torch.cuda.synchronize()
    np.save(os.path.join(out, f"add-{os.getpid()}.npy"), c.cpu().numpy())


if __name__ == "__main__":
    mp.spawn(work, args=(sys.argv[1],), nprocs=2, join=True)
    print("workers 2")
