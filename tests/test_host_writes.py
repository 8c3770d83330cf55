"""NaN/Inf written by the host (--check-nan): host-to-device copies and memsets count as
producers. On the stand-in driver's `chain` program (square(x, y), then vecAdd(y, b, z),
STEPS times), the host writes into y between the two launches of a step: vecAdd then carries
on what the host wrote, and the report and the summary name that write."""

from __future__ import annotations

import numpy as np
import pytest
from records import manifest, nan_lines, summary

from cudump.cli import main
from cudump.launches.process import ProcessState
from cudump.policy.snapshot.hostwrites import SLOT, HostWriteDrain, nonfinite_pattern, writes_of
from cudump.policy.snapshot.nan import NanWatch
from cudump.policy.snapshot.nanreport import NanReporter
from cudump.policy.snapshot.origin import HostWrite, Maker, Makers, Origin, order
from cudump.policy.snapshot.state import SnapshotState
from cudump.rundir.manifest import ManifestWriter
from cudump.rundir.runs import NanReport
from cudump.rundir.summary import NanHostWrite, NanLaunch, RunSummary
from cudump.wire import protocol as p
from cudump.wire.shm import SharedFile

INDEX = 37
ADD = "vecAdd(float const*, float const*, float*, int)"


def chain(fake, *host: str, steps: int = 8) -> list[str]:
    return [str(fake.programs["chain"]), str(steps), str(INDEX), *host]


def y_address(run_dir) -> int:
    """Where y[INDEX] is: vecAdd's arg 0, as its snapshot after the report names it."""
    (y,) = [r for r in manifest(run_dir) if r.get("file") and r["arg"] == 0]
    return int(y["address"], 16) + 4 * INDEX


def propagated(pid: int, step: int, source: str, count: int = 1) -> str:
    return (f"cudump: NaN/Inf: launch {2 * step} of {ADD} (occurrence {step}, process {pid}) "
            f"left {count} of 1024 elements of arg 2 non-finite where there were none, the "
            f"first at index {INDEX}; propagated: arg 0 was already non-finite (from {source})")


@pytest.mark.parametrize("watchdog", [False, True])
def test_an_asynchronous_copy_of_a_nan_is_the_first_producer(fake, cudump_run, watchdog):
    """Step 7 copies one NaN into y with cuMemcpyHtoDAsync after square's launch 13: vecAdd's
    launch 14 carries it on, from that copy, and the copy is the run's first producer. The
    square's scan after launch 13 found y finite: the copy, made after it, stays known (on a
    device with a watchdog the shim waits for the scans itself: the same)."""
    env = {"FAKECUDA_WATCHDOG": "1"} if watchdog else None
    ran = cudump_run(chain(fake, "a7"), "--check-nan", env_extra=env)
    assert ran.returncode == 0, ran.stderr
    assert "launches square=8 vecAdd=8" in ran.stdout
    (report,) = [r for r in manifest(ran.run_dir) if "nonfinite" in r]
    pid, at = report["pid"], y_address(ran.run_dir)
    assert nan_lines(ran.stderr) == [propagated(
        pid, 7, "a host-to-device copy of 4 bytes (cuMemcpyHtoDAsync) before launch 14")]
    assert (report["launch"], report["origin"], report["from_arg"], report["from_launch"]) == (
        14, "propagated", 0, None)
    assert report["from_host"] == {"kind": "copy", "api": "cuMemcpyHtoDAsync", "bytes": 4,
                                   "address": at, "before_launch": 14}
    assert ran.stderr.splitlines()[-1].endswith(
        f"1 NaN/Inf report, 1 host write that left NaN/Inf (first produced by a "
        f"host-to-device copy of 4 bytes at "
        f"{at:#x} before launch 14 of process {pid}); run: {ran.run_dir}")
    totals = summary(ran.run_dir)
    assert totals["first_nan_producer"] == {"kind": "copy", "pid": pid, "before_launch": 14,
                                            "api": "cuMemcpyHtoDAsync", "address": at,
                                            "bytes": 4}
    assert totals["first_nan_report"] == {"kind": "launch", "pid": pid, "launch": 14,
                                          "kernel": ADD}
    assert (totals["nan_producers"], totals["nan_produced"]) == (2, 1)
    # Two memsets and a copy before the loop, x's copy every step, and the NaN's.
    assert totals["host_writes"] == 2 + 1 + 8 + 1


def test_a_2d_copy_from_the_host_is_named(fake, cudump_run):
    ran = cudump_run(chain(fake, "p3"), "--check-nan")
    assert ran.returncode == 0, ran.stderr
    pid = manifest(ran.run_dir)[0]["pid"]
    assert nan_lines(ran.stderr) == [propagated(
        pid, 3, "a host-to-device copy of 4 bytes (cuMemcpy2D) before launch 6")]
    assert summary(ran.run_dir)["first_nan_producer"]["address"] == y_address(ran.run_dir)


def test_a_memset_with_a_nan_pattern_is_reported_when_it_happens(fake, cudump_run):
    """cuMemsetD32Async of 0x7fc00000 (NaN as float32) over 16 of y's elements at step 5:
    a producer, reported on its own line before vecAdd's, which carries it on."""
    ran = cudump_run(chain(fake, "m5"), "--check-nan")
    assert ran.returncode == 0, ran.stderr
    pid = manifest(ran.run_dir)[0]["pid"]
    at = y_address(ran.run_dir)
    assert nan_lines(ran.stderr) == [
        f"cudump: NaN/Inf: cuMemsetD32Async before launch 10 (process {pid}) wrote 16 "
        f"elements of 0x7fc00000 (NaN as float32) at {at:#x}",
        propagated(pid, 5, "a memset of 64 bytes (cuMemsetD32Async) before launch 10", 16)]
    totals = summary(ran.run_dir)
    assert (totals["nan_producers"], totals["nan_produced"]) == (2, 1)
    assert totals["first_nan_producer"] == {"kind": "memset", "pid": pid, "before_launch": 10,
                                            "api": "cuMemsetD32Async", "address": at,
                                            "bytes": 64}
    assert ran.stderr.splitlines()[-1].endswith(
        f"(first produced by a memset of 64 bytes at {at:#x} before launch 10 of process "
        f"{pid}); run: {ran.run_dir}")


def test_a_16_bit_memset_is_a_producer_only_as_both_halves(fake, cudump_run):
    ran = cudump_run(chain(fake, "g5"), "--check-nan")
    assert ran.returncode == 0, ran.stderr
    pid = manifest(ran.run_dir)[0]["pid"]
    assert nan_lines(ran.stderr)[0] == (
        f"cudump: NaN/Inf: cuMemsetD16Async before launch 10 (process {pid}) wrote 32 "
        f"elements of 0x7fc0 (NaN as float16 and as bfloat16) at {y_address(ran.run_dir):#x}")


def test_a_memset_with_a_finite_pattern_reports_nothing(fake, cudump_run):
    ran = cudump_run(chain(fake, "f5"), "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert nan_lines(ran.stderr) == []
    totals = summary(ran.run_dir)
    assert totals["nan_producers"] == 0 and totals["first_nan_producer"] is None
    assert totals["host_writes"] == 2 + 1 + 8 + 1


@pytest.mark.parametrize("option", ["--digest", "--trace"])
def test_without_nan_scans_no_host_write_is_recorded(fake, cudump_run, option):
    """The shim records host writes only where the controller gives it a host-write ring,
    under NaN/Inf scans: otherwise there is none, and summary.json says nothing of them."""
    ran = cudump_run(chain(fake, "a7", "m5"), option)
    assert ran.returncode == 0, ran.stderr
    assert nan_lines(ran.stderr) == []
    assert "host_writes" not in summary(ran.run_dir)


def test_break_on_nan_stops_at_the_launch_that_reads_the_host_s_nan(fake, cudump_run, bare_run,
                                                                    tmp_path):
    """The copy cannot be stopped at (it has returned when cudump hears of it): the launch
    that first reads what it wrote is where --break-on-nan stops."""
    program = chain(fake, "a7")
    commands = tmp_path / "commands.txt"
    commands.write_text("continue\n")
    ran = cudump_run(program, "--break-on-nan", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    lines = ran.stderr.splitlines()
    stops = [i for i, line in enumerate(lines) if line.startswith("NaN/Inf in arg")]
    assert [lines[i] for i in stops] == [
        f"NaN/Inf in arg 2: 1 of 1024 elements, the first at index {INDEX}, after launch 14 "
        f"(occurrence 7) of {ADD}"]
    assert lines[stops[0] - 1].endswith(
        "(from a host-to-device copy of 4 bytes (cuMemcpyHtoDAsync) before launch 14)")


def test_ls_and_show_name_the_host_write(fake, cudump_run, capsys):
    ran = cudump_run(chain(fake, "a7"), "--check-nan")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    report = next(i for i, r in enumerate(records) if "nonfinite" in r)
    assert main(["ls", str(ran.run_dir)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.split()[:1] == [str(report)])
    assert row.endswith("propagated from arg 0 (host copy before launch 14)")
    assert main(["show", str(ran.run_dir), "--index", str(report)]) == 0
    assert ("propagated: arg 0 was already non-finite before the launch (from a host-to-device "
            "copy of 4 bytes (cuMemcpyHtoDAsync) before launch 14)"
            in capsys.readouterr().out.splitlines())


# -- the parts, without a program ---------------------------------------------------------

def write(before: int, address: int, nbytes: int, position: int, elem: int = 0,
          value: int = 0, api: str = "cuMemcpyHtoDAsync") -> HostWrite:
    return HostWrite(before, api, address, address + nbytes, nbytes, position, elem, value)


def test_host_writes_and_launches_are_one_order():
    """A write made after launch L-1 (before launch L) is what launch L reads, not what
    launch L-1 did; a scan before launch L has seen it, a scan after launch L-1 has not."""
    makers = Makers()
    copy = write(5, 0x1000, 4, 0)
    makers.wrote(1, copy)
    assert makers.known(1)
    assert makers.maker(1, 0x1000, 0x2000, 5) == copy
    assert makers.maker(1, 0x1000, 0x2000, 4) is None
    makers.finite(1, 0x1000, 0x2000, 4, after=True)     # launch 4's scan after it
    assert makers.maker(1, 0x1000, 0x2000, 5) == copy
    # A launch after the copy that left the range non-finite is what last wrote it.
    makers.turned(1, 0x1000, 0x2000, Maker(6, "k"))
    assert makers.maker(1, 0x1000, 0x2000, 7) == Maker(6, "k")
    assert makers.maker(1, 0x1000, 0x2000, 6) == copy
    makers.finite(1, 0x1000, 0x2000, 5)                  # launch 5's scan before it
    assert makers.maker(1, 0x1000, 0x2000, 6) is None
    assert makers.maker(1, 0x1000, 0x2000, 7) == Maker(6, "k")
    # Of two writes between the same launches, the later.
    first, second = write(9, 0x3000, 8, 1), write(9, 0x3004, 8, 2)
    makers.wrote(1, first)
    makers.wrote(1, second)
    assert makers.maker(1, 0x3000, 0x3010, 9) == second
    assert order(first) < order(second) < order(Maker(9, "k")) and order(Maker(8, "k")) < order(
        first)


def test_a_range_written_again_keeps_each_write_for_the_launches_after_it():
    """A launch's scans may be weighed after the program wrote its inputs again (its
    results come back while the program runs ahead): each launch is given the write
    before it, and zeros clear what came before them."""
    makers = Makers()
    makers.wrote(1, write(3, 0x1000, 16, 0))
    makers.wrote(1, write(7, 0x1000, 16, 4))
    assert len(makers.written[1]) == 1
    assert makers.maker(1, 0x1000, 0x1010, 10).before == 7
    assert makers.maker(1, 0x1000, 0x1010, 5).before == 3
    assert makers.maker(1, 0x1000, 0x1010, 3).before == 3
    assert makers.maker(1, 0x1000, 0x1010, 2) is None
    makers.finite(1, 0x1000, 0x1010, 5)                 # launch 5's scan before it
    assert makers.maker(1, 0x1000, 0x1010, 6) is None
    assert makers.maker(1, 0x1000, 0x1010, 10).before == 7
    makers.turned(1, 0x1000, 0x1010, Maker(8, "k"))
    zeros = write(9, 0x1000, 16, 5, elem=4, value=0, api="cuMemsetD32Async")
    makers.cleared(1, zeros)
    assert makers.maker(1, 0x1000, 0x1010, 20) is None and not makers.known(1)
    makers.wrote(1, write(3, 0x1000, 16, 6))
    makers.freed(1, 0x1000, 0x2000)
    assert not makers.known(1)


def test_host_writes_are_bounded(monkeypatch):
    import cudump.policy.snapshot.origin as origin_module
    monkeypatch.setattr(origin_module, "WRITES_PER_RANGE", 2)
    monkeypatch.setattr(origin_module, "MAX_WRITTEN", 2)
    makers = Makers()
    for k in range(4):
        makers.wrote(1, write(k + 1, 0x1000, 16, k))
    assert [w.before for w in makers.written[1][(0x1000, 0x1010)]] == [3, 4]
    makers.wrote(1, write(5, 0x2000, 16, 4))
    makers.wrote(1, write(6, 0x1000, 16, 5))     # written latest: kept longest
    makers.wrote(1, write(7, 0x3000, 16, 6))
    assert list(makers.written[1]) == [(0x1000, 0x1010), (0x3000, 0x3010)]


def test_known_takes_the_host_writes_first(tmp_path):
    """Before anything is weighed, the process's host writes up to now are taken: the NaN/Inf
    watch is made with the host-write ring's catch-up, nothing patched in later."""
    makers = Makers()
    pending = [write(2, 0x1000, 4, 0)]

    def sync(pid: int) -> None:
        for w in pending:
            makers.wrote(pid, w)
        pending.clear()

    state = SnapshotState(tmp_path, ManifestWriter(tmp_path))
    watch = NanWatch(state, lambda *a: [], lambda *a: None, makers, NanReporter(state), sync)
    assert not makers.known(1)
    assert watch.known(1) and makers.maker(1, 0x1000, 0x1004, 2) is not None


def test_an_origin_from_the_host():
    copy = write(59, 0x7F00, 4, 3)
    origin = Origin((origin_input(1, copy),))
    assert origin.is_root and origin.hosts == [copy]
    assert origin.phrase() == ("propagated: arg 1 was already non-finite (from a host-to-device "
                               "copy of 4 bytes (cuMemcpyHtoDAsync) before launch 59)")
    assert origin.fields() == {
        "origin": "propagated", "from_arg": 1, "from_launch": None,
        "from_host": {"kind": "copy", "api": "cuMemcpyHtoDAsync", "bytes": 4,
                      "address": 0x7F00, "before_launch": 59}}
    both = Origin((origin_input(0, copy), origin_input(2, Maker(11, "k"))))
    assert not both.is_root and both.source.arg == 2
    assert both.phrase() == (
        "propagated: arg 0 (from a host-to-device copy of 4 bytes (cuMemcpyHtoDAsync) before "
        "launch 59) and arg 2 (from launch 11 of k) were already non-finite")


def origin_input(arg: int, maker):
    from cudump.policy.snapshot.origin import Input
    return Input(arg, 0, maker)


@pytest.mark.parametrize(("value", "elem", "said"), [
    (0x7FC00000, 4, "NaN as float32"), (0x7F800000, 4, "Inf as float32"),
    (0xFF800000, 4, "-Inf as float32"), (0x3F800000, 4, None), (0, 4, None),
    (0x7FC0, 2, "NaN as float16 and as bfloat16"), (0xFFFF, 2, "NaN as float16 and as bfloat16"),
    (0x7F80, 2, "NaN as float16 and Inf as bfloat16"),
    (0x7E00, 2, None),     # NaN as float16, finite as bfloat16: not surely a producer
    (0x7C00, 2, None),     # Inf as float16, finite as bfloat16
    (0xFF, 1, None)])
def test_nonfinite_patterns(value, elem, said):
    assert nonfinite_pattern(value, elem) == said


def test_the_ring_slots_become_host_writes_in_order(tmp_path):
    """The drain takes published slots in order, stops at one still being written, and hands
    each batch over before the tail moves on; 2D and 3D writes span their rows and slices."""
    shared = SharedFile("test", 4096, host_slots=4)
    try:
        slots = np.frombuffer(shared.host_bytes(), dtype=SLOT)
        rows = [dict(launches=3, dst=0x1000, width=4, height=1, pitch=4, depth=1, slice=4,
                     api=p.HOST_APIS.index("cuMemcpyHtoDAsync")),
                dict(launches=3, dst=0x2000, width=16, height=3, pitch=64, depth=2, slice=256,
                     api=p.HOST_APIS.index("cuMemcpy3DAsync")),
                dict(launches=5, dst=0x4000, width=64, height=1, pitch=64, depth=1, slice=64,
                     value=0x1234567F, elem=2, api=p.HOST_APIS.index("cuMemsetD16Async"))]
        for pos, row in enumerate(rows):
            for name, v in row.items():
                slots[pos][name] = v
        slots[0]["ready"], slots[2]["ready"] = 1, 3     # the second is still being written
        head = p.CONTROL_OFFSETS["host_head"]
        shared._map[head:head + 8] = (3).to_bytes(8, "little")   # as the shim reserves
        proc = ProcessState(7, 1, "prog")
        took: list[list[HostWrite]] = []
        drain = HostWriteDrain(lambda proc_, writes: took.append(writes))
        try:
            drain._stop_thread()       # taken only here, by catch_up
            drain.add(proc, shared)
            drain.catch_up(7)
            assert [[w.address for w in batch] for batch in took] == [[0x1000]]
            slots[1]["ready"] = 2
            drain.catch_up(7)
            drain.catch_up(7)          # nothing new: nothing taken
            assert len(took) == 2 and drain.taken == 3
            spanned, memset = took[1]
            assert (spanned.before, spanned.api, spanned.end, spanned.nbytes) == (
                4, "cuMemcpy3DAsync", 0x2000 + 256 + 2 * 64 + 16, 16 * 3 * 2)
            assert (memset.kind, memset.value, memset.elements, memset.before) == (
                "memset", 0x567F, 32, 6)
            at = p.CONTROL_OFFSETS["host_tail"]
            assert int.from_bytes(shared._map[at:at + 8], "little") == 3
        finally:
            drain.close()
    finally:
        shared.close()


def test_empty_writes_are_left_out():
    slots = np.zeros(1, dtype=SLOT)
    slots["width"], slots["height"], slots["depth"] = 0, 1, 1
    assert writes_of(slots, np.arange(1, dtype=np.uint64)) == []


def test_the_summary_names_a_host_write_and_keeps_the_record_typed(tmp_path):
    import json

    first = NanHostWrite("copy", 7, 59, "cuMemcpyHtoDAsync", 0x7F00, 4, position=12)
    made = RunSummary(processes=1, pids=[7], nan_reports=1, nan_producers=2, nan_produced=1,
                      first_nan_producer=first, first_nan_report=NanLaunch(7, 59, "k"),
                      host_writes=3)
    assert made.line().endswith("1 NaN/Inf report, 1 host write that left NaN/Inf (first "
                                "produced by a host-to-device copy of 4 bytes at 0x7f00 "
                                "before launch 59 of process 7)")
    made.write(tmp_path)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["first_nan_producer"] == {"kind": "copy", "pid": 7, "before_launch": 59,
                                          "api": "cuMemcpyHtoDAsync", "address": 0x7F00,
                                          "bytes": 4}
    assert data["first_nan_report"] == {"kind": "launch", "pid": 7, "launch": 59,
                                        "kernel": "k"}
    assert data["host_writes"] == 3
    # The earlier of a process's producers is its first, whichever came to light first.
    assert first.order < NanLaunch(7, 59, "k").order and NanLaunch(7, 58, "k").order < first.order


def test_a_report_read_back_names_the_host_write():
    extra = {"nonfinite": 1, "elements": 8, "first_nonfinite": 2, "origin": "propagated",
             "from_arg": 0, "from_launch": None,
             "from_host": {"kind": "memset", "api": "cuMemsetD32Async", "bytes": 64,
                           "address": 1, "before_launch": 10}}
    report = NanReport.from_extra(extra)
    assert report is not None
    assert report.origin_short() == "propagated from arg 0 (memset before launch 10)"
    assert report.origin_text() == ("propagated: arg 0 was already non-finite before the launch "
                                    "(from a memset of 64 bytes (cuMemsetD32Async) before "
                                    "launch 10)")
    extra["from_host"] = {"kind": "copy"}     # malformed: not said
    assert NanReport.from_extra(extra).origin_text().endswith(  # type: ignore[union-attr]
        "(no launch cudump scanned left it so)")
