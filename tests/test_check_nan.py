"""--check-nan: the launch that first leaves NaN/Inf in a buffer, found by cudump's scan
kernel on the stand-in driver, reported, and its buffers snapshotted as it left them."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from pair_kernel import PAIR_ALLOC, PAIR_FUNC, kept_pair_plan, pair_launch, scanning
from records import manifest, nan_lines, summary

from cudump.errors import RuleError
from cudump.kernels.geometry import CopyPlan
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.policy.rules import SCAN_FORMATS, capture_rule, load_rules, option_rule
from cudump.policy.snapshot import state as snapshot_state
from cudump.policy.snapshot.buffers import tool_of
from cudump.policy.snapshot.coordinator import Snapshots
from cudump.policy.snapshot.results import SLOT
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord
from cudump.wire import protocol as p

INDEX = 37



def test_the_producer_among_many_launches(fake, cudump_run):
    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23"], "--check-nan")
    assert_producer_23_found(ran)


def test_a_device_with_a_watchdog_is_never_held(fake, cudump_run):
    """On a GPU whose driver ends kernels that run for long (a display's watchdog), a held
    stream would end cudump's kernel, and the program's context with it: there the shim waits
    for the scans itself, and finds the same producer, snapshotted as it left its buffers.
    (The stand-in aborts the program if cudump's kernel holds a stream on such a device.)"""
    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23"], "--check-nan",
                     env_extra={"FAKECUDA_WATCHDOG": "1"})
    assert_producer_23_found(ran)


def assert_producer_23_found(ran) -> None:
    """The nans program's producer (occurrence 23) reported once, its buffers as it left them."""
    assert ran.returncode == 0, ran.stderr
    assert "launches vecAdd=40" in ran.stdout
    records = manifest(ran.run_dir)
    producers = [r for r in records if "nonfinite" in r]
    assert len(producers) == 1
    (found,) = producers
    assert (found["occurrence"], found["arg"], found["phase"]) == (23, 2, "after")
    assert (found["nonfinite"], found["first_nonfinite"], found["nonfinite_before"],
            found["elements"]) == (1, INDEX, 0, 1024)
    assert found["kernel"] == "vecAdd(float const*, float const*, float*, int)"
    # Its inputs a and b held +inf and -inf, copied there by the host: it propagated them,
    # and the host's copies made them (each the latest copy into its buffer, before it).
    assert (found["origin"], found["from_arg"], found["from_launch"], found["from_args"]) == (
        "propagated", 0, None, [0, 1])
    assert {k: v for k, v in found["from_host"].items() if k != "address"} == {
        "kind": "copy", "api": "cuMemcpyHtoD", "bytes": 4096, "before_launch": 23}
    copy = "a host-to-device copy of 4096 bytes (cuMemcpyHtoD) before launch 23"
    warning = nan_lines(ran.stderr)
    assert warning == [
        f"cudump: NaN/Inf: launch 23 of {found['kernel']} (occurrence 23, process "
        f"{found['pid']}) left 1 of 1024 elements of arg 2 non-finite where there were none, "
        f"the first at index {INDEX}; propagated: arg 0 (from {copy}) and arg 1 (from {copy}) "
        "were already non-finite"]
    # every buffer of that launch, as it left them
    snaps = {r["arg"]: r for r in records if r.get("file")}
    assert sorted(snaps) == [0, 1, 2]
    # The two copies are the producers, a's the first (it was made first).
    assert found["from_host"]["address"] == int(snaps[0]["address"], 16)
    assert ran.stderr.splitlines()[-1].endswith(
        f"1 NaN/Inf report, 2 host writes that left NaN/Inf (first produced by a "
        f"host-to-device copy of 4096 bytes at "
        f"{snaps[0]['address']} before launch 23 of process {found['pid']}); run: "
        f"{ran.run_dir}")
    totals = summary(ran.run_dir)
    assert (totals["nan_producers"], totals["nan_produced"]) == (3, 2)
    assert totals["first_nan_producer"] == {
        "kind": "copy", "pid": found["pid"], "before_launch": 23, "api": "cuMemcpyHtoD",
        "address": int(snaps[0]["address"], 16), "bytes": 4096}
    assert totals["first_nan_report"]["launch"] == 23
    assert all(r["occurrence"] == 23 and r["phase"] == "after" and r["nan_producer"]
               for r in snaps.values())
    a, b, c = (np.load(ran.run_dir / snaps[i]["file"]) for i in range(3))
    assert np.isposinf(a[INDEX]) and np.isneginf(b[INDEX]) and np.isnan(c[INDEX])
    assert np.isfinite(np.delete(c, INDEX)).all()
    assert np.array_equal(np.delete(c, INDEX), np.delete(a, INDEX) + np.delete(b, INDEX))


def test_ls_and_show_present_the_report_as_a_finding(fake, cudump_run, capsys):
    """The producer's record is the run's finding, not a failed snapshot: `ls` shows what the
    scan found and counts it as a report, `show` prints it (and where its data is), status 0."""
    from cudump.cli import main

    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    report = next(i for i, r in enumerate(records) if "nonfinite" in r)
    assert main(["ls", str(ran.run_dir)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.split()[:1] == [str(report)])
    assert row.endswith(f"NaN/Inf: 1 of 1024 elements, first at {INDEX}, propagated from arg 0 "
                        "(host copy before launch 23)")
    assert "error" not in out and "unreadable" not in out
    assert out.splitlines()[-1] == "4 of 4 records: 3 snapshots, 1 NaN/Inf report"
    assert main(["show", str(ran.run_dir), "--index", str(report)]) == 0
    out = capsys.readouterr().out.splitlines()
    data = next(i for i, r in enumerate(records) if r.get("file") and r["arg"] == 2)
    assert out[3:] == [
        f"NaN/Inf: 1 of 1024 elements, first at {INDEX} (none before the launch): float32 "
        "[1024], as the launch left it",
        "propagated: arg 0 was already non-finite before the launch (from a host-to-device "
        "copy of 4096 bytes (cuMemcpyHtoD) before launch 23)",
        f"its data: snapshot #{data} ({records[data]['file']}): cudump show {ran.run_dir} "
        f"--index {data}"]


@pytest.mark.parametrize("launches", [5, 6])
def test_the_producer_is_snapshotted_when_no_launch_follows_it(fake, cudump_run, launches):
    """The program goes on without waiting for the scans: the GPU holds the stream after the
    producer until cudump has copied its buffers. Here nothing of the program's comes after it
    on that stream (5: it exits; 6: one more launch, which cudump's kernel must wait behind,
    and a copy)."""
    ran = cudump_run([str(fake.programs["nans"]), str(launches), str(INDEX), "5"],
                     "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert f"launches vecAdd={launches}" in ran.stdout
    records = manifest(ran.run_dir)
    assert [r["occurrence"] for r in records if "nonfinite" in r] == [5]
    snaps = {r["arg"]: r for r in records if r.get("file")}
    assert sorted(snaps) == [0, 1, 2]
    c = np.load(ran.run_dir / snaps[2]["file"])
    assert np.isnan(c[INDEX]) and np.isfinite(np.delete(c, INDEX)).all()


@pytest.mark.parametrize("launches", [1, 3])
def test_the_first_launch_asked_about_is_found_as_a_producer(fake, cudump_run, launches):
    """The first launch of a kernel is asked about, and then made with the plan it got, as the
    launches after it are: its scans come back through the ring, nobody waits for them, and
    when one finds a NaN the GPU holds the stream for cudump as for any other launch."""
    ran = cudump_run([str(fake.programs["nans"]), str(launches), str(INDEX), "1"],
                     "--check-nan")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    reports = [r for r in records if "nonfinite" in r]
    # (Once in a full CPU suite run, with one launch, no report was recorded: what cudump
    # said and recorded is shown should it happen again.)
    assert len(reports) == 1, (ran.stderr, records)
    (found,) = reports
    assert (found["launch"], found["arg"], found["first_nonfinite"]) == (1, 2, INDEX)
    snaps = {r["arg"]: r for r in records if r.get("file")}
    # (What cudump said and recorded, should a snapshot be missing: each one not taken has
    # its record, with the reason.)
    assert sorted(snaps) == [0, 1, 2] and all(r["launch"] == 1 for r in snaps.values()), (
        ran.stderr, records)
    c = np.load(ran.run_dir / snaps[2]["file"])
    assert np.isnan(c[INDEX]) and np.isfinite(np.delete(c, INDEX)).all()
    totals = summary(ran.run_dir)
    assert (totals["planned_launches"], totals["repeated_launches"]) == (1, launches - 1)


def test_a_hold_let_go_before_it_was_served_is_said_and_recorded(fake, cudump_run):
    """cudump's kernel lets the stream go by itself when the shim does not serve the hold in
    time (here: at once). The program goes on; the producer is still reported from its
    scans, with what its inputs came from, and each snapshot it would have had is recorded
    as not taken, with the reason, and said."""
    ran = cudump_run([str(fake.programs["nans"]), "3", str(INDEX), "1"], "--check-nan",
                     env_extra={"FAKECUDA_TOOLS_HOLD_NS": "0"})
    assert ran.returncode == 0, ran.stderr
    assert "launches vecAdd=3" in ran.stdout
    records = manifest(ran.run_dir)
    (found,) = [r for r in records if "nonfinite" in r]
    assert (found["launch"], found["arg"], found["from_host"]["before_launch"]) == (1, 2, 1)
    lost = [r for r in records if r.get("nan_producer") and "nonfinite" not in r]
    assert sorted(r["arg"] for r in lost) == [0, 1, 2]
    assert all(r["status"] == "error" and r["file"] is None and r["launch"] == 1
               and "could not be served in time, so cudump let the stream go" in r["reason"]
               for r in lost)
    said = [line for line in ran.stderr.splitlines() if "no snapshot of vecAdd" in line]
    assert len(said) == 3 and all("so cudump let the stream go" in x for x in said)
    assert "3 failed" in ran.stderr


def test_every_producer_is_reported_the_first_snapshotted(fake, cudump_run):
    ran = cudump_run([str(fake.programs["nans"]), "30", "5", "4", "17"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert [r["occurrence"] for r in records if "nonfinite" in r] == [4, 17]
    assert {r["occurrence"] for r in records if r.get("file")} == {4}


def test_no_nan_no_records(fake, cudump_run):
    ran = cudump_run([str(fake.programs["nans"]), "10", "5"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert not (ran.run_dir / "manifest.jsonl").exists() or not manifest(ran.run_dir)
    assert "NaN" not in ran.stderr


def test_check_nan_rule_format(tmp_path):
    rule = tmp_path / "r.yaml"
    rule.write_text("- kernel: vecAdd\n  format: check-nan\n")
    (loaded,) = load_rules([rule])
    assert loaded.is_scan and not loaded.is_digest
    rule.write_text("- kernel: vecAdd\n  format: [npy, check-nan]\n")
    with pytest.raises(RuleError, match="check-nan stands alone"):
        load_rules([rule])


def test_break_on_nan_stops_after_the_producer_and_carries_on(fake, cudump_run, bare_run,
                                                                tmp_path):
    program = [str(fake.programs["nans"]), "40", str(INDEX), "23"]
    commands = tmp_path / "commands.txt"
    commands.write_text(f"x/1f arg2+{4 * INDEX}\np arg3\ncontinue\n")
    ran = cudump_run(program, "--break-on-nan", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    lines = ran.stderr.splitlines()
    kernel = "vecAdd(float const*, float const*, float*, int)"
    stop = lines.index(f"NaN/Inf in arg 2: 1 of 1024 elements, the first at index {INDEX}, "
                       f"after launch 23 (occurrence 23) of {kernel}")
    assert lines[stop - 1].startswith("cudump: NaN/Inf: launch 23 of ")
    value = lines[lines.index(f"(cudump) x/1f arg2+{4 * INDEX}") + 1]
    assert value.endswith(":  nan") or value.endswith(":  inf"), value
    assert lines[lines.index("(cudump) p arg3") + 1] == "arg3 = 1024"
    assert "Continuing." in lines
    assert sum(1 for ln in lines if ln.startswith("NaN/Inf in arg")) == 1
    # the producer's buffers, as it left them, are on disk as with --check-nan alone
    records = manifest(ran.run_dir)
    assert sorted((r["arg"], r["phase"]) for r in records if "file" in r and r["file"]) == [
        (0, "after"), (1, "after"), (2, "after")]


def _plan(address: int, nbytes: int) -> CopyPlan:
    return CopyPlan(arg=0, address=address, width_bytes=nbytes, height=1, pitch=nbytes,
                    dtype="uint8", shape=(nbytes,), type_text=None)


def test_a_word_not_aligned_to_the_type_the_name_mentions_is_not_scanned():
    """Untyped pointer words of a kernel whose name mentions one float type are scanned as
    that type, unless the address is not aligned to it: then it is another buffer of the
    kernel (a mask, an index array), not one of that type, and nothing is scanned. Before,
    each such launch recorded a failure and was asked about anew."""
    rule = option_rule("--check-nan", SCAN_FORMATS)
    func = FuncInfo(1, 0, "_Z1kv", "void k<float>(std::array<char*, 2ul>)", None)
    assert tool_of(rule, _plan(0x1000, 64), func) == p.ToolMode.SCAN_F32
    assert tool_of(rule, _plan(0x1002, 64), func) is None
    half = FuncInfo(2, 0, "_Z1hv", "void k<c10::Half>(std::array<char*, 2ul>)", None)
    assert tool_of(rule, _plan(0x1002, 64), half) == p.ToolMode.SCAN_F16


def test_failures_are_counted_per_thread(tmp_path):
    """A launch is repeatable only if planning it recorded no failure; failures another
    thread records meanwhile (the result drain's) do not count against it."""
    snap = Snapshots([], tmp_path, None, ManifestWriter(tmp_path))
    try:
        def record() -> SnapshotRecord:
            return SnapshotRecord(kernel="k", mangled="k", launch=1, occurrence=1, pid=1,
                                  grid=[1, 1, 1], block=[1, 1, 1], stream="0x0", arg=0,
                                  type=None, phase="after", address="0x0", dtype=None,
                                  shape=None, file=None)
        before = snap.thread_failures()
        worker = threading.Thread(target=snap.failures.fail, args=(record(), "elsewhere"))
        worker.start()
        worker.join()
        assert snap.state.tally.failed == 1 and snap.thread_failures() == before
        snap.failures.fail(record(), "here")
        assert snap.state.tally.failed == 2 and snap.thread_failures() == before + 1
    finally:
        snap.close()


# A kernel whose two buffers come in a by-value struct, both in one allocation.
def test_a_buffer_shorter_than_one_element_is_not_scanned(tmp_path):
    """A buffer that ends, 2 bytes in, where a launch before passed another (a byte buffer):
    shorter than one float, so it is not scanned. An empty scan would make the shim refuse
    the whole plan, and ask about the launch again every time."""
    snapshots = scanning(tmp_path)
    try:
        proc = ProcessState(1, 0, "prog")
        assert snapshots.wants(proc, PAIR_FUNC)
        planned = [snapshots.plan(proc, PAIR_FUNC, pair_launch(seq, first, 0x10100), 1 << 20)
                   for seq, first in ((1, 0x10002), (2, 0x10000))]
        for launch in planned:   # the first's word at 0x10002 is not aligned to a float
            assert launch is not None
            assert [(c.record.extra.get("offset", 0), c.phase) for c in launch.copies] == [
                (8, "before"), (8, "after")]
            assert all(c.plan.nbytes > 0 for c in launch.copies)
    finally:
        snapshots.close()


def test_a_repeated_plans_later_launches_are_reported_with_records_of_their_own(tmp_path):
    """A launch made with a kept plan whose scan finds something is reported from the
    plan's template with records made afresh: filling in the first launch's records (its
    results) does not change what later launches are reported with."""
    snapshots = scanning(tmp_path)
    try:
        proc, planned, repeat = kept_pair_plan(snapshots)
        for copy in planned.copies:
            copy.record.extra["nonfinite"] = 3
            copy.record.status = "error"
        # Launch 7, made by the shim with the plan: the scan after it of the buffer at byte
        # 8 finds one non-finite value, at index 5.
        slots = np.zeros(1, dtype=SLOT)
        slots["plan"], slots["ncopies"] = repeat.plan_id, 4
        for name, value in (("seq", 7), ("occurrence", 7), ("grid", (2, 1, 1)),
                            ("block", (32, 1, 1)), ("device", 0), ("stream", 0x50)):
            slots["event"][name] = value
        slots["results"][0, 3]["words"] = (1, ~5 & (1 << 64) - 1)
        snapshots.repeat_report(proc, slots[0])
    finally:
        snapshots.close()
    found = [r for r in manifest(tmp_path) if r.get("nan_producer") and r["phase"] == "after"
             and "nonfinite" in r]
    assert [(r["launch"], r["occurrence"], r["grid"], r["block"], r["stream"], r["status"],
             r["offset"], r["nonfinite"], r["first_nonfinite"]) for r in found] == [
        (7, 7, [2, 1, 1], [32, 1, 1], "0x50", "ok", 8, 1, 5)]


def test_a_launch_asked_about_again_is_planned_from_where_its_buffers_are_now(tmp_path):
    """What is read of a buffer is kept from one launch of a kernel to the next (a launch
    of a hundred tensors asked about again because a few moved plans only those), but only
    for the same pointer in the same allocation with the same next known buffer: a buffer
    that begins inside another later cuts it short, in later launches too."""
    snapshots = scanning(tmp_path)
    try:
        proc = ProcessState(1, 0, "prog")
        assert snapshots.wants(proc, PAIR_FUNC)
        seen = []
        for seq, first, second in ((1, 0x10000, 0x10800), (2, 0x10000, 0x10400),
                                   (3, 0x10000, 0x10800), (4, 0x10000, 0x10800)):
            planned = snapshots.plan(proc, PAIR_FUNC, pair_launch(seq, first, second), 1 << 20)
            assert planned is not None
            seen.append([(c.record.extra.get("offset", 0), c.plan.address, c.plan.nbytes,
                          c.record.extra["extent"], c.record.launch)
                         for c in planned.copies if c.phase == "after"])
        assert seen == [
            [(0, 0x10000, 0x800, "to-next-buffer", 1), (8, 0x10800, 0x800, "allocation-rest", 1)],
            [(0, 0x10000, 0x400, "to-next-buffer", 2), (8, 0x10400, 0x400, "to-next-buffer", 2)],
            [(0, 0x10000, 0x400, "to-next-buffer", 3), (8, 0x10800, 0x800, "allocation-rest", 3)],
            [(0, 0x10000, 0x400, "to-next-buffer", 4), (8, 0x10800, 0x800, "allocation-rest", 4)]]
    finally:
        snapshots.close()


def test_a_by_value_argument_named_by_a_rule_is_an_error_of_its_own(tmp_path):
    """A rule naming a by-value struct (no pointer value of its own, though its first word
    points into a tracked allocation) gets one error record for it; the launch's other
    arguments are still planned."""
    (tmp_path / "r.yaml").write_text("- kernel: k\n  args: [0, 1]\n")
    func = FuncInfo(1, 0x1000, "_Z1kv", "void k<float>(std::array<char*, 2ul>, float*)",
                    [(0, 16), (16, 8)])
    words = (0x10000).to_bytes(8, "little") + (0x10800).to_bytes(8, "little")
    event = LaunchEvent(seq=1, occurrence=1, func_id=1, device=0, grid=(1, 1, 1),
                        block=(1, 1, 1), smem=0, stream=0, tid=1, api="cuLaunchKernel",
                        flags=0, rc=0, raw_args=[words, (0x10400).to_bytes(8, "little")],
                        pointers={(0, 0): PAIR_ALLOC, (0, 8): PAIR_ALLOC, (1, 0): PAIR_ALLOC})
    out = tmp_path / "out"
    out.mkdir()
    snapshots = Snapshots(load_rules([tmp_path / "r.yaml"]), out, None, ManifestWriter(out))
    try:
        proc = ProcessState(1, 0, "prog")
        assert snapshots.wants(proc, func)
        planned = snapshots.plan(proc, func, event, 1 << 20)
        assert planned is not None
        assert [(c.plan.arg, c.phase) for c in planned.copies] == [(1, "before"), (1, "after")]
    finally:
        snapshots.close()
    errors = [r for r in manifest(out) if r["status"] == "error"]
    assert [(r["arg"], r["phase"], r["reason"]) for r in errors] == [
        (0, phase, "argument 0 has no pointer value") for phase in ("before", "after")]


def test_a_nan_producers_snapshots_are_named_apart_from_a_capture_of_the_same_launch(tmp_path):
    """--check-nan with --capture-launch: the capture snapshots the buffer after the launch,
    and so do the copies that follow a NaN producer; each gets a file of its own."""
    func = FuncInfo(1, 0x1000, "_Z1kPf", "k(float*)", [(0, 8)])
    snapshots = Snapshots([option_rule("--check-nan", SCAN_FORMATS), capture_rule("*")],
                            tmp_path, None, ManifestWriter(tmp_path))
    try:
        proc = ProcessState(1, 0, "prog")
        assert snapshots.wants(proc, func)
        event = LaunchEvent(seq=1, occurrence=1, func_id=1, device=0, grid=(1, 1, 1),
                            block=(1, 1, 1), smem=0, stream=0, tid=1, api="cuLaunchKernel",
                            flags=0, rc=0, raw_args=[(0x10000).to_bytes(8, "little")],
                            pointers={(0, 0): PAIR_ALLOC})
        planned = snapshots.plan(proc, func, event, 1 << 20)
        assert planned is not None
        staging = bytearray(1 << 20)
        for copy in planned.copies:   # the scan after the launch finds one NaN, at index 5
            if copy.tool is not None and copy.phase == "after":
                staging[copy.offset:copy.offset + 16] = (1).to_bytes(8, "little") + (
                    ~5 & (1 << 64) - 1).to_bytes(8, "little")
        follow = snapshots.collect(proc, 1, 0, 0, [0] * len(planned.entries),
                                   lambda offset, n: memoryview(staging)[offset:offset + n])
        assert follow is not None
        files = [c.record.file for c in planned.copies + follow.copies if c.record.file]
        assert len(files) == 3 and len(set(files)) == 3, files
    finally:
        snapshots.close()


def test_what_is_kept_of_buffers_is_bounded_per_process(tmp_path, monkeypatch):
    """The buffers kept for launches asked about again are forgotten, every kernel's at
    once, when a process has kept MAX_KNOWN_BUFFERS; plans made after are the same."""
    monkeypatch.setattr(snapshot_state, "MAX_KNOWN_BUFFERS", 3)
    snapshots = scanning(tmp_path)
    try:
        proc = ProcessState(1, 0, "prog")
        assert snapshots.wants(proc, PAIR_FUNC)
        for seq in range(1, 6):
            second = 0x10800 + 0x40 * seq
            planned = snapshots.plan(proc, PAIR_FUNC, pair_launch(seq, 0x10000, second), 1 << 20)
            assert planned is not None
            assert [c.plan.address for c in planned.copies if c.phase == "after"] == [
                0x10000, second]
            kept = snapshots.state.proc(proc.pid)
            assert kept.known_buffers == sum(len(fr.buffers) for fr in kept.rules.values()) <= 3
    finally:
        snapshots.close()


@pytest.mark.parametrize("get", ["module", "kernel"])
def test_a_function_loaded_while_a_launch_is_held_does_not_hang(fake, cudump_run, get):
    """vecAdd leaves a NaN, so cudump's kernel holds the stream after it; the program then
    gets another kernel for the first time, which the driver loads lazily, waiting for the
    context inside the driver (the stand-in does so with FAKECUDA_LAZY_LOAD=1), where the
    copies that serve the hold would wait too. The get waits for the hold to be served
    first: the producer is snapshotted and the program finishes (before, it hung until the
    stand-in gave up)."""
    ran = cudump_run([str(fake.programs["lazy"]), str(INDEX), get], "--check-nan",
                     env_extra={"FAKECUDA_LAZY_LOAD": "1"})
    assert ran.returncode == 0, ran.stderr
    assert "launches vecAdd=1 square=1" in ran.stdout
    records = manifest(ran.run_dir)
    found = [r for r in records if "nonfinite" in r]
    assert (found[0]["launch"], found[0]["arg"], found[0]["first_nonfinite"]) == (1, 2, INDEX)
    snaps = {r["arg"]: r for r in records if r.get("file") and r["launch"] == 1}
    assert sorted(snaps) == [0, 1, 2]
    assert np.isnan(np.load(ran.run_dir / snaps[2]["file"])[INDEX])
