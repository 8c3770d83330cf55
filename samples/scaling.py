"""How launch and allocation costs grow: many distinct kernels, many live allocations.

usage: python3 scaling.py kernels K LAUNCHES   launch LAUNCHES times, round robin over K
                                               distinct empty kernels (one PTX module)
       python3 scaling.py allocs N LAUNCHES    make N live 512-byte allocations, then launch
                                               one empty kernel LAUNCHES times, then free all
                                               in random order
Prints `launch_us T` (per launch, host time, after one warm-up launch of each kernel) and,
for allocs, `alloc_us T` and `free_us T` (per call).
"""

from __future__ import annotations

import random
import sys
import time

from cuda.bindings import driver as cu
from cudrv import check, open_device, run_main


def module(count: int) -> tuple[cu.CUmodule, list[cu.CUfunction]]:
    entries = "".join(f".visible .entry k{i}()\n{{\n\tret;\n}}\n" for i in range(count))
    ptx = f".version 8.0\n.target sm_90\n.address_size 64\n{entries}"
    mod = check(cu.cuModuleLoadData(ptx.encode() + b"\0"))
    return mod, [check(cu.cuModuleGetFunction(mod, f"k{i}".encode())) for i in range(count)]


def launch_us(funcs: list[cu.CUfunction], launches: int) -> float:
    for f in funcs:  # every function once: names learned, layouts asked
        check(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0))
    check(cu.cuCtxSynchronize())
    n = len(funcs)
    start = time.perf_counter()
    for j in range(launches):
        cu.cuLaunchKernel(funcs[j % n], 1, 1, 1, 1, 1, 1, 0, 0, 0, 0)
    check(cu.cuCtxSynchronize())
    return (time.perf_counter() - start) / launches * 1e6


def main() -> None:
    kind, count, launches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    open_device()
    if kind == "kernels":
        _, funcs = module(count)
        print(f"launch_us {launch_us(funcs, launches):.3f}")
        return
    _, funcs = module(1)
    start = time.perf_counter()
    ptrs = [check(cu.cuMemAlloc(512)) for _ in range(count)]
    alloc = (time.perf_counter() - start) / count * 1e6
    print(f"alloc_us {alloc:.3f}")
    print(f"launch_us {launch_us(funcs, launches):.3f}")
    random.Random(0).shuffle(ptrs)
    start = time.perf_counter()
    for p in ptrs:
        check(cu.cuMemFree(p))
    print(f"free_us {(time.perf_counter() - start) / count * 1e6:.3f}")


if __name__ == "__main__":
    run_main(main)
