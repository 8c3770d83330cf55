"""A second GPU process for the real-world matrix (`matrix.py --neighbour gemm`): large bf16
GEMMs back to back on the same GPU, as another user's training job would keep it busy, until
SIGTERM. Prints `ready` once its first GEMM is done, and how many it made at the end."""

from __future__ import annotations

import signal
import sys
import time

SIZE = 8192
STOPPED = False


def stop(_signum: int, _frame: object) -> None:
    global STOPPED
    STOPPED = True


def main() -> int:
    import torch

    signal.signal(signal.SIGTERM, stop)
    a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    print("ready", flush=True)
    start, made = time.monotonic(), 1
    while not STOPPED:
        # A few queued at once, then a wait: the GPU never runs dry, and SIGTERM is seen.
        for _ in range(8):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        made += 8
    seconds = time.monotonic() - start
    flops = 2.0 * SIZE**3 * made / seconds if seconds else 0.0
    print(f"gemms {made} in {seconds:.1f} s ({flops / 1e12:.0f} TFLOP/s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
