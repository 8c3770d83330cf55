"""PyTorch sample: one bf16 GEMM, C = A @ B, large enough (4096 x 4096 by default) for
cuBLAS to choose a Hopper kernel, which reads A and B (and writes C) through TMA tensor
maps rather than pointers.

usage: python3 torch_tma_gemm.py DIR [N]
Writes DIR/a.npy, DIR/b.npy, DIR/c.npy (the bf16 bits as uint16; C as the GEMM left it)
and DIR/pointers.json (each tensor's device address and byte size), then prints
`gemm N=N bf16` and `launches gemm=1`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch


def bits(t: torch.Tensor) -> np.ndarray:
    """A bf16 tensor's bits, as numpy has no bfloat16."""
    return t.view(torch.int16).cpu().numpy().view(np.uint16)


def main() -> None:
    if len(sys.argv) not in (2, 3):
        raise SystemExit("usage: torch_tma_gemm.py DIR [N]")
    out = Path(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) == 3 else 4096
    if not torch.cuda.is_available():
        raise SystemExit("torch_tma_gemm: no CUDA device")
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.zeros(n, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    for name, t in (("a", a), ("b", b), ("c", c)):
        np.save(out / f"{name}.npy", bits(t))
    pointers = {name: {"address": t.data_ptr(), "bytes": t.numel() * t.element_size()}
                for name, t in (("a", a), ("b", b), ("c", c))}
    (out / "pointers.json").write_text(json.dumps(pointers))
    print(f"gemm N={n} bf16")
    print("launches gemm=1")


if __name__ == "__main__":
    main()
