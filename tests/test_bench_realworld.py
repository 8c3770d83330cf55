"""The pure part of the real-workload benchmark (bench/realworld_table.py): reading what the
programs print, the goals, the snapshot figures and the table. The GPU runs themselves are
bench/realworld.py's, on a GPU machine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from realworld_run import Settings  # noqa: E402
from realworld_table import (  # noqa: E402
    BenchError,
    Goal,
    Row,
    SnapshotSetting,
    cupti_launches,
    launch_times,
    markdown,
    matched_notes,
    noise_notes,
    parse_only,
    ratio_row,
    read_values,
    snapshot_rows,
    speed_notes,
)


def test_only_keeps_the_benchmark_order_and_refuses_unknown_names():
    assert parse_only("snapshots, resnet18") == ("resnet18", "snapshots")
    assert parse_only("bert") == ("bert",)
    with pytest.raises(ValueError, match="unknown workload 'gpt2': choose from resnet18, "
                                         "bert, snapshots"):
        parse_only("bert,gpt2")
    with pytest.raises(ValueError, match="unknown workload"):
        parse_only(" , ")


def test_values_are_read_once_each():
    out = "loading\niter_ms 2.5000\noutput_absmean 0.8123\nanchor_ms 7\n"
    assert read_values(out, ["iter_ms", "anchor_ms"], "w") == {"iter_ms": 2.5, "anchor_ms": 7.0}


@pytest.mark.parametrize("out, message", [
    ("output_absmean 1\n", "expected one `iter_ms N` line, found 0"),
    ("iter_ms 1\niter_ms 2\n", "found 2"),
    ("iter_ms fast\n", "`iter_ms` is not a number: 'fast'"),
    ("iter_ms nan\n", "`iter_ms` is nan"),
    ("iter_ms -1\n", "`iter_ms` is -1"),
    ("my_iter_ms 1\niter_ms_x 2\n", "found 0"),
])
def test_unexpected_output_is_an_error_naming_the_run(out, message):
    with pytest.raises(BenchError, match=message) as err:
        read_values(out, ["iter_ms"], "resnet18 trace (rep 2)")
    assert str(err.value).startswith("resnet18 trace (rep 2): ")


def test_launch_times_leave_out_the_first_and_want_every_launch():
    out = "launch 1 ms 9.5\nlaunch 2 ms 0.2\nlaunch 3 ms 0.3\nd2h_ms 4.8\n"
    assert launch_times(out, 3, "w") == [0.2, 0.3]
    with pytest.raises(BenchError, match=r"K = 1..4, got \[1, 2, 3\]"):
        launch_times(out, 4, "w")
    with pytest.raises(BenchError, match=r"got \[1, 3\]"):
        launch_times("launch 1 ms 1\nlaunch 3 ms 1\n", 2, "w")


def test_cupti_count_proves_the_subscriber_ran():
    assert cupti_launches("warning\ncupti_count: 2460 launches\n", "w") == 2460
    with pytest.raises(BenchError, match="printed no count"):
        cupti_launches("Segmentation fault\n", "w")


def test_goals():
    assert Goal(1.03).text == "<= 1.03x" and Goal(1.03).met(1.03) and not Goal(1.03).met(1.04)
    below = Goal(1.0, strict=True)
    assert below.text == "< 1.00x" and below.met(0.99) and not below.met(1.0)


def test_ratio_row_takes_medians_and_judges_their_ratio():
    row = ratio_row("resnet18", "cudump --trace", [2.0, 9.0, 2.2], [2.1, 2.2, 2.3], Goal(1.03))
    assert (row.bare_ms, row.tool_ms, row.goal, row.met) == (2.2, 2.2, "<= 1.03x", True)
    assert row.ratio == pytest.approx(1.0)
    slow = ratio_row("bert", "cudump --digest", [4.0], [6.4], Goal(1.5))
    assert slow.met is False and slow.cells()[4:] == ["1.600x", "-", "<= 1.50x", "**NO**"]
    plain = ratio_row("bert", "cudump (no rules)", [4.0], [4.1])
    assert plain.met is None and plain.cells()[5:] == ["-", "-", "-"]
    missing = ratio_row("bert", "cudump --check-nan", [4.0], [], Goal(1.5))
    assert missing.failed == "no figure" and missing.met is None
    assert missing.cells()[3:] == ["-", "-", "-", "<= 1.50x", "**FAILED**"]
    failed = ratio_row("bert", "cupti", [4.0], [4.2], failed="exit status 1")
    assert failed.cells()[-1] == "**FAILED**" and failed.cells()[4] == "1.050x"


def test_markdown_table():
    rows = [Row("resnet18 b8", "cudump --trace", 2.0, 2.04, "<= 1.03x", True),
            Row("snapshots", "default: per launch, back to back", 0.2, 151.25, "8/8 on disk",
                False)]
    lines = markdown(rows).splitlines()
    assert len(lines) == 4
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert cells[0] == ["workload", "mode", "bare ms", "cudump ms", "ratio", "at bare's speed",
                        "goal", "met"]
    assert all(set(c) <= {"-", ":"} for c in cells[1])
    assert [c.endswith(":") for c in cells[1]] == [False, False, True, True, True, True, False,
                                                   False]
    assert cells[2] == ["resnet18 b8", "cudump --trace", "2.000", "2.040", "1.020x", "-",
                        "<= 1.03x", "yes"]
    assert cells[3][2:] == ["0.200", "151.250", "756.250x", "-", "8/8 on disk", "**NO**"]
    assert len({len(line) for line in lines}) == 1        # padded: it reads as plain text


def test_snapshot_rows():
    setting = SnapshotSetting(launch_ms=[120.2, 130.2], held_ms=[120.0, 130.0],
                              d2h_ms=[5.0, 5.0], landed=[8, 8], end_ms=[1000.0, 1200.0])
    short = SnapshotSetting(launch_ms=[100.2], held_ms=[100.0], d2h_ms=[5.0], landed=[6],
                            end_ms=[2000.0])
    rows, notes = snapshot_rows("snapshots", 256, 4, [0.2, 0.2],
                                {"default": setting, "--staging 1G": short}, [2.0])
    per, copies, rate, per_short, rate_short = rows[0], rows[1], rows[2], rows[3], rows[5]
    assert (per.bare_ms, per.goal, per.met) == (0.2, "8/8 on disk", True)
    assert per.tool_ms == pytest.approx(125.2)
    assert per_short.met is False and per_short.goal == "8/8 on disk (got 6)"
    assert (copies.bare_ms, copies.tool_ms, copies.met) == (10.0, 125.0, False)
    # Pinned D2H of 256 MiB in 5 ms is 53.7 GB/s, the file write 2 GB/s: the 8 x 256 MiB
    # take 1073.7 ms at the lesser rate; 1100 ms from the first launch to the last file is
    # within 1.25x of it, 2000 ms is not.
    assert rate.bare_ms == pytest.approx(8 * 256 * 2**20 / 2e9 * 1e3)
    assert rate.tool_ms == pytest.approx(1100.0)
    assert rate.met is True and rate.goal == "<= 1.25x"
    assert rate.mode == "default: end to end vs 8x256 MiB at the lesser rate"
    assert rate_short.met is False
    assert notes[0] == ("snapshots, default: pinned D2H 53.7 GB/s, file write 2.00 GB/s, "
                        "snapshots end to end (first launch to last file) 1.95 GB/s "
                        "(98% of the lesser)")
    assert len(rows) == 6 and len(notes) == 2


def test_snapshot_rows_of_a_failed_setting():
    failed = SnapshotSetting(failed="snapshots default (rep 1): exit status 1")
    rows, notes = snapshot_rows("snapshots", 256, 4, [0.2], {"default": failed}, [2.0])
    assert [r.failed for r in rows] == [failed.failed] * 3
    assert all(r.cells()[-1] == "**FAILED**" for r in rows) and notes == []


def test_noise_notes_say_when_ratios_are_less_sure_than_their_digits():
    # ResNet-18 on two hosts this session: bare 1.437 and 2.234 ms, the subscriber 1.58x
    notes = noise_notes("resnet18 b8", [1.437, 2.234], 1.584)
    assert len(notes) == 2
    assert "moved by 43% between repetitions (1.437 to 2.234 ms)" in notes[0]
    assert "measured 1.58x" in notes[1]
    # BERT-base: steady, and the subscriber at 1.00x
    assert noise_notes("bert-base b8x128", [6.634, 6.640], 0.998) == []
    # one repetition cannot show a spread; no subscriber run, nothing said of it
    assert noise_notes("resnet18 b8", [2.234], None) == []


def test_speed_notes_name_the_modes_that_ran_on_a_cpu_of_another_speed():
    probes = {"bare": [2.0, 2.1, 4.0], "cudump --check-nan": [2.05, 2.2, 2.1],
              "cudump --digest": [3.9, 4.1, 2.0], "CUPTI subscriber (no cudump)": [1.5]}
    notes = speed_notes("resnet18 b8", probes)
    assert notes[0] == ("resnet18 b8: the CPU probe, µs an op (median): bare 2.10, "
                        "cudump --check-nan 2.10, cudump --digest 3.90, "
                        "CUPTI subscriber (no cudump) 1.50")
    # --check-nan's median is bare's; --digest's (3.90) is 1.86x, the subscriber's 0.71x
    assert notes[1:] == [
        "resnet18 b8, cudump --digest: its processes' CPU probe read 1.86x bare's: they ran "
        "on a CPU of another speed, and its ratio carries that",
        "resnet18 b8, CUPTI subscriber (no cudump): its processes' CPU probe read 0.71x "
        "bare's: they ran on a CPU of another speed, and its ratio carries that"]


def test_speed_notes_without_probes_or_without_bare():
    assert speed_notes("bert-base b8x128", {}) == []
    # no bare run to compare with: the medians only
    assert speed_notes("bert-base b8x128", {"cudump --trace": [1.0, 3.0]}) == [
        "bert-base b8x128: the CPU probe, µs an op (median): cudump --trace 2.00"]


def test_matched_notes_keep_the_repetitions_run_on_a_cpu_of_bares_speed():
    runs = [{"bare": (2.0, 5.0), "cudump --check-nan": (2.4, 5.2), "cudump --digest": (3.0, 3.0)},
            {"bare": (1.5, 3.0), "cudump --check-nan": (2.4, 5.0), "cudump --digest": (2.1, 3.1)},
            {"bare": (1.6, 3.2), "cudump --check-nan": (2.0, 3.3)},
            {"cudump --check-nan": (2.0, 3.3)}]   # its bare run failed: no pair
    assert matched_notes("resnet18 b8", runs) == [
        "resnet18 b8, cudump --check-nan: 2 of 3 repetitions ran on a CPU of bare's speed "
        "(probe within 10% of the same repetition's bare run): median ratio 1.225x "
        "(1.200, 1.250)",
        "resnet18 b8, cudump --digest: 1 of 2 repetitions ran on a CPU of bare's speed (probe "
        "within 10% of the same repetition's bare run): median ratio 1.400x (1.400)"]
    assert matched_notes("bert-base b8x128", [{"bare": (6.0, 2.0), "cudump --trace": (6.1, 3.0)}]
                         ) == ["bert-base b8x128, cudump --trace: 0 of 1 repetitions ran on a "
                               "CPU of bare's speed (probe within 10% of the same repetition's "
                               "bare run): no ratio"]


def test_modes_left_out_have_no_rows():
    """`--modes check-nan,digest`: the rows of the modes not run are left out, not FAILED."""
    import realworld

    load = realworld.TorchWorkload("resnet18")
    load.ms = {"bare": [2.0], "check-nan": [2.5], "digest": [2.8], "anchor": [6.0],
               "anchor-nosync": [5.0]}
    load.probes = {"bare": [3.0], "check-nan": [3.1], "digest": [3.0]}
    load.left_out = {"cudump", "trace", "cupti"}
    rows, _ = load.rows()
    assert [row.mode for row in rows] == [
        "cudump --check-nan", "cudump --digest",
        "isnan hooks, checked per module (no cudump)",
        "isnan hooks, one check per forward (no cudump)",
        "cudump --check-nan vs the isnan hooks checked per module"]
    assert not any(row.failed for row in rows)


def test_variants_run_where_their_scanning_mode_runs(tmp_path):
    """`--modes check-nan --no-hand-off` runs --check-nan with the launcher and without it;
    --digest's variant is left out with --digest."""
    import realworld

    s = Settings(1, 10, 2, 60, tmp_path, tmp_path, None, own_thread=True,
                 modes=("check-nan",))
    run, left_out = realworld.modes_to_run(s)
    assert run == ["bare", "check-nan", "check-nan-own"]
    assert left_out == {"cudump", "trace", "digest", "cupti", "digest-own"}
    everything, none_left = realworld.modes_to_run(
        Settings(1, 10, 2, 60, tmp_path, tmp_path, None, alone=True))
    assert everything == [*realworld.TORCH_MODES, *realworld.ALONE_MODES] and not none_left


def test_lists_are_read_whole_and_checked():
    from realworld_table import read_list

    assert read_list("x 1\nchunk_ms 1.5,2.0,2.5\n", "chunk_ms", 3, "w") == [1.5, 2.0, 2.5]
    for text, message in (("", "expected one"), ("chunk_ms 1,2\nchunk_ms 1,2\n", "found 2"),
                          ("chunk_ms 1,a,2\n", "not a list"), ("chunk_ms 1,2\n", "3 numbers"),
                          ("chunk_ms 1,nan,2\n", "3 numbers"), ("chunk_ms 1,-2,2\n", "3 numbers"),
                          ("chunk_ms 1,0,2\n", "3 numbers")):
        with pytest.raises(BenchError, match=message):
            read_list(text, "chunk_ms", 3, "w")


def test_level_notes_set_each_chunk_against_bares_chunks_of_its_speed():
    """Bare ran at 1.5 ms where the probe read 3 µs and at 2.5 ms where it read 5; a mode's
    chunks are set against those of their own probe, and one of a speed bare never ran at
    has no ratio."""
    from realworld_table import level_notes

    bare = [(1.5, 3.0), (1.6, 3.05), (2.5, 5.0), (2.5, 5.1)]
    check = [(2.17, 3.0), (3.0, 5.05), (9.0, 4.0)]
    assert level_notes("resnet18 b8", {"bare": bare, "cudump --check-nan": check}) == [
        "resnet18 b8, cudump --check-nan: at the host's speed of the moment (each chunk of "
        "forwards against bare's chunks whose CPU probe was within 5% of its own): median "
        "ratio 1.300x, from 1.200x to 1.400x; 2 of 3 chunks had such bare chunks"]
    assert level_notes("w", {"bare": bare, "trace": [(9.0, 4.0)]})[0].endswith(
        "no ratio; 0 of 1 chunks had such bare chunks")
    assert level_notes("w", {"trace": check}) == []


def test_a_goal_is_judged_at_bares_speed_where_half_the_chunks_had_bare_chunks_of_it():
    """The host ran bare at 1.5 ms (probe 3 µs) and 2.5 ms (probe 5 µs) within one process;
    a mode whose processes ran mostly at the slow speed has a poor ratio of medians, but its
    chunks set against bare's of their own speed meet the goal, and that decides."""
    from realworld_table import level_ratio

    bare = [(1.5, 3.0), (1.5, 3.0), (1.5, 3.0), (2.5, 5.0)]
    check = [(2.0, 3.0), (3.5, 5.0), (3.5, 5.0), (3.5, 5.0)]
    matched = level_ratio(check, bare)
    assert matched == pytest.approx(1.4)
    row = ratio_row("resnet18 b8", "cudump --check-nan", [b for b, _ in bare],
                    [c for c, _ in check], Goal(1.5), matched=matched)
    assert row.ratio == pytest.approx(3.5 / 1.5) and row.met is True
    assert row.cells()[4:] == ["2.333x", "1.400x", "<= 1.50x", "yes"]
    # Fewer than half its chunks ran at a speed bare ran at: no ratio to judge on, and the
    # ratio of the medians decides.
    assert level_ratio([(2.0, 3.0), (9.0, 4.0), (9.0, 4.0)], bare) is None
    assert level_ratio([(2.0, 3.0), (9.0, 4.0)], bare) == pytest.approx(2.0 / 1.5)
    assert level_ratio([], bare) is None and level_ratio(check, []) is None
    unmatched = ratio_row("w", "m", [1.5], [3.5], Goal(1.5), matched=None)
    assert unmatched.met is False and unmatched.cells()[5] == "-"


def test_cpus_hold_every_model_process_to_them(tmp_path):
    settings = Settings(1, 10, 2, 60, tmp_path, tmp_path, None, cpus="2-9")
    assert settings.pinned(["python3", "m.py"]) == ["taskset", "-c", "2-9", "python3", "m.py"]
    anywhere = Settings(1, 10, 2, 60, tmp_path, tmp_path, None)
    assert anywhere.pinned(["python3", "m.py"]) == ["python3", "m.py"]


def test_a_signal_during_a_repetition_still_gives_the_table_of_the_runs_before(
        monkeypatch, capsys):
    import realworld

    monkeypatch.setattr(realworld, "check_needs", lambda workloads: None)
    monkeypatch.setattr(realworld, "device_name", lambda _who: "Test GPU, 1.0")
    monkeypatch.setattr(realworld, "cupti_files", lambda scratch: None)
    monkeypatch.setattr(realworld.signal, "signal", lambda *args: None)

    def rep(self, rep, s, say):
        self.ms.setdefault("bare", []).append(2.0 + rep)
        if rep == 1:
            # What the SIGTERM handler raises, with bare run in this repetition and
            # --check-nan not yet: this repetition is left out of every median.
            realworld.stop_on(15, None)
        self.ms.setdefault("check-nan", []).append(2.5)
        self.left_out |= {"cudump", "trace", "digest", "cupti"}

    monkeypatch.setattr(realworld.TorchWorkload, "rep", rep)
    status = realworld.main(["--only", "resnet18", "--reps", "3", "--modes", "check-nan"])
    out = capsys.readouterr().out
    assert status == 143
    assert "stopped by a signal during repetition 2: the table has the runs made before it" in out
    assert "medians of the runs made before a signal stopped repetition 2 of 3." in out
    rows = [[cell.strip() for cell in line.split("|")] for line in out.splitlines()
            if line.startswith("| resnet18 b8 ")]
    row = next(cells for cells in rows if cells[2] == "cudump --check-nan")
    assert row[5] == "1.250x"


def test_a_failed_runs_chunks_are_left_out_of_the_chunk_notes(monkeypatch, tmp_path):
    """--chunks: a run whose checks fail (here cudump's summary) is FAILED, and its chunks
    count no more than its other figures; bare's, which passed, are kept."""
    import realworld
    from realworld_run import Done
    from realworld_table import BenchError as Error

    printed = ("iter_ms 2.0\nhost_probe_us 3.0\noutput_absmean 1.5\nanchor_ms 6.0\n"
               "anchor_nosync_ms 5.0\nlaunches_per_iter 119\n"
               "chunk_ms 1.9,2.1\nchunk_probe_us 3.0,3.1\n")
    monkeypatch.setattr(realworld, "sub_run", lambda *args: Done(printed, "", 1.0))

    def summary(out, where, min_launches):
        raise Error(f"{where}: no summary.json")

    monkeypatch.setattr(realworld, "cudump_summary", summary)
    s = Settings(1, 10, 2, 60, tmp_path, tmp_path, None, modes=("check-nan",), chunks=2)
    load = realworld.TorchWorkload("resnet18")
    said: list[str] = []
    load.rep(0, s, said.append)
    assert load.chunks == {"bare": [(1.9, 3.0), (2.1, 3.1)]}
    assert "check-nan" in load.failed
    assert said[0].endswith("2.000 ms/forward; chunks, ms/probe µs: 1.90/3.00 2.10/3.10")
    _, notes = load.rows()
    assert not any("speed of the moment" in note for note in notes)


@pytest.mark.parametrize("checkout", ["/src/project", "/home/me/cudump"])
@pytest.mark.parametrize("cpus", ["", "2-9"])
def test_each_mode_is_judged_on_its_own_chunks_and_each_line_says_its_own_launcher(
        monkeypatch, tmp_path, checkout, cpus):
    """Two repetitions of bare and --check-nan. Bare ran where the host was fast (probe 3
    µs); --check-nan half there and half where it was slow (probe 5 µs), which bare never
    saw. Its figure at bare's speed is its fast chunks against bare's (1.4x, where the
    medians say 1.87x), and that decides its goal. The check-nan run's line says its launcher
    trial, and the bare run's line after it does not. Which run is under cudump is told
    from the command line's structure, never from its words: the checkout's folder, in
    every sample's path, may be named cudump."""
    import realworld
    from realworld_run import Done

    monkeypatch.setattr(realworld, "sample", lambda name: [sys.executable,
                                                           f"{checkout}/samples/{name}"])

    def printed(ms: tuple[float, float], probes: tuple[float, float]) -> str:
        return (f"iter_ms {sum(ms) / 2}\nhost_probe_us {probes[0]}\noutput_absmean 1.5\n"
                "anchor_ms 6.0\nanchor_nosync_ms 5.0\nlaunches_per_iter 119\n"
                f"chunk_ms {ms[0]},{ms[1]}\nchunk_probe_us {probes[0]},{probes[1]}\n")

    def sub_run(cmd, *args):
        under = realworld.TorchWorkload.runs_cudump(cmd)
        return Done(printed((2.1, 3.5), (3.0, 5.0)) if under
                    else printed((1.5, 1.5), (3.0, 3.0)), "", 1.0)

    monkeypatch.setattr(realworld, "sub_run", sub_run)
    monkeypatch.setattr(realworld, "cudump_summary", lambda out, where, least: {
        "launches": 200, "planned_launches": 2, "repeated_launches": 198,
        "launcher_trials": 1, "launcher_won": 1})
    s = Settings(2, 10, 2, 60, tmp_path, tmp_path, None, modes=("check-nan",), chunks=2,
                 cpus=cpus)
    load = realworld.TorchWorkload("resnet18")
    said: list[str] = []
    for rep in range(2):
        load.rep(rep, s, said.append)
    assert [" (launcher won 1/1)" in line for line in said] == [False, True, False, True]
    rows, _ = load.rows()
    row = next(r for r in rows if r.mode == "cudump --check-nan")
    assert row.ratio == pytest.approx(2.8 / 1.5) and row.matched == pytest.approx(1.4)
    assert row.met is True


@pytest.mark.parametrize("args, chunks", [([], 10), (["--iters", "75"], 1),
                                          (["--iters", "50"], 1),
                                          (["--iters", "75", "--chunks", "5"], 5)])
def test_forwards_are_timed_in_ten_chunks_where_ten_divide_them(monkeypatch, capsys, args,
                                                                   chunks):
    import realworld

    monkeypatch.setattr(realworld, "check_needs", lambda workloads: None)
    monkeypatch.setattr(realworld, "device_name", lambda _who: "Test GPU, 1.0")
    monkeypatch.setattr(realworld, "cupti_files", lambda scratch: None)
    monkeypatch.setattr(realworld.signal, "signal", lambda *args: None)
    seen = []

    def rep(self, rep, s, say):
        seen.append(s.chunks)
        self.ms.setdefault("bare", []).append(2.0)
        self.ms.setdefault("check-nan", []).append(2.5)
        self.left_out |= {"cudump", "trace", "digest", "cupti"}

    monkeypatch.setattr(realworld.TorchWorkload, "rep", rep)
    realworld.main(["--only", "resnet18", "--reps", "1", "--modes", "check-nan", *args])
    capsys.readouterr()
    assert seen == [chunks]


def test_each_runs_progress_line_says_how_its_launcher_trials_went():
    from realworld import launcher_said

    assert launcher_said({"launcher_trials": 2, "launcher_won": 1}) == " (launcher won 1/2)"
    assert launcher_said({"launcher_trials": 1}) == " (launcher won 0/1)"
    assert launcher_said({"launches": 5}) == ""
