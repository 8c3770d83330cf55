"""torch.compile of a small MLP (Inductor's Triton kernels), default mode or
mode="reduce-overhead" (replayed through CUDA graph trees).

usage: python3 compiled.py [default|reduce-overhead]
Prints the rounded result of the last call.
"""

from __future__ import annotations

import sys

import torch


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "default"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                torch.nn.LayerNorm(512), torch.nn.Linear(512, 64)).cuda()
    fn = torch.compile(model, mode=mode)
    x = torch.randn(128, 256, generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        for _ in range(8):
            out = fn(x)
    torch.cuda.synchronize()
    print(f"{mode} out mean {float(out.double().mean()):.4f} "
          f"absmean {float(out.double().abs().mean()):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
