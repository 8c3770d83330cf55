"""The scratch memory of deferred snapshot copies (shim/scratch.c) comes from a pool of
cudump's own that keeps it from one launch to the next, and gives it back whenever the
program may want it. On the stand-in driver with a device of fixed size
(FAKECUDA_CAPACITY_MIB), the `roomy` program sizes itself by the memory that was free before
its first launch, as frameworks do: under cudump it gets what it gets bare."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from records import manifest, summary

LAUNCHES = 3
RULE = """rules:
  - kernel: square
    args: [0, 1]
    when: both
"""
SIZE = {"FAKECUDA_CAPACITY_MIB": "64"}
# The drain's thread may not trim: what the program gets back, it gets from its own calls.
MAIN_TRIMS = SIZE | {"FAKECUDA_POOL_TRIM": "main"}


@pytest.fixture
def rule(tmp_path: Path) -> Path:
    path = tmp_path / "square.yaml"
    path.write_text(RULE)
    return path


def stats(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def check_snapshots(run_dir: Path) -> None:
    """Every launch's two buffers, before and after it, are on disk, written behind the
    program: the launches went the deferred way, through scratch."""
    records = manifest(run_dir)
    assert len(records) == 4 * LAUNCHES
    assert all(r["status"] == "ok" for r in records), [r.get("reason") for r in records]
    assert summary(run_dir)["written_behind"] == LAUNCHES
    x = np.load(run_dir / records[0]["file"])
    assert x.dtype == np.float32 and x.size == 64 * 1024


def test_an_allocation_that_needs_the_kept_memory_is_made_again_once_it_is_given_back(
        fake, cudump_run, bare_run, rule, tmp_path):
    bare = bare_run([str(fake.programs["roomy"]), "alloc", str(LAUNCHES)],
                    env_extra=SIZE)
    assert bare.returncode == 0, bare.stderr
    counts = tmp_path / "stats.txt"
    ran = cudump_run([str(fake.programs["roomy"]), "alloc", str(LAUNCHES)], "--rule", str(rule),
                     env_extra=MAIN_TRIMS | {"FAKECUDA_STATS": str(counts)})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare.stdout
    # The first try found the pool's memory kept, and failed; the second got it all.
    assert stats(counts)["out_of_memory"] == 1
    check_snapshots(ran.run_dir)


def test_the_program_is_told_the_memory_free_as_it_would_be_bare(
        fake, cudump_run, rule):
    ran = cudump_run([str(fake.programs["roomy"]), "info", str(LAUNCHES)], "--rule", str(rule),
                     env_extra=MAIN_TRIMS)
    assert ran.returncode == 0, ran.stderr
    kept, free = ran.stdout.splitlines()[:2]
    assert int(kept.split()[1]) > 0        # the pool kept the last launch's scratch memory
    assert free == "free unchanged"
    check_snapshots(ran.run_dir)


def test_the_pool_gives_its_memory_back_once_the_drain_is_idle(fake, cudump_run, rule):
    """The program asks nothing of the driver after its launches; the drain's own thread
    trims the pool (the program waits until it has, at most a minute)."""
    ran = cudump_run([str(fake.programs["roomy"]), "idle", str(LAUNCHES)], "--rule", str(rule),
                     env_extra=SIZE, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0] == "pools kept 0"
    check_snapshots(ran.run_dir)


def test_on_a_device_nearly_full_the_pool_keeps_nothing_once_the_program_goes_on(
        fake, cudump_run, rule):
    """Less than a quarter of the device free: the pool gives each launch's scratch back
    before the program's synchronize returns, so that no call of the program's, whatever it
    is, finds the device short because of cudump (the drain's thread may trim here)."""
    ran = cudump_run([str(fake.programs["roomy"]), "info", str(LAUNCHES), "low"],
                     "--rule", str(rule), env_extra=SIZE)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[:2] == ["kept 0", "free unchanged"]
    check_snapshots(ran.run_dir)


def test_no_trim_while_a_stream_is_captured(fake, cudump_run, rule):
    """The program asks what is free while it captures a stream (global mode): a trim then
    would invalidate the capture, so the pool keeps its memory until the capture has ended,
    and gives it back at the program's next question."""
    ran = cudump_run([str(fake.programs["roomy"]), "capture", str(LAUNCHES)], "--rule",
                     str(rule), env_extra=MAIN_TRIMS)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[:2] == ["capture ok", "free unchanged"]
    check_snapshots(ran.run_dir)
