"""cuda-python sample: a C++ template kernel compiled at run time with NVRTC
(found through a name expression and its lowered name), loaded, launched N
times through the driver API, and checked.

usage: python3 nvrtc_template.py [N]   (default 5)
Prints `launches axpb=N`. The kernel demangles as
`void jit::axpb<float, 3>(float*, float const*, float, int)`.
"""

from __future__ import annotations

import sys

import numpy as np
from cudrv import (
    SampleFailure,
    compile_cuda,
    f32,
    from_device,
    i32,
    launch,
    load_functions,
    open_device,
    ptr,
    run_main,
    to_device,
)

SOURCE = r"""
namespace jit {
template <typename T, int K>
__global__ void axpb(T* y, const T* x, T a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = y[i] + a * x[i] + (T)K;
}
}  // namespace jit
"""
NAME = "jit::axpb<float, 3>"
K = 3


def main() -> None:
    launches = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if launches <= 0:
        raise SampleFailure("N must be positive")
    _, arch = open_device()
    fn = load_functions(compile_cuda(SOURCE, [NAME], arch, "axpb.cu"))[NAME]

    n = 5000
    # Small integers keep every sum exact in float32, so the check is exact.
    x = (np.arange(n) % 7 - 3).astype(np.float32)
    y = (np.arange(n) % 5).astype(np.float32)
    a = 2.0
    dx, dy = to_device(x), to_device(y)
    for _ in range(launches):
        launch(fn, ((n + 127) // 128, 1, 1), (128, 1, 1), [ptr(dy), ptr(dx), f32(a), i32(n)])
    got = from_device(dy, y)
    want = y + launches * (np.float32(a) * x + np.float32(K))
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0])
        raise SampleFailure(f"y[{bad}] = {got[bad]}, want {want[bad]}")
    print(f"launches axpb={launches}")


if __name__ == "__main__":
    run_main(main)
