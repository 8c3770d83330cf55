"""A kernel whose two buffers come in a by-value struct, both in one allocation: its launches
and a --check-nan plan of it, for the tests of the controller's NaN watch and repeated plans
(test_check_nan.py, test_nan_origin.py)."""

from __future__ import annotations

from pathlib import Path

from cudump.kernels.geometry import Allocation
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.policy.rules import SCAN_FORMATS, option_rule
from cudump.policy.snapshot.coordinator import Snapshots
from cudump.policy.snapshot.planned import PlannedLaunch, Repeat
from cudump.rundir.manifest import ManifestWriter

PAIR_FUNC = FuncInfo(1, 0x1000, "_Z1kv", "void k<float>(std::array<char*, 2ul>)", [(0, 16)])
PAIR_ALLOC = Allocation(base=0x10000, size=0x1000, kind="linear")


def scanning(tmp_path: Path) -> Snapshots:
    """The snapshot policy of a run with --check-nan, writing into tmp_path."""
    return Snapshots([option_rule("--check-nan", SCAN_FORMATS)], tmp_path, None,
                     ManifestWriter(tmp_path))


def pair_launch(seq: int, first: int, second: int) -> LaunchEvent:
    """Launch `seq` of the kernel, its struct holding the pointers `first` and `second`."""
    words = first.to_bytes(8, "little") + second.to_bytes(8, "little")
    return LaunchEvent(seq=seq, occurrence=seq, func_id=1, device=0, grid=(1, 1, 1),
                       block=(1, 1, 1), smem=0, stream=0, tid=1, api="cuLaunchKernel",
                       flags=0, rc=0, raw_args=[words],
                       pointers={(0, 0): PAIR_ALLOC, (0, 8): PAIR_ALLOC})


def kept_pair_plan(snapshots: Snapshots) -> tuple[ProcessState, PlannedLaunch, Repeat]:
    """Process 1's first launch of the kernel over 0x10000 and 0x10800, planned, and the
    plan the shim may repeat: scans of both buffers, before and after."""
    proc = ProcessState(1, 0, "prog")
    assert snapshots.wants(proc, PAIR_FUNC)
    event = pair_launch(1, 0x10000, 0x10800)
    failures = snapshots.thread_failures()
    planned = snapshots.plan(proc, PAIR_FUNC, event, 1 << 20)
    repeat = snapshots.repeat_id(proc, PAIR_FUNC, event, planned, failures)
    assert planned is not None and repeat is not None
    assert [(c.phase, c.at) for c in planned.copies] == [
        ("before", 0), ("after", 0), ("before", 8), ("after", 8)]
    return proc, planned, repeat
