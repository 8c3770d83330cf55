"""CuPy: a RawKernel (NVRTC), cuFFT and a cuBLAS matrix product.

usage: python3 cupy_ops.py
Prints rounded results of each.
"""

from __future__ import annotations

import sys

import cupy as cp

SAXPY = cp.RawKernel(r'''
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
''', "saxpy")


def main() -> int:
    n = 1 << 20
    x = cp.arange(n, dtype=cp.float32) / n
    y = cp.ones(n, dtype=cp.float32)
    for _ in range(3):
        SAXPY(((n + 255) // 256,), (256,), (cp.float32(2.0), x, y, cp.int32(n)))
    print(f"saxpy sum {float(y.sum()):.6g}")
    signal = cp.sin(cp.arange(4096, dtype=cp.float32) * 0.05)
    spectrum = cp.abs(cp.fft.fft(signal))
    print(f"fft peak {int(spectrum[:2048].argmax())} {float(spectrum.max()):.4g}")
    a = cp.random.default_rng(0).standard_normal((512, 512), dtype=cp.float32)
    b = a @ a.T
    print(f"matmul trace {float(cp.trace(b)):.5g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
