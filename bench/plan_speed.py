"""Benchmark (no GPU): what the controller takes to answer one launch the shim asks about.

A launch the shim has no plan for waits while the controller plans it: that time is the
program's. The costliest are multi-tensor kernels (PyTorch's optimizers): one by-value
struct holding the addresses of up to ~150 tensors, each a buffer to scan before and after
the launch under --check-nan. When the caching allocator hands out new addresses, such a
launch is asked about again (measured on the training step of bench/training_step.py: about
one launch in every two steps, 5 ms each on an H100 host).

This times the controller's part, in-process: the plan (Snapshots.plan), its repeat
template (repeat_id) and the answer's bytes (plan_payload), for a launch of --pointers
buffers, each pointer into an allocation of its own; best of --repeat rounds of --launches.

    python bench/plan_speed.py [--pointers 144] [--launches 30] [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudump.kernels.geometry import Allocation  # noqa: E402
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState  # noqa: E402
from cudump.policy.rules import SCAN_FORMATS, option_rule  # noqa: E402
from cudump.policy.snapshot.coordinator import Snapshots  # noqa: E402
from cudump.policy.snapshot.planned import plan_payload  # noqa: E402
from cudump.rundir.manifest import ManifestWriter  # noqa: E402
from cudump.wire import protocol as p  # noqa: E402

NAME = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
        "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
        "PointwiseOpScalarListFunctor<float, 4, 3, 0>, std::multiplies<float>, float>(at::"
        "native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous "
        "namespace)::PointwiseOpScalarListFunctor<float, 4, 3, 0>, std::multiplies<float>, "
        "float)")
STRUCT_BYTES = 3392   # TensorListMetadata<4>: addresses, sizes, block-to-tensor tables


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pointers", type=int, default=144)
    parser.add_argument("--launches", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not 1 <= args.pointers <= STRUCT_BYTES // 8:
        parser.error(f"--pointers must be 1 to {STRUCT_BYTES // 8}")
    with tempfile.TemporaryDirectory(prefix="cudump-plan-") as tmp:
        run_dir = Path(tmp)
        snap = Snapshots([option_rule("--check-nan", SCAN_FORMATS)], run_dir, None,
                         ManifestWriter(run_dir))
        try:
            best, copies = time_plans(snap, args.pointers, args.launches, args.repeat)
        finally:
            snap.close()
    print(f"plan_speed: {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.processor() or platform.machine()}")
    print(f"one launch of a multi-tensor kernel, {args.pointers} buffers, --check-nan: "
          f"{copies} scans (before and after)")
    print(f"controller time per launch asked: {best * 1e3:.2f} ms "
          f"({best / copies * 1e6:.1f} us per scan), best of {args.repeat} rounds of "
          f"{args.launches}")
    return 0


def time_plans(snap: Snapshots, pointers: int, launches: int,
               repeat: int) -> tuple[float, int]:
    proc = ProcessState(1, 0, "bench")
    func = FuncInfo(1, 0x1000, "_Z1kv", NAME,
                    [(0, STRUCT_BYTES), (STRUCT_BYTES, 1), (STRUCT_BYTES + 4, 1),
                     (STRUCT_BYTES + 8, 4)])
    if not snap.wants(proc, func):
        raise SystemExit("plan_speed: --check-nan does not want the kernel")
    allocs = [Allocation(base=0x7F0000000000 + i * 0x100000, size=0x40000, kind="linear")
              for i in range(pointers)]
    seq = 0
    best, copies = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(launches):
            seq += 1
            shift = 0x100 * (seq % 7)   # other addresses in the same allocations
            words = b"".join((a.base + shift).to_bytes(8, "little") for a in allocs)
            event = LaunchEvent(
                seq=seq, occurrence=seq, func_id=1, device=0, grid=(320, 1, 1),
                block=(512, 1, 1), smem=0, stream=0, tid=1, api="cuLaunchKernel", flags=0,
                rc=0, raw_args=[words + bytes(STRUCT_BYTES - len(words)), b"\0", b"\0",
                                bytes(4)],
                pointers={(0, 8 * i): a for i, a in enumerate(allocs)})
            failures = snap.thread_failures()
            planned = snap.plan(proc, func, event, 1 << 20)
            repeat_id = snap.repeat_id(proc, func, event, planned, failures)
            plan_payload(planned, p.PlanFlag.REPEAT | p.PlanFlag.GATE, repeat_id)
            copies = len(planned.copies) if planned is not None else 0
        best = min(best, (time.perf_counter() - start) / launches)
    return best, copies


if __name__ == "__main__":
    sys.exit(main())
