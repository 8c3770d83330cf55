"""PyTorch training steps, the workload of the performance benchmark: a convolution, a small
transformer encoder, AdamW, bf16 autocast; about 200 kernel launches per step.

usage: python3 torch_train.py [STEPS] [WARMUP]   (defaults 300 and 20)
Prints `step_ms T` (mean over the timed steps), `loss L` (the last step's), and
`launches_per_step N` (from torch.profiler, one step).
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3, padding=1)
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))                  # (B, 64, 16, 16)
        x = x.flatten(2).transpose(1, 2)              # (B, 256, 64)
        x = self.encoder(x)
        return self.head(x.mean(1))


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    warmup = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.manual_seed(0)
    model = Model().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 3, 16, 16, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
    print(f"step_ms {elapsed / steps * 1e3:.3f}")
    print(f"loss {loss.item():.6f}")
    print(f"launches_per_step {kernels}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
