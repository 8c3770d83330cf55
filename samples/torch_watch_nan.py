"""NaN/Inf planted in two PyTorch loops, for `cudump --watch-nan` (tests/gpu/test_gpu_watch_nan.py).

    python torch_watch_nan.py train [POISON...]   eager training steps of a small MLP
    python torch_watch_nan.py decode [POISON...]  a transformer step captured once in a CUDA
                                                  graph and replayed as a decode loop

train: at each step listed in POISON, the first layer's weight is multiplied by inf on the
GPU before the step (`mul_`), so that kernel is the producer; it is put back after the step,
so the steps after it are finite again. decode: before each replay listed in POISON, the
graph's static input is filled with a finite 3e38, so that the graph's first projection
overflows: the producer is a kernel node of the graph. Prints one line a step (its loss, or
the sum of the decoded output, non-finite as such) and `done`.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

STEPS = 12


def train(poison: set[int]) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")
    for step in range(1, STEPS + 1):
        saved = None
        if step in poison:
            saved = model[0].weight.detach().clone()
            with torch.no_grad():
                model[0].weight.mul_(float("inf"))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        if saved is not None:
            with torch.no_grad():
                model[0].weight.copy_(saved)
        print(f"step {step} loss {loss.item():.4f}", flush=True)


class Block(nn.Module):
    """One transformer step written out (attention, projection, residual, norm, MLP), so
    that every kernel is an ordinary one a CUDA graph captures."""

    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
        x = self.norm(x + self.proj(att @ v))
        return x + self.mlp(x)


def decode(poison: set[int]) -> None:
    torch.manual_seed(0)
    layer = Block().cuda().eval()
    static_x = torch.randn(1, 16, 64, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(3):   # warm up outside the capture, as torch.cuda.graph asks
            layer(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = layer(static_x)
    for step in range(1, STEPS + 1):
        with torch.no_grad():
            if step in poison:
                static_x.fill_(3e38)
            else:
                static_x.copy_(torch.randn(1, 16, 64, device="cuda"))
        graph.replay()
        print(f"step {step} out {static_out.sum().item():.4f}", flush=True)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "train"
    poison = {int(a) for a in sys.argv[2:]}
    {"train": train, "decode": decode}[mode](poison)
    print("done", flush=True)


if __name__ == "__main__":
    main()
