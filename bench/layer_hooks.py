"""What --layers' PyTorch hooks cost a module call, in the program's Python alone (no GPU, no
shim: the scopes go to a stand-in that does nothing): a model of 59 small modules shaped as
ResNet-18's (a stem, four stages of two residual blocks, a head) on the CPU, forward without
and with cudump's hooks, side by side in one process.

usage: python3 bench/layer_hooks.py [--forwards 3000]      (needs torch; CPU is enough)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from cudump.target.torch_hooks import install  # noqa: E402


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1, self.relu = nn.Linear(8, 8), nn.Identity(), nn.ReLU()
        self.conv2, self.bn2 = nn.Linear(8, 8), nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + x)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(8, 8), nn.Identity(), nn.ReLU())
        self.layers = nn.Sequential(*[nn.Sequential(Block(), Block()) for _ in range(4)])
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.layers(self.stem(x)))


class NoShim:
    """The shim's scope calls, doing nothing: what is timed is cudump's Python."""

    has_sources = True

    def push(self, kind: int, name: str) -> bool:
        return True

    def pop(self) -> None:
        pass

    def step(self, wire_step: int) -> None:
        pass

    def source(self, text: str) -> int:
        return 0

    def restore(self, before: int) -> None:
        pass


def per_forward(model: nn.Module, x: torch.Tensor, n: int) -> float:
    with torch.no_grad():
        for _ in range(200):
            model(x)
        start = time.perf_counter()
        for _ in range(n):
            model(x)
    return (time.perf_counter() - start) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forwards", type=int, default=3000)
    args = parser.parse_args()
    model, x = Net(), torch.randn(2, 8)
    modules = sum(1 for _ in model.modules())
    bare = per_forward(model, x, args.forwards)
    install(torch, NoShim())
    hooked = per_forward(model, x, args.forwards)
    print(f"bare {bare * 1e6:.1f} µs a forward, with cudump's hooks {hooked * 1e6:.1f} µs "
          f"({modules} module calls): {(hooked - bare) / modules * 1e6:.2f} µs a module call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
