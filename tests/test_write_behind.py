"""The write-behind area (shim/behind.c) on the stand-in driver: deferred launches' bytes
wait there for the controller's file writes, its bytes are reused once those are written, and
a launch it cannot hold goes through staging. The files are the reference's, byte for byte,
whichever way they went."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from records import manifest, summary
from zedref import pipeline

ROOT = Path(__file__).resolve().parent.parent
ZED_RULE = ROOT / "rules" / "zed.yaml"


def check_zed_files(run_dir: Path, width: int, height: int, frames: int) -> None:
    """Every launch's three buffers before and after it are on disk and are the
    reference's."""
    records = manifest(run_dir)
    assert len(records) == 6 * frames, records
    assert all(r["status"] == "ok" for r in records), [r.get("reason") for r in records]
    for r in records:
        uyvy, left, right = pipeline(width, height, r["occurrence"] - 1)
        array = np.load(run_dir / r["file"])
        if r["arg"] == 0:
            want = uyvy
        elif r["phase"] == "before":
            continue     # what the kernel will write over: whatever the allocation held
        else:
            want = left if r["arg"] == 2 else right
        assert np.array_equal(array, want.reshape(array.shape)), (r["arg"], r["phase"])


@pytest.mark.parametrize(("size", "area", "frames", "behind"), [
    # 6 copies of 48 KiB a launch: three launches fill the 1 MiB area, so the fourth waits
    # until the first three are written and then takes it from its start, and so on.
    ((128, 96), "1M", 8, 8),
    # 6 copies of 192 KiB: a launch larger than the whole area goes through staging.
    ((256, 192), "1M", 2, 0),
])
def test_the_area_is_used_in_turn_and_a_launch_too_large_goes_through_staging(
        fake, cudump_run, size, area, frames, behind):
    width, height = size
    ran = cudump_run([str(fake.programs["zed"]), str(frames), "--size", f"{width}x{height}"],
                     "--rule", str(ZED_RULE), "--write-behind", area)
    assert ran.returncode == 0, ran.stderr
    assert summary(ran.run_dir)["written_behind"] == behind
    check_zed_files(ran.run_dir, width, height, frames)


def test_no_area_without_rules_that_copy(fake, cudump_run):
    """Digests need no write-behind area: none is made, and nothing is written behind."""
    ran = cudump_run([str(fake.programs["zed"]), "2", "--size", "64x48"], "--digest")
    assert ran.returncode == 0, ran.stderr
    assert summary(ran.run_dir)["written_behind"] == 0


def test_the_area_is_sized_for_rules_that_copy_and_by_the_memory_available(tmp_path):
    """Only rules that copy buffers (with --scratch on) get an area; never more than a
    quarter of the memory available; MemAvailable is read from /proc/meminfo's kB."""
    from cudump.controller.host_memory import available_bytes, behind_mib
    from cudump.controller.options import RunOptions
    from cudump.policy.rules import digest_rule, load_rules

    rule = tmp_path / "r.yaml"
    rule.write_text('rules:\n  - kernel: "*"\n')
    copies = RunOptions(argv=["x"], run_dir=tmp_path, rules=load_rules([rule]))
    assert behind_mib(copies, None) == 2048
    assert behind_mib(copies, 4 << 30) == 1024
    assert behind_mib(copies, 4 << 30, reserved=2 << 30) == 512   # areas still being made
    digests = RunOptions(argv=["x"], run_dir=tmp_path, rules=[digest_rule()])
    assert behind_mib(digests, 64 << 30) == 0
    off = RunOptions(argv=["x"], run_dir=tmp_path, rules=load_rules([rule]), scratch_bytes=0)
    assert behind_mib(off, 64 << 30) == 0
    meminfo, cgroup = tmp_path / "meminfo", tmp_path / "cgroup"
    cgroup.mkdir()
    meminfo.write_text("MemTotal:       1000 kB\nMemAvailable:    2048 kB\n")
    assert available_bytes(meminfo, cgroup) == 2 << 20
    (cgroup / "memory.max").write_text("max\n")
    assert available_bytes(meminfo, cgroup) == 2 << 20
    (cgroup / "memory.max").write_text(f"{3 << 20}\n")
    (cgroup / "memory.current").write_text(f"{2 << 20}\n")
    assert available_bytes(meminfo, cgroup) == 1 << 20      # the container's room
    meminfo.write_text("MemTotal: 1000 kB\n")
    assert available_bytes(meminfo, cgroup) == 1 << 20
    assert available_bytes(tmp_path / "none", tmp_path / "none") is None
    # A cgroup's limit counts also where it is set above the process's own cgroup.
    from cudump.controller.host_memory import cgroup_room, own_cgroup
    root = tmp_path / "fs"
    (root / "job" / "step").mkdir(parents=True)
    (root / "job" / "memory.max").write_text(f"{8 << 20}\n")
    (root / "job" / "memory.current").write_text(f"{5 << 20}\n")
    (root / "job" / "step" / "memory.max").write_text("max\n")
    table = tmp_path / "self-cgroup"
    table.write_text("0::/job/step\n")
    assert own_cgroup(root, table) == root / "job" / "step"
    assert cgroup_room(root / "job" / "step", root) == 3 << 20


def test_the_area_lies_at_the_end_of_the_shared_file_and_is_allocated_on_a_thread():
    from cudump.wire import protocol as p
    from cudump.wire.shm import SharedFile

    shared = SharedFile("cudump-test", 1 << 20, behind_mib=3)
    try:
        assert shared.behind_offset % p.BEHIND_ALIGN == 0
        assert shared.behind_size == 3 << 20
        assert os.fstat(shared.fd).st_size == shared.behind_offset + shared.behind_size
        shared.behind(0, 3 << 20)[-1:] = b"\x07"
        with pytest.raises(ValueError, match="outside the write-behind area"):
            shared.behind((3 << 20) - 4, 8)
        shared.allocate_behind(os.dup(shared.fd), 1 << 20)
        control = p.CONTROL.unpack(shared._map[:p.CONTROL.size])
        assert control["behind_ready"] == 3 << 20 and control["behind_mib"] == 3
        shared.set_behind_done(5)
        assert p.CONTROL.unpack(shared._map[:p.CONTROL.size])["behind_done"] == 5
        shared.free_behind()       # its process has ended: the pages go back, zeros remain
        assert bytes(shared.behind((3 << 20) - 1, 1)) == b"\0"
        before = os.fstat(shared.fd).st_blocks
        shared.allocate_behind(os.dup(shared.fd), 1 << 20)    # and none are made again
        assert os.fstat(shared.fd).st_blocks == before
    finally:
        shared.close()


def test_an_end_without_the_places_of_its_copies_is_a_protocol_error():
    from cudump.wire import protocol as p

    end = p.END.pack(launch_rc=0, sync_rc=0, ncopies=2, reserved=0, behind=1)
    codes = b"\0" * 8
    assert p.behind_places(end + codes + (16).to_bytes(8, "little") * 2, 2) == [16, 16]
    with pytest.raises(p.ProtocolError, match="places of its copies"):
        p.behind_places(end + codes + b"\0" * 8, 2)


def test_a_launchs_files_are_written_side_by_side_and_recorded_in_the_order_they_came(tmp_path):
    """The writer writes the files of a launch written behind the program on threads of
    their own: here the first job cannot finish before the second has begun, and still the
    manifest lists them in the order they came, and the launch's bytes are released only
    once both are whole."""
    import json
    import threading

    from cudump.policy.snapshot.coordinator import Snapshots
    from cudump.policy.snapshot.writer import Release, WriteJob
    from cudump.rundir.manifest import ManifestWriter, SnapshotRecord

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    snapshots = Snapshots([], run_dir, None, ManifestWriter(run_dir))
    second_began = threading.Event()
    released: list[list[str]] = []

    def record(name: str) -> SnapshotRecord:
        return SnapshotRecord(kernel="k", mangled="k", launch=1, occurrence=1, pid=1,
                              grid=[1, 1, 1], block=[1, 1, 1], stream="0x0", arg=0, type=None,
                              phase="after", address="0x0", dtype="float32", shape=[4],
                              file=name)

    def first() -> np.ndarray:
        assert second_began.wait(60), "the second file was not begun beside the first"
        return np.full(4, 1, dtype=np.float32)

    def second() -> np.ndarray:
        second_began.set()
        return np.full(4, 2, dtype=np.float32)

    for name, make in (("a.npy", first), ("b.npy", second)):
        # The array is made by its target, on the thread that writes it.
        snapshots.writer.put(WriteJob(record(name), None, frozenset({"npy"}), None,
                                      target=make, behind=True))
    snapshots.writer.put(Release(lambda: released.append(sorted(p.name for p in run_dir.glob(
        "*.npy")))))
    snapshots.close()
    snapshots.state.manifest.close()
    lines = [json.loads(x) for x in (run_dir / "manifest.jsonl").read_text().splitlines()]
    assert [(r["file"], r["status"]) for r in lines] == [("a.npy", "ok"), ("b.npy", "ok")]
    assert released == [["a.npy", "b.npy"]]
    assert np.load(run_dir / "a.npy")[0] == 1 and np.load(run_dir / "b.npy")[0] == 2
