"""Inference forward passes of a real model, timed, for the real-workload benchmark
(bench/realworld.py): torchvision's ResNet-18 (batch 8, 3x224x224) or a Hugging Face BERT-base
encoder built from its config (batch 8, 128 tokens). Random weights: nothing is downloaded.

usage: python3 torch_forward.py resnet18|bert [--iters 30] [--warmup 10] [--chunks 1] [--anchor]
                                             [--profile] [--turns MINE,NEXT,READY]
Prints `iter_ms T`: milliseconds per forward, torch.cuda.synchronize and perf_counter around
--iters forwards after --warmup; and `output_absmean A`, the mean absolute value of the last
output (the same whatever runs the program).
--chunks K (which must divide --iters) times the forwards in K chunks of --iters/K, each after
a synchronize and a short CPU probe (as host_probe_us below): `chunk_ms` and `chunk_probe_us`,
K numbers each, comma-separated; iter_ms is then their mean. A host's speed can change within
a process, so a chunk's probe says the speed of that chunk. The GPU runs dry before each chunk,
so iter_ms with K > 1 is a little above what one timing of all --iters gives.
--anchor then times the same forwards with a forward hook on every module that looks for NaN
in its floating-point outputs with torch.isnan(out).any(), the way it is done without a
debugger: `anchor_ms T` where each hook checks at once (`if torch.isnan(out).any(): raise`,
so every hook waits for the GPU), and `anchor_nosync_ms T` where the hooks keep their flags
and they are checked once per forward.
--profile prints `launches_per_iter N` (torch.profiler's count of CUDA kernels, one forward).
--turns MINE,NEXT,READY makes the process one of a ring that takes turns (bench/turns.py): it
says it is ready after the warm-up, and times each chunk only in its turn; the first process of
the ring times its --anchor hooks once the ring is done.
Also prints `host_probe_us T`: microseconds of the CPU for one small in-place add on a CPU
tensor, the fastest of a few rounds timed right before the forwards. The same host ran bare
ResNet-18 at 1.3 ms a forward in some processes and 2.4 ms in others; the probe says which
speed this process had (a small model's forward is bound by the same dispatching work).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

BATCH = 8


def build(name: str) -> tuple[nn.Module, Callable[[], torch.Tensor]]:
    """The model, on the GPU in eval mode, and one forward of it on a fixed input."""
    if name == "resnet18":
        import torchvision

        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        model = torchvision.models.resnet18(num_classes=1000).cuda().eval()
        x = torch.randn(BATCH, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()
        return model, lambda: model(x)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")     # built from its config: nothing to fetch
    from transformers import BertConfig, BertModel

    config = BertConfig()   # BERT-base: 12 layers, hidden 768, 12 heads
    bert = BertModel(config).cuda().eval()
    ids = torch.randint(0, config.vocab_size, (BATCH, 128),
                        generator=torch.Generator().manual_seed(1)).cuda()
    return bert, lambda: bert(input_ids=ids).last_hidden_state


def timed(forward: Callable[[], Any], iters: int, after: Callable[[], None] | None = None
          ) -> float:
    """Milliseconds per forward over `iters` forwards (`after` runs after each)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        forward()
        if after is not None:
            after()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e3


def float_tensors(value: Any) -> Iterator[torch.Tensor]:
    """The floating-point tensors of a module's output: a tensor, or tuples, lists and dicts
    of them (a Hugging Face ModelOutput is a dict)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from float_tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from float_tensors(item)


def checked_hook(module: nn.Module, inputs: Any, output: Any) -> None:
    for tensor in float_tensors(output):
        if torch.isnan(tensor).any():
            raise RuntimeError(f"NaN in the output of {type(module).__name__}")


class Flags:
    """Hooks that keep each output's NaN flag on the GPU; checked once per forward."""

    def __init__(self) -> None:
        self.flags: list[torch.Tensor] = []

    def hook(self, module: nn.Module, inputs: Any, output: Any) -> None:
        self.flags.extend(torch.isnan(tensor).any() for tensor in float_tensors(output))

    def check(self) -> None:
        found = bool(torch.stack(self.flags).any()) if self.flags else False
        self.flags.clear()
        if found:
            raise RuntimeError("NaN in a module's output")


def hooked_ms(model: nn.Module, forward: Callable[[], Any], hook: Callable[..., None],
              iters: int, warmup: int, after: Callable[[], None] | None = None) -> float:
    handles = [m.register_forward_hook(hook) for m in model.modules()]
    try:
        for _ in range(warmup):
            forward()
            if after is not None:
                after()
        return timed(forward, iters, after)
    finally:
        for handle in handles:
            handle.remove()


def host_probe_us(ops: int = 2000, rounds: int = 5) -> float:
    """Microseconds for one in-place add on a small CPU tensor, the fastest of `rounds`
    rounds of `ops` adds: how fast this process's CPU runs PyTorch's dispatching."""
    x = torch.zeros(8)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(ops):
            x.add_(1.0)
        best = min(best, time.perf_counter() - start)
    return best / ops * 1e6


def launches_per_forward(forward: Callable[[], Any]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        forward()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def ring_module() -> Any:
    """bench/turns.py, the benchmark's ring of processes that take turns (beside this sample)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import turns

    return turns


def forwards(args: argparse.Namespace, turns: Any) -> int:
    """Times the forwards and prints what the module's docstring says; with `turns` (a
    bench/turns.py participant) each chunk in this process's turn."""
    torch.manual_seed(0)
    model, run = build(args.model)
    with torch.no_grad():
        out = run()
        for _ in range(args.warmup):
            out = run()
        torch.cuda.synchronize()
        probe = host_probe_us()
        if turns is not None:
            turns.say_ready()
        chunk_probes, chunk_ms = [], []
        for k in range(args.chunks):
            if turns is not None:
                turns.wait()
            if args.chunks > 1:
                chunk_probes.append(host_probe_us(ops=300, rounds=3))
            chunk_ms.append(timed(run, args.iters // args.chunks))
            if k == args.chunks - 1:
                # In the last turn: with --turns nothing of this process's runs on the GPU
                # outside its turns.
                out = run()
                torch.cuda.synchronize()
            if turns is not None:
                turns.pass_on()
        ms = sum(chunk_ms) / len(chunk_ms)
        if args.chunks > 1:
            print("chunk_ms " + ",".join(f"{x:.4f}" for x in chunk_ms))
            print("chunk_probe_us " + ",".join(f"{x:.4f}" for x in chunk_probes))
        print(f"iter_ms {ms:.4f}")
        print(f"host_probe_us {probe:.4f}")
        print(f"output_absmean {float(out.double().abs().mean()):.4g}")
        if args.anchor:
            if turns is not None:
                turns.wait()    # the ring is done: the first process times its hooks alone
            warm = max(1, args.warmup // 3)
            print(f"anchor_ms {hooked_ms(model, run, checked_hook, args.iters, warm):.4f}")
            flags = Flags()
            print(f"anchor_nosync_ms "
                  f"{hooked_ms(model, run, flags.hook, args.iters, warm, flags.check):.4f}")
        if args.profile:
            print(f"launches_per_iter {launches_per_forward(run)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=("resnet18", "bert"))
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=1)
    parser.add_argument("--anchor", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--turns", metavar="MINE,NEXT,READY")
    args = parser.parse_args()
    if args.iters <= 0 or args.warmup < 0:
        parser.error("--iters must be positive and --warmup not negative")
    if args.chunks < 1 or args.iters % args.chunks:
        parser.error("--chunks must be positive and divide --iters")
    if not args.turns:
        return forwards(args, None)
    ring = ring_module()
    try:
        turns = ring.Turns.parse(args.turns)
    except ValueError as err:
        parser.error(str(err))
    try:
        return forwards(args, turns)
    except ring.TurnError as err:
        print(f"torch_forward.py: --turns: {err}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
