"""Two processes, one GPU each, a DistributedDataParallel training step over NCCL.

usage: python3 ddp.py
Started once; it spawns one process per GPU (two), each a child of this one. Rank 0 prints
the loss after each of 5 steps, rounded; both ranks must agree on the final weights' sum.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

WORLD = 2


def step(rank: int, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda(),
        device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1 + rank)
    x = torch.randn(64, 128, generator=gen).cuda()
    y = torch.randint(0, 10, (64,), generator=gen).cuda()
    for i in range(5):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {i + 1} mean loss {float(total) / WORLD:.4f}", flush=True)
    weights = sum(float(p.detach().double().sum()) for p in model.parameters())
    sums = [None] * WORLD
    dist.all_gather_object(sums, round(weights, 6))
    if rank == 0:
        print(f"ranks agree {sums[0] == sums[1]}", flush=True)
    dist.destroy_process_group()


def main() -> int:
    if torch.cuda.device_count() < WORLD:
        print(f"needs {WORLD} GPUs", file=sys.stderr)
        return 2
    port = str(29500 + os.getpid() % 1000)
    mp.spawn(step, args=(port,), nprocs=WORLD, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
