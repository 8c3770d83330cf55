"""Producer or propagator (--check-nan): each NaN/Inf report says whether the launch made the
NaN/Inf from finite inputs or carried on an input's, and which launch left that input
non-finite. On the stand-in driver's `chain` program, square overflows to Inf (it produces
it) and vecAdd adds it into z (it propagates it, from its arg 0)."""

from __future__ import annotations

import numpy as np
import pytest
from pair_kernel import PAIR_FUNC, kept_pair_plan, scanning
from records import manifest, nan_lines, summary

from cudump.cli import main
from cudump.policy.snapshot import origin as origin_module
from cudump.policy.snapshot.origin import Input, Maker, Makers, Origin
from cudump.policy.snapshot.results import SLOT, _Ring, _Taken
from cudump.rundir.summary import NanLaunch, RunSummary

INDEX = 37
SQUARE = "square(float const*, float*, int)"
ADD = "vecAdd(float const*, float const*, float*, int)"


def chain(fake, steps: int = 12, *overflow: int | str) -> list[str]:
    return [str(fake.programs["chain"]), str(steps), str(INDEX), *map(str, overflow)]


def expected_lines(pid: int, *steps: int) -> list[str]:
    """The reports of `chain` overflowing at `steps`: square's launch of a step is 2 k - 1,
    vecAdd's 2 k."""
    lines = []
    for k in steps:
        made, carried = 2 * k - 1, 2 * k
        lines += [
            f"cudump: NaN/Inf: launch {made} of {SQUARE} (occurrence {k}, process {pid}) "
            f"produced 1 of 1024 non-finite elements in arg 1, the first at index {INDEX}; "
            "its inputs were finite",
            f"cudump: NaN/Inf: launch {carried} of {ADD} (occurrence {k}, process {pid}) left 1 "
            f"of 1024 elements of arg 2 non-finite where there were none, the first at index "
            f"{INDEX}; propagated: arg 0 was already non-finite (from launch {made} of "
            f"{SQUARE})"]
    return lines


@pytest.mark.parametrize("watchdog", [False, True])
def test_the_producer_and_the_launch_that_carries_it_on(fake, cudump_run, watchdog):
    """Both reports of each overflowing step, the producer's first; the launches after the
    first of each kernel are made with repeated plans (their scans come back through the
    result ring, the before-scans of the other buffers in the same slot). On a device with a
    watchdog the shim waits for the scans itself: the same reports."""
    env = {"FAKECUDA_WATCHDOG": "1"} if watchdog else None
    ran = cudump_run(chain(fake, 12, 5, 9), "--check-nan", env_extra=env)
    assert ran.returncode == 0, ran.stderr
    assert "launches square=12 vecAdd=12" in ran.stdout
    records = [r for r in manifest(ran.run_dir) if "nonfinite" in r]
    pid = records[0]["pid"]
    assert nan_lines(ran.stderr) == expected_lines(pid, 5, 9)
    by_launch = {r["launch"]: r for r in records}
    assert sorted(by_launch) == [9, 10, 17, 18]
    for made in (9, 17):
        r = by_launch[made]
        assert (r["kernel"], r["arg"], r["origin"]) == (SQUARE, 1, "produced")
        assert "from_arg" not in r and "from_launch" not in r
        r = by_launch[made + 1]
        assert (r["kernel"], r["arg"], r["origin"], r["from_arg"], r["from_launch"],
                r["from_kernel"]) == (ADD, 2, "propagated", 0, made, SQUARE)
    assert ran.stderr.splitlines()[-1].endswith(
        f"4 NaN/Inf reports (first produced by launch 9 of {SQUARE}); run: "
        f"{ran.run_dir}")
    totals = summary(ran.run_dir)
    assert (totals["nan_producers"], totals["nan_produced"]) == (4, 2)
    assert totals["first_nan_producer"] == {"kind": "launch", "pid": pid, "launch": 9,
                                            "kernel": SQUARE}
    assert totals["first_nan_report"] == totals["first_nan_producer"]
    assert totals["planned_launches"] == 2 and totals["repeated_launches"] == 22


def test_a_buffer_finite_again_is_forgotten(fake, cudump_run):
    """Step 2 overflows (step 3 too: y and z stay non-finite, nothing new to report); from
    step 4 on y is finite again, found so by square's scans through the result ring (plain
    repeated launches). At step 7 the host copies +inf into y: vecAdd carries on what the
    host wrote, not what launch 3 made long before."""
    ran = cudump_run(chain(fake, 8, 2, 3, "h7"), "--check-nan")
    assert ran.returncode == 0, ran.stderr
    pid = manifest(ran.run_dir)[0]["pid"]
    assert nan_lines(ran.stderr) == expected_lines(pid, 2) + [
        f"cudump: NaN/Inf: launch 14 of {ADD} (occurrence 7, process {pid}) left 1 of 1024 "
        f"elements of arg 2 non-finite where there were none, the first at index {INDEX}; "
        "propagated: arg 0 was already non-finite (from a host-to-device copy of 4 bytes "
        "(cuMemcpyHtoD) before launch 14)"]
    (late,) = [r for r in manifest(ran.run_dir) if r.get("launch") == 14 and "nonfinite" in r]
    assert (late["origin"], late["from_arg"], late["from_launch"]) == ("propagated", 0, None)
    assert {k: v for k, v in late["from_host"].items() if k != "address"} == {
        "kind": "copy", "api": "cuMemcpyHtoD", "bytes": 4, "before_launch": 14}
    # The first producer is still square, at launch 3: the host's write came after it.
    assert summary(ran.run_dir)["first_nan_producer"]["launch"] == 3


def test_break_on_nan_stops_at_the_producer_not_the_propagator(fake, cudump_run, bare_run,
                                                                 tmp_path):
    program = chain(fake, 12, 5, 9)
    commands = tmp_path / "commands.txt"
    commands.write_text(f"x/1f arg1+{4 * INDEX}\ncontinue\n")
    ran = cudump_run(program, "--break-on-nan", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    lines = ran.stderr.splitlines()
    stops = [i for i, line in enumerate(lines) if line.startswith("NaN/Inf in arg")]
    assert [lines[i] for i in stops] == [
        f"NaN/Inf in arg 1: 1 of 1024 elements, the first at index {INDEX}, after launch 9 "
        f"(occurrence 5) of {SQUARE}"]
    assert lines[stops[0] - 1].startswith("cudump: NaN/Inf: launch 9 of ")
    value = lines[lines.index(f"(cudump) x/1f arg1+{4 * INDEX}") + 1]
    assert value.endswith(":  inf"), value
    # The propagator is reported once the program goes on, and not stopped at.
    pid = manifest(ran.run_dir)[0]["pid"]
    assert nan_lines(ran.stderr) == expected_lines(pid, 5, 9)
    assert lines.index(expected_lines(pid, 5)[1]) > lines.index("Continuing.")


def test_ls_show_and_stats_tell_producers_from_propagators(fake, cudump_run, capsys):
    ran = cudump_run(chain(fake, 12, 5, 9), "--check-nan")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    reports = {r["launch"]: i for i, r in enumerate(records) if "nonfinite" in r}
    assert main(["ls", str(ran.run_dir)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert rows[str(reports[9])].endswith(f"NaN/Inf: 1 of 1024 elements, first at {INDEX}, "
                                          "produced")
    assert rows[str(reports[10])].endswith(f"NaN/Inf: 1 of 1024 elements, first at {INDEX}, "
                                           "propagated from arg 0 (launch 9)")
    assert main(["show", str(ran.run_dir), "--index", str(reports[18])]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[3:5] == [
        f"NaN/Inf: 1 of 1024 elements, first at {INDEX} (none before the launch): float32 "
        "[1024], as the launch left it",
        f"propagated: arg 0 was already non-finite before the launch (from launch 17 of "
        f"{SQUARE})"]
    assert main(["show", str(ran.run_dir), "--index", str(reports[17])]) == 0
    assert capsys.readouterr().out.splitlines()[4] == (
        "produced: the launch's inputs were finite")
    assert main(["stats", str(ran.run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-3:] == ["NaN/Inf", "produced", "propagated"]
    counts = {line.split()[0]: line.split()[-3:] for line in lines[1:3]}
    assert counts == {"square": ["2", "2", "0"], "vecAdd": ["2", "0", "2"]}


# -- the parts, without a program ---------------------------------------------------------

def test_makers_name_the_latest_launch_before_and_forget_finite_or_freed_buffers():
    makers = Makers()
    assert not makers.known(1)
    makers.turned(1, 0x1000, 0x2000, Maker(3, "a"))
    makers.turned(1, 0x1800, 0x1900, Maker(8, "b"))
    makers.turned(2, 0x1000, 0x2000, Maker(5, "other process"))
    assert makers.maker(1, 0x1000, 0x1100, 10) == Maker(3, "a")   # overlaps a only
    assert makers.maker(1, 0x1880, 0x1890, 10) == Maker(8, "b")   # the latest of both
    assert makers.maker(1, 0x1880, 0x1890, 8) == Maker(3, "a")    # only launches before
    assert makers.maker(1, 0x2000, 0x3000, 10) is None            # [start, end)
    # A scan at launch 6 found [0x1000, 0x2000) finite: launch 3's is gone, launch 8's
    # (reported later, made after it) stays.
    makers.finite(1, 0x1000, 0x2000, 6)
    assert makers.maker(1, 0x1000, 0x1100, 10) is None
    assert makers.maker(1, 0x1800, 0x1900, 10) == Maker(8, "b")
    makers.freed(1, 0x1000, 0x2000)
    assert not makers.known(1) and makers.known(2)


def test_makers_are_bounded(monkeypatch):
    monkeypatch.setattr(origin_module, "MAX_MADE", 3)
    makers = Makers()
    for k in range(5):
        makers.turned(1, 0x1000 * k, 0x1000 * k + 16, Maker(k, "k"))
    assert len(makers.made[1]) == 3
    assert makers.maker(1, 0, 16, 10) is None and makers.maker(1, 0x4000, 0x4010, 10)


def test_an_origin_in_words_and_fields():
    produced = Origin()
    assert (produced.kind, produced.is_root, produced.phrase()) == (
        "produced", True, "its inputs were finite")
    assert produced.fields() == {"origin": "produced"}
    carried = Origin((Input(0, 0, None), Input(2, 8, Maker(11, "k(float*)"))))
    assert not carried.is_root
    assert carried.phrase() == (
        "propagated: arg 0 and arg 2 (the pointer at byte 8) (from launch 11 of k(float*)) "
        "were already non-finite")
    assert carried.fields() == {"origin": "propagated", "from_arg": 2, "from_launch": 11,
                                "from_offset": 8, "from_kernel": "k(float*)",
                                "from_args": [0, 2]}
    outside = Origin((Input(1, 0, None),))
    assert outside.is_root and outside.fields() == {"origin": "propagated", "from_arg": 1,
                                                    "from_launch": None}
    assert outside.phrase() == ("propagated: arg 1 was already non-finite (no launch cudump "
                                "scanned left it so)")


def _slot(plan_id: int, seq: int, results: dict[int, tuple[int, int]]) -> np.void:
    """A result ring slot of launch `seq` made with plan `plan_id`: copy -> (count, first)."""
    slots = np.zeros(1, dtype=SLOT)
    slots["plan"], slots["ncopies"] = plan_id, 4
    for name, value in (("seq", seq), ("occurrence", seq), ("grid", (1, 1, 1)),
                        ("block", (32, 1, 1)), ("device", 0)):
        slots["event"][name] = value
    for k, (count, first) in results.items():
        slots["results"][0, k]["words"] = (count, ~first & (1 << 64) - 1)
    return slots[0]


def test_a_repeated_launch_is_classified_from_the_before_scans_in_its_slot(tmp_path):
    """Launches made with a repeated plan come back as ring slots whose results hold every
    scan of the launch: the buffer at byte 0 non-finite before launch 7 makes the report of
    the one at byte 8 a propagated one; before launch 9 every buffer was finite. Only the
    producer is kept for --break-on-nan; launch 12, which carries on launch 9's NaN/Inf, is
    not."""
    snapshots = scanning(tmp_path)
    try:
        proc, planned, repeat = kept_pair_plan(snapshots)
        # launch 7: byte 0's buffer non-finite before and after, byte 8's turns non-finite
        snapshots.repeat_report(proc, _slot(repeat.plan_id, 7, {0: (2, 0), 1: (2, 0),
                                                                   3: (1, 5)}))
        # launch 9: every buffer finite before; byte 0's turns non-finite
        snapshots.repeat_report(proc, _slot(repeat.plan_id, 9, {1: (4, 3)}))
        # launch 12: byte 0's (left so by launch 9) non-finite before; byte 8's turns
        snapshots.repeat_report(proc, _slot(repeat.plan_id, 12, {0: (4, 3), 1: (4, 3),
                                                                    3: (1, 6)}))
        found = snapshots.take_nan(1, 7)
        assert found is not None and found.event.seq == 7   # from no launch: where it begins
        found = snapshots.take_nan(1, 9)
        assert found is not None and found.reason == (
            "NaN/Inf in arg 0: 4 of 512 elements, the first at index 3")
        assert snapshots.take_nan(1, 12) is None
        assert (snapshots.state.tally.nan_producers, snapshots.state.tally.nan_produced) == (
            3, 1)
        assert snapshots.state.tally.first_producer == NanLaunch(1, 9, PAIR_FUNC.demangled)
    finally:
        snapshots.close()
    reports = [r for r in manifest(tmp_path) if "nonfinite" in r and r["phase"] == "after"]
    assert [(r["launch"], r.get("offset", 0), r["origin"], r.get("from_arg"),
             r.get("from_launch")) for r in reports] == [
        (7, 8, "propagated", 0, None), (9, 0, "produced", None, None),
        (12, 8, "propagated", 0, 9)]


def test_plain_repeated_launches_tell_which_buffers_are_finite_again(tmp_path):
    """The result drain tells of the plain launches of a batch (every scan after them found
    nothing) once per plan, before any unusual launch of the batch is taken: a buffer that
    launch 3 left non-finite and a plain launch 5 found finite has no maker any more."""
    snapshots = scanning(tmp_path)
    try:
        proc, planned, repeat = kept_pair_plan(snapshots)
        makers = snapshots.nan.makers
        makers.turned(1, 0x10000, 0x10800, Maker(3, "k"))
        makers.turned(1, 0x10800, 0x11000, Maker(9, "k"))
        templates = snapshots.state.proc(1).templates
        snapshots.nan.plain(1, templates[repeat.plan_id], 5)
        assert makers.maker(1, 0x10000, 0x10004, 20) is None
        assert makers.maker(1, 0x10800, 0x10804, 20) == Maker(9, "k")   # made after 5
        # The drain: plain launches 10 and 11, then an unusual one (12) that finds the
        # buffer at byte 8 non-finite before: launch 9's, found finite after 11, is gone.
        drain = snapshots.repeater.results
        slots = np.concatenate([np.array([_slot(repeat.plan_id, 10, {}),
                                          _slot(repeat.plan_id, 11, {}),
                                          _slot(repeat.plan_id, 12, {2: (1, 0), 3: (1, 0),
                                                                     1: (1, 2)})])])
        ring = _Ring(proc, None, slots, templates)   # type: ignore[arg-type]
        taken = _Taken(slots["event"], slots["plan"], slots["flags"], slots["launch_rc"],
                       slots["results"][:, :4])
        drain._handle(ring, taken, np.arange(3))
    finally:
        snapshots.close()
    (report,) = [r for r in manifest(tmp_path) if "nonfinite" in r]
    assert (report["launch"], report["origin"], report["from_arg"], report["from_launch"]) == (
        12, "propagated", 0, None)


def test_the_summary_names_the_first_producer():
    summary_ = RunSummary(processes=1, pids=[7], nan_reports=3, nan_producers=3, nan_produced=1,
                          first_nan_producer=NanLaunch(7, 11, "k"),
                          first_nan_report=NanLaunch(7, 4, "j"))
    assert summary_.line().endswith("3 NaN/Inf reports (first produced by launch 11 of "
                                    "k)")
    summary_.pids = [7, 8]
    assert summary_.line().endswith("(first produced by launch 11 of k (process 7))")
    # With ranks: the rank named, and first_nan_rank, are the producer's.
    summary_.first_nan_producer = NanLaunch(8, 11, "k", rank=1)
    summary_.first_nan_report = NanLaunch(7, 4, "j", rank=0)
    assert summary_.line().endswith("(first produced by launch 11 of k (process 8, rank 1))")
    assert summary_.first_nan_rank == 1
    summary_.first_nan_producer = None
    assert summary_.line().endswith("(none produced from finite inputs; the first left by "
                                    "launch 4 of j (process 7, rank 0))")
    assert summary_.first_nan_rank is None
    summary_.first_nan_report = NanLaunch(7, 4, "j")
    assert summary_.line().endswith("(none produced from finite inputs; the first left by "
                                    "launch 4 of j (process 7))")
