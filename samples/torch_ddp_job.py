"""A PyTorch DistributedDataParallel training job over NCCL, one rank per process, started by
a launcher (torchrun, srun, or one cudump per "node") that puts the rank in its environment:
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.

Each rank trains a small MLP for STEPS steps (SGD, an optimizer step each step) on inputs
drawn on its GPU from a seed of its rank and step, so every run is the same. At step BAD,
rank BAD_RANK's input is scaled by 3e38: a multiply whose inputs are finite overflows to
Inf, the job's first non-finite value. It does not stay on that rank: DDP averages the
gradients with an all-reduce, so from that step on every rank's gradients and weights are
non-finite.

usage: torch_ddp_job.py [--steps STEPS] [--bad-step BAD] [--bad-rank BAD_RANK]
  (defaults 6, 3 and 1)
Each rank prints, at its end, `rank R: loss finite at steps ...; non-finite at steps ...`
(`-` where none). A missing or malformed variable is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass

OVERFLOW = 3e38         # times a standard normal: Inf wherever |x| > 1.13
VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class JobEnvError(ValueError):
    """The environment does not say this process's place in the job."""


@dataclass(frozen=True)
class JobEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def _whole(env: Mapping[str, str], name: str, low: int, high: int | None = None) -> int:
    text = env.get(name)
    if text is None or not text.strip():
        raise JobEnvError(f"{name} is not set (the launcher sets {', '.join(VARIABLES)})")
    try:
        value = int(text)
    except ValueError:
        raise JobEnvError(f"{name}={text!r}: not a whole number") from None
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise JobEnvError(f"{name}={value}: should be {bound}")
    return value


def job_env(env: Mapping[str, str]) -> JobEnv:
    """This process's place in the job, from the launcher's variables."""
    world = _whole(env, "WORLD_SIZE", 1)
    rank = _whole(env, "RANK", 0, world - 1)
    local = _whole(env, "LOCAL_RANK", 0)
    addr = env.get("MASTER_ADDR", "").strip()
    if not addr:
        raise JobEnvError("MASTER_ADDR is not set (the launcher sets "
                          f"{', '.join(VARIABLES)})")
    port = _whole(env, "MASTER_PORT", 1, 65535)
    return JobEnv(rank, world, local, addr, port)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="torch_ddp_job.py")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--bad-step", type=int, default=3)
    parser.add_argument("--bad-rank", type=int, default=1)
    return parser.parse_args(argv)


def _steps(steps: list[int]) -> str:
    return " ".join(map(str, steps)) or "-"


def train(place: JobEnv, steps: int, bad_step: int, bad_rank: int) -> str:
    import datetime

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.cuda.set_device(place.local_rank)
    # init_method env://: MASTER_ADDR and MASTER_PORT from the environment. A rank whose
    # peer never comes fails in two minutes rather than NCCL's default ten.
    dist.init_process_group("nccl", rank=place.rank, world_size=place.world_size,
                            timeout=datetime.timedelta(seconds=120))
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(
            nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).cuda(),
            device_ids=[place.local_rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        draw = torch.Generator(device="cuda")
        losses = []
        for step in range(steps):
            draw.manual_seed(1000 * place.rank + step)
            x = torch.randn(64, 32, device="cuda", generator=draw)
            y = torch.randint(0, 10, (64,), device="cuda", generator=draw)
            if place.rank == bad_rank and step == bad_step:
                x = x * OVERFLOW                 # the job's first non-finite value
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()                      # DDP's all-reduce of the gradients
            opt.step()
            losses.append(loss.detach())
        finite = [bool(v) for v in torch.isfinite(torch.stack(losses)).tolist()]
    finally:
        dist.destroy_process_group()
    good = [k for k, ok in enumerate(finite) if ok]
    bad = [k for k, ok in enumerate(finite) if not ok]
    return f"rank {place.rank}: loss finite at steps {_steps(good)}; non-finite at steps " \
           f"{_steps(bad)}"


def main(argv: list[str], env: Mapping[str, str]) -> int:
    args = parse_args(argv)
    try:
        place = job_env(env)
    except JobEnvError as err:
        print(f"torch_ddp_job.py: {err}", file=sys.stderr)
        return 2
    print(train(place, args.steps, args.bad_step, args.bad_rank), flush=True)
    return 0


if __name__ == "__main__":
    import os

    sys.exit(main(sys.argv[1:], os.environ))
