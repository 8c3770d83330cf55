"""The snapshot workload of bench/realworld.py: samples/build/big_buffer with a rule taking its
256 MiB buffer before and after each of 4 launches back to back, bare and under cudump at two
settings, and the file write rate of the file system the run directories are on.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gpurun import sample, under_cudump
from realworld_run import Say, Settings, cudump_summary, first_line, sub_run
from realworld_table import (
    MIB,
    BenchError,
    Row,
    SnapshotSetting,
    launch_times,
    read_values,
    snapshot_rows,
)

TITLE = "snapshots"
SNAP_MIB, SNAP_LAUNCHES = 256, 4
SNAP_SETTINGS = {"default": (), "--staging 1G": ("--staging", "1G")}
SNAP_RULE = """rules:
  - kernel: add_one
    match: base
    args: [0]
    when: both
    format: npy
    overrides:
      0: {dtype: float32, count: arg1}
"""


@dataclass
class SnapshotWorkload:
    """The snapshot runs of every repetition, by setting."""

    bare_ms: list[float] = field(default_factory=list)
    settings: dict[str, SnapshotSetting] = field(
        default_factory=lambda: {name: SnapshotSetting() for name in SNAP_SETTINGS})
    write_gbs: list[float] = field(default_factory=list)
    bare_failed: str = ""

    def rep(self, rep: int, s: Settings, say: Say) -> None:
        program = [*sample("big_buffer"), str(SNAP_MIB), str(SNAP_LAUNCHES), "--clock"]
        where = f"snapshots bare (rep {rep + 1})"
        try:
            done = sub_run(program, s.scratch, where, s.limit_s)
            bare = statistics.median(launch_times(done.stdout, SNAP_LAUNCHES, where))
        except BenchError as err:
            self.bare_failed = self.bare_failed or first_line(err)
            say(f"FAILED {err}")
            return
        self.bare_ms.append(bare)
        say(f"rep {rep + 1}/{s.reps} snapshots bare       {bare:.3f} ms/launch")
        rule = s.scratch / "snapshot-rule.yaml"
        rule.write_text(SNAP_RULE)
        # Room for the 8 snapshots and one buffer more: a bound on the disk a run may use.
        budget = f"{(2 * SNAP_LAUNCHES + 1) * SNAP_MIB}M"
        for name, extra in SNAP_SETTINGS.items():
            setting = self.settings[name]
            where = f"snapshots {name} (rep {rep + 1})"
            out = s.snap_base / f"run-{rep}-{list(SNAP_SETTINGS).index(name)}"
            try:
                cmd = under_cudump(program, out, rules=[rule],
                                   extra=["--max-bytes", budget, *extra])
                done = sub_run(cmd, s.scratch, where, s.limit_s)
                per = statistics.median(launch_times(done.stdout, SNAP_LAUNCHES, where))
                values = read_values(done.stdout, ["d2h_ms", "first_launch_unix_ms"], where)
                d2h = values["d2h_ms"]
                cudump_summary(out, where, SNAP_LAUNCHES)
                landed = landed_snapshots(out, SNAP_MIB * MIB)
                end = last_line_ms(out) - values["first_launch_unix_ms"]
            except BenchError as err:
                setting.failed = setting.failed or first_line(err)
                say(f"FAILED {err}")
                continue
            finally:
                shutil.rmtree(out, ignore_errors=True)
            setting.launch_ms.append(per)
            setting.held_ms.append(per - bare)
            setting.d2h_ms.append(d2h)
            setting.landed.append(landed)
            setting.end_ms.append(end)
            say(f"rep {rep + 1}/{s.reps} snapshots {name:12} {per:.3f} ms/launch, "
                f"{landed}/{2 * SNAP_LAUNCHES} on disk, one pinned D2H {d2h:.3f} ms, "
                f"first launch to last file {end:.1f} ms")
        self.write_gbs.append(write_speed(s.snap_base, SNAP_MIB))
        say(f"rep {rep + 1}/{s.reps} file write of {SNAP_MIB} MiB: "
            f"{self.write_gbs[-1]:.2f} GB/s")

    def rows(self) -> tuple[list[Row], list[str]]:
        if self.bare_failed:
            for setting in self.settings.values():
                setting.failed = setting.failed or f"bare: {self.bare_failed}"
        rows, notes = snapshot_rows(TITLE, SNAP_MIB, SNAP_LAUNCHES, self.bare_ms,
                                    self.settings, self.write_gbs)
        return rows, notes


def landed_snapshots(out: Path, nbytes: int) -> int:
    """Records that say ok and whose .npy is on disk with the whole buffer in it."""
    from cudump.errors import CudumpError
    from cudump.rundir.manifest import read_manifest

    if not (out / "manifest.jsonl").is_file():
        return 0
    try:
        records = read_manifest(out)
    except CudumpError as err:
        raise BenchError(f"the manifest of {out} is unreadable: {err}") from None
    return sum(1 for r in records if r.status == "ok" and r.file
               and (out / r.file).is_file() and (out / r.file).stat().st_size >= nbytes)


def last_line_ms(out: Path) -> float:
    """When the manifest's last line was written (its mtime, Unix ms): the writer appends a
    snapshot's line once its file is whole, so the last line is the last file on disk."""
    return (out / "manifest.jsonl").stat().st_mtime_ns / 1e6


def write_speed(where: Path, mib: int) -> float:
    """GB/s of np.save of `mib` MiB into `where` (as cudump writes .npy: no fsync), median
    of 3."""
    data = np.ones(mib * MIB // 4, np.float32)
    times = []
    for i in range(3):
        path = where / f"write-{i}.npy"
        start = time.perf_counter()
        np.save(path, data)
        times.append(time.perf_counter() - start)
        path.unlink()
    return data.nbytes / statistics.median(times) / 1e9


def snapshot_base(chosen: Path | None) -> Path:
    """Where the snapshot runs write: --dir, else tmpfs where it has room (the staging areas
    live there too), else the temporary directory's disk."""
    need = (2 * SNAP_LAUNCHES + 2) * SNAP_MIB * MIB
    candidates = [chosen] if chosen else [Path("/dev/shm"), Path(tempfile.gettempdir())]
    for base in candidates:
        if base.is_dir() and shutil.disk_usage(base).free >= need + (2 << 30):
            return base
    raise SystemExit(f"realworld.py: no room for the snapshot runs (need {need >> 20} MiB and "
                     f"2 GiB more free) in {' or '.join(map(str, candidates))}")


