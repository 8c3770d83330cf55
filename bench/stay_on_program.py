"""The workloads of bench/stay_on.py, one process a workload and mode, run bare or under
cudump: built from code and configs (nothing downloaded), warmed up, then timed in chunks of
steps in this process's turns of a ring (bench/turns.py), then profiled in one more turn.

  resnet18   torchvision ResNet-18, batch 8 x 3x224x224: an eager training step (SGD)
  gpt        a small GPT-style decoder (plain torch.nn: 4 layers, width 256, 4 heads, 128
             tokens, batch 8): an eager training step (AdamW)
  decode     a GPT-style decoder's one-token decode step with a key/value cache (6 layers,
             width 512, batch 8, 256 positions), captured once with torch.cuda.graph: a step
             is one replay
  resnet50   torchvision ResNet-50, batch 64, channels-last, bf16 autocast: a training step
             bound by the GPU

usage: python3 bench/stay_on_program.py WORKLOAD --turns MINE,NEXT,READY [--chunks N]
           [--steps S] [--warmup W] [--profile-steps P] [--no-profile]
Prints one `key value` line each (bench/stay_on_table.py reads them): per chunk of S steps,
the wall ms a step (synchronize and perf_counter around the chunk), and the launching thread's
and all threads' instructions, cycles and CPU µs a step, counted from before the first step to
right after the last step was queued (before the wait for the GPU, whose spinning would count
too): bench/perfcount.py, `-` where the machine has no hardware counters (`counters` says
why). Then, unless --no-profile, the device time and count of cudump's kernels and of the
program's over P steps under torch.profiler (CUPTI activity records), per step; and `check`,
the last step's loss (or the decoded tokens' mean), finite where the run went as it should.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfcount import Counters  # noqa: E402
from stay_on_table import CHUNK_KEYS, GpuTotals, ProgramRun, gpu_totals, program_lines  # noqa: E402
from turns import TurnError, Turns  # noqa: E402


@dataclass
class Workload:
    step: Callable[[], None]
    check: Callable[[], float]      # after the last step: finite where all went well
    steps: int                      # steps a chunk, by default
    warmup: int
    profile_steps: int


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        """q, k and v, each (batch, heads, tokens, width / heads)."""
        b, t, c = x.shape
        return [u.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                for u in self.qkv(self.ln1(x)).split(c, dim=2)]

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.out(F.gelu(self.fc(self.ln2(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.split(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.mlp(x + self.proj(y.transpose(1, 2).reshape(b, t, c)))


class GPT(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, heads: int, positions: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(positions, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight           # tied, as GPT-2's
        for table in (self.tokens, self.positions):     # GPT-2's scale: a loss near ln(vocab)
            nn.init.normal_(table.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class Decoder:
    """One token a step for each of a batch, with a key/value cache of `positions` slots
    (the position wraps around): every tensor the step touches is allocated here, so that the
    step can be captured once and replayed."""

    def __init__(self, gpt: GPT, batch: int, positions: int) -> None:
        self.gpt = gpt
        blocks = list(gpt.blocks)
        width = gpt.tokens.weight.shape[1]
        heads = blocks[0].heads
        shape = (batch, heads, positions, width // heads)
        dev = gpt.tokens.weight.device
        self.k = [torch.zeros(shape, device=dev) for _ in blocks]
        self.v = [torch.zeros(shape, device=dev) for _ in blocks]
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.slots = torch.arange(positions, device=dev)
        self.positions = positions

    def step(self) -> None:
        gpt = self.gpt
        x = gpt.tokens(self.token) + gpt.positions(self.pos).view(1, 1, -1)
        # An additive mask of finite values (as Hugging Face's models make theirs), not a
        # boolean one, which attention turns into a buffer of -inf: a buffer of -inf is a
        # finding for every NaN/Inf mode, and goal 2 is the cost of a loop that makes none.
        seen = torch.where(self.slots <= self.pos, 0.0,
                           torch.finfo(torch.float32).min).view(1, 1, 1, -1)
        b, t, c = x.shape
        for i, block in enumerate(gpt.blocks):
            q, k, v = block.split(x)
            self.k[i].index_copy_(2, self.pos, k)
            self.v[i].index_copy_(2, self.pos, v)
            y = F.scaled_dot_product_attention(q, self.k[i], self.v[i], attn_mask=seen)
            x = block.mlp(x + block.proj(y.transpose(1, 2).reshape(b, t, c)))
        self.token.copy_(gpt.head(gpt.ln(x)).argmax(-1))
        self.pos.add_(1).remainder_(self.positions)


def seeded(*shape: int, ints: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    t = torch.randint(0, ints, shape, generator=g) if ints else torch.randn(*shape, generator=g)
    return t.cuda()


def training(model: nn.Module, loss_of: Callable[[], torch.Tensor],
             optimizer: torch.optim.Optimizer, autocast: bool = False
             ) -> tuple[Callable[[], None], Callable[[], float]]:
    last: list[torch.Tensor] = []

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_of()
        loss.backward()
        optimizer.step()
        last[:] = [loss]

    return step, lambda: float(last[0].detach().float()) if last else math.nan


def build(name: str) -> Workload:
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    if name in ("resnet18", "resnet50"):
        import torchvision

        batch = 8 if name == "resnet18" else 64
        make = torchvision.models.resnet18 if name == "resnet18" else torchvision.models.resnet50
        model = make(num_classes=1000).cuda().train()
        x, y = seeded(batch, 3, 224, 224), seeded(batch, ints=1000)
        if name == "resnet50":
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        step, check = training(model, lambda: F.cross_entropy(model(x), y), optimizer,
                               autocast=name == "resnet50")
        if name == "resnet18":
            return Workload(step, check, steps=10, warmup=20, profile_steps=5)
        # One step a chunk: the launching thread queues a step's ~600 kernels without
        # waiting for room in the launch queue (whose waiting would count as its work).
        return Workload(step, check, steps=1, warmup=8, profile_steps=3)
    if name == "gpt":
        vocab = 4096
        gpt = GPT(vocab, width=256, layers=4, heads=4, positions=128).cuda().train()
        ids = seeded(8, 129, ints=vocab)
        optimizer = torch.optim.AdamW(gpt.parameters(), lr=1e-4)
        step, check = training(gpt, lambda: F.cross_entropy(
            gpt(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()), optimizer)
        return Workload(step, check, steps=10, warmup=20, profile_steps=5)
    if name == "decode":
        gpt = GPT(8192, width=512, layers=6, heads=8, positions=256).cuda().eval()
        decoder = Decoder(gpt, batch=8, positions=256)
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):       # warmed up outside the capture, as asked
                for _ in range(3):
                    decoder.step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                decoder.step()
        # 100 replays a chunk: few enough that the launch queue never fills, so that the
        # launching thread never waits for room (which would count as its work).
        return Workload(graph.replay, lambda: float(decoder.token.float().mean()),
                        steps=100, warmup=50, profile_steps=30)
    raise ValueError(f"unknown workload {name!r}")


WORKLOADS = ("resnet18", "gpt", "decode", "resnet50")


def profiled(workload: Workload, steps: int) -> GpuTotals:
    """cudump's kernels and the program's a step, over `steps` steps, from CUPTI's activity
    records."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            workload.step()
        torch.cuda.synchronize()
    events = [(e.name, float(e.device_time)) for e in prof.events()
              if e.device_type.name == "CUDA"]
    return gpu_totals(events).per(steps)


def run(args: argparse.Namespace, turns: Turns) -> int:
    workload = build(args.workload)
    steps = args.steps or workload.steps
    warmup = workload.warmup if args.warmup is None else args.warmup
    for _ in range(warmup):
        workload.step()
    torch.cuda.synchronize()
    counters = Counters.open(threading.get_native_id())
    columns: dict[str, list[float | None]] = {k: [] for k in CHUNK_KEYS}
    turns.say_ready()
    for _ in range(args.chunks):
        turns.wait()
        counters.refresh()      # threads started since (cudump's launcher thread)
        torch.cuda.synchronize()
        before = counters.sample()
        start = time.perf_counter()
        for _ in range(steps):
            workload.step()
        sampling = time.perf_counter()
        queued = counters.sample()
        sampled = time.perf_counter()
        torch.cuda.synchronize()
        # The second sample's own time is not the program's.
        ms = (time.perf_counter() - start - (sampled - sampling)) * 1e3
        turns.pass_on()
        delta = queued.minus(before)
        columns["chunk_ms"].append(ms / steps)
        for key, counts in (("", delta.launching), ("all_", delta.all_threads)):
            for name, column in (("instructions", "instr"), ("cycles", "cycles")):
                value = counts.get(name)
                columns[key + column].append(None if value is None else value / steps)
        columns["cpu_us"].append(delta.launching_cpu_ns / 1e3 / steps)
        columns["all_cpu_us"].append(delta.all_cpu_ns / 1e3 / steps)
    counters.close()
    turns.wait()            # one more turn: the profiled steps, alone on the GPU
    gpu = None
    if not args.no_profile:
        try:
            gpu = profiled(workload, args.profile_steps or workload.profile_steps)
        except RuntimeError as err:
            # The timed figures stand without it; the table shows no GPU figures.
            print(f"stay_on_program.py: torch.profiler failed: {err}", file=sys.stderr)
    check = workload.check()
    turns.pass_on()
    result = ProgramRun(args.workload, steps, counters.describe(),
                        *[columns[k] for k in CHUNK_KEYS], gpu=gpu,  # type: ignore[arg-type]
                        check=check)
    for line in program_lines(result):
        print(line)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("--turns", metavar="MINE,NEXT,READY", required=True)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--steps", type=int, help="steps a chunk (default: the workload's)")
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--profile-steps", type=int)
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    if args.chunks < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--chunks and --steps must be positive")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        turns = Turns.parse(args.turns)
    except ValueError as err:
        parser.error(str(err))
    try:
        return run(args, turns)
    except TurnError as err:
        print(f"stay_on_program.py: --turns: {err}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
