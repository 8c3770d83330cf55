"""A NaN that the host writes into a GPU tensor, and one a kernel writes, for cudump
--check-nan:

  copy  x = arange(4096) on the GPU, then x[5] = nan: PyTorch copies the one float from the
        host (cudaMemcpyAsync, the driver's cuMemcpyHtoDAsync_v2 of 4 bytes; no kernel)
  fill  x = torch.full((4096,), nan) on the GPU: a fill kernel writes every element

then y = x * 2, which carries the NaN on.

usage: python3 torch_host_nan.py copy|fill
Prints how many elements of y are NaN; writes where the NaN was put (`nan at 0x...`) to
stderr.
"""

from __future__ import annotations

import sys

import torch

N = 4096


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("copy", "fill"):
        sys.exit("usage: torch_host_nan.py copy|fill")
    if mode == "copy":
        x = torch.arange(N, dtype=torch.float32, device="cuda")
        x[5] = float("nan")
        where = x.data_ptr() + 5 * x.element_size()
    else:
        x = torch.full((N,), float("nan"), device="cuda")
        where = x.data_ptr()
    print(f"nan at {where:#x}", file=sys.stderr)
    y = x * 2
    torch.cuda.synchronize()
    print(f"{mode}: {int(torch.isnan(y).sum())} of {N} NaN")
    return 0


if __name__ == "__main__":
    sys.exit(main())
