"""Rules and snapshots end to end on the stand-in driver: the ZED pipeline's buffers,
written as .npy and PNG, must equal the numpy reference pixel for pixel."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from records import manifest
from zedref import pipeline

ROOT = Path(__file__).resolve().parent.parent
ZED_RULE = ROOT / "rules" / "zed.yaml"
W, H = 64, 48



def test_zed_rule_snapshots_equal_the_reference(fake, cudump_run):
    ran = cudump_run([str(fake.programs["zed"]), "2", "--size", f"{W}x{H}"], "--rule",
                     str(ZED_RULE))
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    # 2 launches x args (0, 2, 3) x (before, after)
    assert len(records) == 12
    assert all(r["status"] == "ok" for r in records)
    assert {r["kernel"] for r in records} == {
        "void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4*, int, device::uchar8*, "
        "device::uchar8*, int, int, int, float)"}
    for r in records:
        frame = r["occurrence"] - 1
        uyvy, left, right = pipeline(W, H, frame)
        array = np.load(ran.run_dir / r["file"])
        assert r["dtype"] == "uint8" and list(array.shape) == r["shape"]
        png = np.asarray(Image.open(ran.run_dir / r["png"]))
        assert np.array_equal(png, array)  # the PNG shows exactly the recorded bytes
        if r["arg"] == 0:
            assert r["type"] == "uchar4*"
            assert np.array_equal(array, uyvy.reshape(H, W, 4))
        elif r["phase"] == "after":
            assert np.array_equal(array, left if r["arg"] == 2 else right)
        else:
            # Before the kernel the outputs hold the previous frame (or nothing):
            # the kernel wrote every pixel, so before and after differ.
            assert not np.array_equal(array, left if r["arg"] == 2 else right)
        assert r["file"].endswith(".npy") and "<" not in r["file"] and ":" not in r["file"]


def test_max_bytes_stops_snapshots_not_the_program(fake, cudump_run, bare_run):
    program = [str(fake.programs["zed"]), "3", "--size", f"{W}x{H}"]
    one_launch = 2 * (W * H * 4) * 3  # args 0, 2, 3 before and after
    ran = cudump_run(program, "--rule", str(ZED_RULE), "--max-bytes", str(one_launch))
    assert ran.returncode == 0
    assert ran.stdout == bare_run(program).stdout
    assert f"--max-bytes {one_launch} reached" in ran.stderr
    records = manifest(ran.run_dir)
    ok = [r for r in records if r["status"] == "ok"]
    assert {r["launch"] for r in ok} == {2} and len(ok) == 6
    # The launch that hit the budget says so for each buffer it left out; later
    # launches are not snapshotted at all.
    refused = [r for r in records if r["status"] != "ok"]
    assert {r["launch"] for r in refused} == {4} and len(refused) == 6
    assert all("--max-bytes" in r["reason"] for r in refused)


def test_max_bytes_reached_partway_through_a_launch_is_recorded(fake, cudump_run):
    """Every copy the shim makes is written; every one it does not make is recorded."""
    program = [str(fake.programs["zed"]), "3", "--size", f"{W}x{H}"]
    buffer = W * H * 4
    ran = cudump_run(program, "--rule", str(ZED_RULE), "--max-bytes", str(9 * buffer))
    assert ran.returncode == 0
    records = manifest(ran.run_dir)
    ok = [r for r in records if r["status"] == "ok"]
    assert len(ok) == 9
    for r in ok:
        assert (ran.run_dir / r["file"]).is_file()
    second = [r for r in records if r["launch"] == 4]
    assert len(second) == 6
    assert sum(r["status"] == "ok" for r in second) == 3
    assert all("--max-bytes" in r["reason"] for r in second if r["status"] != "ok")


def test_launch_filters_pick_the_nth_launches(fake, cudump_run, tmp_path):
    rule = tmp_path / "second.yaml"
    rule.write_text(
        'rules:\n  - kernel: "nv12_to_uyvy"\n    match: base\n    skip: 1\n    count: 1\n'
        '    args: [2]\n    when: after\n    format: npy\n'
        '    overrides:\n      2: {dtype: uint8, width: "arg4 * 2", height: arg5, pitch: arg3}\n')
    ran = cudump_run([str(fake.programs["zed"]), "3", "--size", f"{W}x{H}"], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    [record] = manifest(ran.run_dir)
    assert record["occurrence"] == 2 and record["png"] is None
    uyvy, _, _ = pipeline(W, H, 1)
    assert np.array_equal(np.load(ran.run_dir / record["file"]), uyvy)


@pytest.mark.parametrize("rule, taken", [
    # every third launch of any kernel: one count across fill, vecAdd and scale
    ('kernel: "*"\n    every: 3\n', [(n, None) for n in range(1, 21, 3)]),
    # vecAdd's 2nd, 4th and 6th launches (skip 1, every 2, count 3)
    ("kernel: vecAdd\n    skip: 1\n    every: 2\n    count: 3\n",
     [(None, 2), (None, 4), (None, 6)]),
])
def test_the_shim_counts_a_rules_launches_and_asks_only_about_those_it_takes(
        fake, cudump_run, tmp_path, rule, taken):
    """diverge makes 20 launches of three kernels. A rule that takes some of the launches it
    matches is counted by the shim (one count per rule, whatever kernel matched), so the
    controller is asked about the launches the rule takes and no others."""
    path = tmp_path / "some.yaml"
    path.write_text(f"rules:\n  - {rule}    args: pointers\n    when: after\n"
                    "    format: digest\n")
    ran = cudump_run([str(fake.programs["diverge"]), "5"], "--rule", str(path))
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    launches = sorted({(r["launch"], r["occurrence"]) for r in records})
    assert len(launches) == len(taken)
    for (launch, occurrence), (want_launch, want_occurrence) in zip(launches, taken,
                                                                    strict=True):
        assert want_launch is None or launch == want_launch
        assert want_occurrence is None or occurrence == want_occurrence
    assert all(r["status"] == "ok" for r in records)
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert summary["planned_launches"] == len(taken) and summary["launches"] == 20


def test_a_pointer_cudump_cannot_resolve_is_recorded_not_fatal(fake, cudump_run, tmp_path):
    # arg 1 of FrP0k is an int (the pitch), not a buffer: asking for it as a
    # pointer must give a manifest record saying why, and the run goes on.
    rule = tmp_path / "bad-arg.yaml"
    rule.write_text('rules:\n  - kernel: "device::FrP0k5607tPV*"\n    args: [1]\n'
                    '    when: before\n')
    ran = cudump_run([str(fake.programs["zed"]), "1", "--size", f"{W}x{H}"], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    [record] = manifest(ran.run_dir)
    assert record["status"] == "error" and record["file"] is None
    assert record["reason"] == "arg 1 of FrP0k5607tPV is an int, not a pointer"
    assert "cudump: warning: no snapshot of" in ran.stderr


@pytest.mark.parametrize("text, message", [
    ("rules:\n  - kernel: 'x'\n    colour: red\n",
     "bad.yaml:3: field 'colour': unknown key"),
    ("rules:\n  - kernel: 're:(unclosed'\n",
     "bad.yaml:2: field 'kernel':"),
])
def test_a_bad_rule_file_is_one_line_and_nothing_runs(fake, cudump_run, tmp_path, text, message):
    rule = tmp_path / "bad.yaml"
    rule.write_text(text)
    marker = tmp_path / "ran"
    ran = cudump_run(["/bin/sh", "-c", f"touch {marker}"], "--rule", str(rule))
    assert ran.returncode == 2
    [line] = ran.stderr.strip().splitlines()
    assert line.startswith("cudump: error: ") and message in line
    assert not marker.exists()


def test_untyped_pointers_are_recognised_by_their_allocation(fake, cudump_run, tmp_path):
    # `scale` is extern "C": no signature, so only values that fall in a
    # tracked allocation are taken as pointers (arg 0), not its float or int.
    rule = tmp_path / "scale.yaml"
    rule.write_text('rules:\n  - kernel: "scale"\n    args: pointers\n    format: npy\n')
    ran = cudump_run([str(fake.programs["linked"])], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert len(records) == 2 * 2  # two launches, before and after
    assert {r["arg"] for r in records} == {0}
    assert all(r["status"] == "ok" and r["type"] is None for r in records)
    for launch in {r["launch"] for r in records}:
        before, after = (np.load(ran.run_dir / r["file"]).view(np.float32) for r in sorted(
            (r for r in records if r["launch"] == launch), key=lambda r: r["phase"] != "before"))
        assert before.shape == after.shape and not np.array_equal(before, after)


@pytest.mark.parametrize("staging", ["4K", "10000"])
def test_buffers_larger_than_the_staging_area_are_streamed(fake, cudump_run, staging):
    """--staging tunes speed, not correctness: 12 KB images through a 4 KB staging area."""
    ran = cudump_run([str(fake.programs["zed"]), "2", "--size", f"{W}x{H}"], "--rule",
                     str(ZED_RULE), "--staging", staging)
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert len(records) == 12 and all(r["status"] == "ok" for r in records), records
    for r in records:
        uyvy, left, right = pipeline(W, H, r["occurrence"] - 1)
        array = np.load(ran.run_dir / r["file"])
        if r["phase"] == "after":
            want = {0: uyvy.reshape(array.shape), 2: left, 3: right}[r["arg"]]
            assert np.array_equal(array, want), (r["arg"], r["phase"])
    assert not list(ran.run_dir.glob(".*.part"))


@pytest.mark.parametrize(("repeats", "count", "staging"), [
    (3, 3, "5000"),   # a 16 KiB buffer through a 5000-byte staging area
    # As large as the staging area, before and after each launch: the "before" copy placed
    # whole would leave nothing for the "after" one, so both stream through a window kept
    # free for them.
    (2, 4, "16K"),
])
def test_a_linear_buffer_larger_than_staging_is_streamed_byte_exact(fake, cudump_run, tmp_path,
                                                                     repeats, count, staging):
    rules = tmp_path / "vec.yaml"
    rules.write_text(f'rules:\n  - kernel: vecAdd\n    args: [2]\n    count: {count}\n'
                     '    format: npy\n    overrides:\n      2: {dtype: float32, count: arg3}\n')
    ran = cudump_run([str(fake.programs["threads"]), str(repeats)], "--rule", str(rules),
                     "--staging", staging)
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert len(records) == 2 * count and all(r["status"] == "ok" for r in records), records
    i = np.arange(4096, dtype=np.float32)
    for r in records:
        c = np.load(ran.run_dir / r["file"])
        assert c.shape == (4096,)
        assert any(np.array_equal(c, (i + t) + k * ((i + t) % 5))
                   for t in range(8) for k in range(0, repeats + 1))


def test_pointers_resolve_among_tens_of_thousands_of_allocations(fake, cudump_run, bare_run,
                                                                 tmp_path):
    """20,000 live allocations, a third freed in a scrambled order and made again: each
    pointer of the launch resolves to exactly its allocation (snapshot = whole buffer)."""
    program = [str(fake.programs["allocs"]), "20000"]
    bare = bare_run(program)
    sizes = [int(x) for x in bare.stdout.split("\n")[0].split()[1:]]
    rule = tmp_path / "vec.yaml"
    rule.write_text('rules:\n  - kernel: vecAdd\n    when: before\n    format: npy\n')
    ran = cudump_run(program, "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare.stdout
    records = sorted(manifest(ran.run_dir), key=lambda r: r["arg"])
    assert [r["arg"] for r in records] == [0, 1, 2]
    assert [r["shape"][0] * 4 for r in records] == sizes
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert summary["allocations"] == 20000 + len(range(0, 20000, 3))


def test_args_pointers_finds_buffers_inside_by_value_structs(fake, cudump_run, tmp_path):
    """add3(std::array<float*, 3ul>, int), its three buffers pieces of one allocation: each
    pointer word inside the struct is a buffer, from the pointer to where the next of the
    launch's buffers begins in the same allocation (or to its end), recorded with its byte
    offset."""
    rule = tmp_path / "add3.yaml"
    rule.write_text('rules:\n  - kernel: add3\n    format: npy\n')
    ran = cudump_run([str(fake.programs["structs"])], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert all(r["status"] == "ok" for r in records)
    by_key = {(r.get("offset", 0), r["phase"]): r for r in records}
    assert sorted(by_key) == [(off, ph) for off in (0, 8, 16) for ph in ("after", "before")]
    n = 256
    for off, extent in ((0, "to-next-buffer"), (8, "to-next-buffer"), (16, "allocation-rest")):
        r = by_key[(off, "after")]
        assert r["arg"] == 0 and r["dtype"] == "uint8" and r["shape"] == [4 * n]
        assert r["extent"] == extent
        assert r["type"] is None  # inside a struct: no type from the signature
    out = np.load(ran.run_dir / by_key[(0, "after")]["file"]).view(np.float32)[:n]
    assert np.array_equal(out, 1.5 * np.arange(n, dtype=np.float32))
    before = np.load(ran.run_dir / by_key[(0, "before")]["file"]).view(np.float32)[:n]
    assert not before.any()
    b = np.load(ran.run_dir / by_key[(16, "before")]["file"]).view(np.float32)
    assert np.array_equal(b, 0.5 * np.arange(n, dtype=np.float32))


def vec_add_in_place(fake, cudump_run, tmp_path, mode: str, length: int, extent: str,
                     count: int) -> np.ndarray:
    """`structs MODE` with every kernel snapshotted: vecAdd(p0, p0, p0, count)'s six buffers
    are whole, `length` floats each with `extent`; returns its output's first `count`."""
    rule = tmp_path / "all.yaml"
    rule.write_text('rules:\n  - kernel: "*"\n    format: npy\n')
    ran = cudump_run([str(fake.programs["structs"]), mode], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    assert "launches add3=1 vecAdd=1" in ran.stdout
    records = [r for r in manifest(ran.run_dir) if r["kernel"].startswith("vecAdd")]
    assert sorted((r["arg"], r["phase"]) for r in records) == [
        (a, ph) for a in range(3) for ph in ("after", "before")]
    for r in records:
        assert r["status"] == "ok" and r["shape"] == [length], r
        assert r["extent"] == extent
    out = next(r for r in records if r["arg"] == 2 and r["phase"] == "after")
    return np.load(ran.run_dir / out["file"])[:count]


def test_a_buffer_ends_where_an_earlier_launch_began_another(fake, cudump_run, tmp_path):
    """vecAdd(p0, p0, p0, N) in place, after add3 passed the allocation's three pieces: its
    buffer ends where add3's second piece begins (learned from the earlier launch), not at
    the end of the allocation."""
    n = 256
    out = vec_add_in_place(fake, cudump_run, tmp_path, "pieces", n, "to-next-buffer", n)
    assert np.array_equal(out, 3.0 * np.arange(n, dtype=np.float32))


def test_a_buffer_in_memory_made_again_is_not_cut_where_a_freed_one_began(fake, cudump_run,
                                                                          tmp_path):
    """add3 passed three pieces of a mapping; it was unmapped and made again at the same
    address and size: vecAdd(p0, p0, p0, 3N) there runs to the mapping's end, not to where
    add3's second piece began in memory that is gone."""
    n, mapping = 3 * 256, (2 << 20) // 4
    out = vec_add_in_place(fake, cudump_run, tmp_path, "remade", mapping, "allocation-rest", n)
    assert np.array_equal(out, 2.0 * np.arange(n, dtype=np.float32))


def test_a_rule_that_finds_no_buffer_says_so_once(tmp_path, capsys):
    """A kernel of plain numbers: the rule matches every launch, finds nothing to copy, and
    says so once for that kernel, with how to name a buffer."""
    from cudump.controller.process import FuncInfo, LaunchEvent, ProcessState
    from cudump.policy.rules import load_rules
    from cudump.policy.snapshot.coordinator import Snapshots
    from cudump.rundir.manifest import ManifestWriter

    rule_file = tmp_path / "r.yaml"
    rule_file.write_text('rules:\n  - kernel: "count*"\n')
    snapshots = Snapshots(load_rules([rule_file]), tmp_path, None, ManifestWriter(tmp_path))
    proc = ProcessState(1, 0, "prog")
    func = FuncInfo(1, 0x1000, "_Z5countii", "count(int, int)", [(0, 4), (4, 4)])
    assert snapshots.wants(proc, func)
    for seq in (1, 2, 3):
        event = LaunchEvent(seq=seq, occurrence=seq, func_id=1, device=0, grid=(1, 1, 1),
                            block=(1, 1, 1), smem=0, stream=0, tid=1, api="cuLaunchKernel",
                            flags=0, rc=0, raw_args=[b"\x07\0\0\0", b"\x09\0\0\0"])
        assert snapshots.plan(proc, func, event, 1 << 20) is None
    snapshots.close()
    said = [ln for ln in capsys.readouterr().err.splitlines() if "finds no buffer" in ln]
    assert len(said) == 1
    assert "count(int, int)" in said[0] and "args: [N]" in said[0]


@pytest.mark.parametrize(("options", "env", "borrowed", "behind"), [
    ((), {}, 2, 2),                                # each launch borrows scratch once
    (("--staging", "4K"), {}, 2, 2),               # pieces of staging, whole behind
    (("--write-behind", "0"), {}, 2, 0),           # through staging from scratch
    (("--staging", "4K", "--write-behind", "0"), {}, 2, 0),   # in pieces
    (("--scratch", "0"), {}, 0, 0),                # off
    (("--scratch", "0", "--staging", "4K"), {}, 0, 0),   # off, in pieces of staging
    ((), {"FAKECUDA_DEVICE_MIB": "0"}, 0, 0),       # not a quarter of what is free
])
def test_launches_are_let_go_after_a_copy_into_scratch(fake, cudump_run, tmp_path, monkeypatch,
                                                       options, env, borrowed, behind):
    """A plan of plain copies is deferred: the buffers are copied device to device into
    memory borrowed on the launch stream, the launch goes on, and the shim's drain thread
    hands them over, through the write-behind area or through staging. The files are the
    same, byte for byte, whichever way they went, and the last launch's are written before
    cudump's exit completes."""
    stats = tmp_path / "stats.txt"
    monkeypatch.setenv("FAKECUDA_STATS", str(stats))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ran = cudump_run([str(fake.programs["zed"]), "2", "--size", f"{W}x{H}"], "--rule",
                     str(ZED_RULE), *options)
    assert ran.returncode == 0, ran.stderr
    # The stand-in writes its counters at exit once anything counted happened.
    counted = stats.read_text().splitlines() if stats.exists() else ["async_allocations 0"]
    assert f"async_allocations {borrowed}" in counted
    assert json.loads((ran.run_dir / "summary.json").read_text())["written_behind"] == behind
    records = manifest(ran.run_dir)
    assert len(records) == 12 and all(r["status"] == "ok" for r in records), records
    for r in records:
        uyvy, left, right = pipeline(W, H, r["occurrence"] - 1)
        array = np.load(ran.run_dir / r["file"])
        if r["arg"] == 0:
            assert np.array_equal(array, uyvy.reshape(array.shape))
        elif r["phase"] == "after":
            assert np.array_equal(array, left if r["arg"] == 2 else right)


@pytest.mark.parametrize("options", [("--scratch", "0"), ("--scratch", "0", "--staging", "4K")],
                         ids=["whole", "in-pieces"])
def test_plain_copies_from_eight_threads_see_what_each_launch_read_and_left(
        fake, cudump_run, tmp_path, options):
    """--scratch 0: no launch is let go before its copies are made; each "before" copy is
    ordered ahead of its launch and each "after" copy behind it on the launch's stream,
    while seven other threads launch on theirs (sharing the one staging area, which with
    --staging 4K holds a 16 KiB buffer only in pieces). Thread t's launch k reads
    c = (i + t) + (k - 1) * ((i + t) % 5) and leaves c = (i + t) + k * ((i + t) % 5)."""
    rules = tmp_path / "vecadd.yaml"
    rules.write_text("rules:\n  - kernel: vecAdd\n    args: [2]\n    when: both\n"
                     "    format: npy\n    overrides:\n      2: {dtype: float32, count: arg3}\n")
    repeats = 6
    stats = tmp_path / "stats.txt"
    ran = cudump_run([str(fake.programs["threads"]), str(repeats)], "--rule", str(rules),
                     *options, env_extra={"FAKECUDA_STATS": str(stats)}, timeout=120)
    assert ran.returncode == 0, ran.stderr
    counted = stats.read_text().splitlines() if stats.exists() else ["async_allocations 0"]
    assert "async_allocations 0" in counted          # nothing borrowed: the plain path
    records = manifest(ran.run_dir)
    assert len(records) == 2 * 8 * repeats and all(r["status"] == "ok" for r in records)
    i = np.arange(4096, dtype=np.float32)
    by_launch: dict[int, dict[str, np.ndarray]] = {}
    for r in records:
        by_launch.setdefault(r["launch"], {})[r["phase"]] = np.load(ran.run_dir / r["file"])
    seen: Counter[tuple[int, int]] = Counter()
    for launch, phases in by_launch.items():
        found = [(t, k) for t in range(8) for k in range(1, repeats + 1)
                 if np.array_equal(phases["before"], (i + t) + (k - 1) * ((i + t) % 5))
                 and np.array_equal(phases["after"], (i + t) + k * ((i + t) % 5))]
        assert len(found) == 1, launch
        seen[found[0]] += 1
    assert seen == Counter({(t, k): 1 for t in range(8) for k in range(1, repeats + 1)})
