"""The parts of the stay-on benchmark (bench/stay_on.py) that run without a GPU: the counter
reader (bench/perfcount.py), what the programs print read back, the figures and the goals'
arithmetic and verdicts (bench/stay_on_table.py), which modes run, and one run of the ring of
processes with a stand-in for the workload program. The workloads themselves need a GPU:
tests/gpu/test_gpu_stay_on_bench.py."""

from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import perfcount  # noqa: E402
import stay_on  # noqa: E402
from stay_on_table import (  # noqa: E402
    BenchError,
    CudumpCounts,
    Figures,
    Goal,
    GoalResult,
    GpuTotals,
    ProgramRun,
    figure_row,
    figures,
    goal_row,
    gpu_totals,
    judge,
    parse_program,
    program_lines,
)


def burn(seconds: float) -> None:
    """Keeps this thread on a CPU for about `seconds` of its own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        sum(range(1000))


# -- the counter reader -----------------------------------------------------------------------


def test_attr_asks_for_one_threads_event_with_its_enabled_and_running_times():
    attr = perfcount.attr_bytes(perfcount.INSTRUCTIONS, exclude_kernel=True)
    assert len(attr) == perfcount.ATTR_SIZE == 128
    kind, size, config, _, _, read_format, flags = struct.unpack_from("=IIQQQQQ", attr)
    assert (kind, size, config) == (perfcount.PERF_TYPE_HARDWARE, 128,
                                    perfcount.PERF_COUNT_HW_INSTRUCTIONS)
    assert read_format == 3                 # total time enabled, total time running
    assert flags & perfcount.ATTR_EXCLUDE_KERNEL and not flags & 1    # enabled at once
    flags = struct.unpack_from("=IIQQQQQ", perfcount.attr_bytes(perfcount.CYCLES, False))[6]
    assert not flags & perfcount.ATTR_EXCLUDE_KERNEL


def test_a_multiplexed_count_is_scaled_to_the_time_it_was_enabled():
    read, write = os.pipe()
    try:
        os.write(write, struct.pack("=QQQ", 1000, 300, 100))
        assert perfcount.read_scaled(read) == 3000.0
        os.write(write, struct.pack("=QQQ", 1000, 300, 300))
        assert perfcount.read_scaled(read) == 1000.0
        os.write(write, struct.pack("=QQQ", 1000, 300, 0))
        assert perfcount.read_scaled(read) == 0.0       # never ran: nothing counted
    finally:
        os.close(read)
        os.close(write)


def test_errors_are_said_in_the_machines_terms():
    assert "perf_event_paranoid is" in perfcount._why(errno.EACCES, perfcount.INSTRUCTIONS)
    assert "no PMU" in perfcount._why(errno.ENOENT, perfcount.CYCLES)
    assert perfcount._why(errno.EINVAL, perfcount.CYCLES).startswith(
        "cycles: perf_event_open failed: ")


def test_a_threads_cpu_time_grows_as_it_runs_and_is_0_once_it_is_gone():
    tid = threading.get_native_id()
    before = perfcount.thread_cpu_ns(tid)
    burn(0.05)
    assert perfcount.thread_cpu_ns(tid) - before >= 30_000_000
    assert perfcount.thread_cpu_ns(2 ** 22 + 12345) == 0


class Burner:
    """Another thread of this process, burning CPU until stopped."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        self.started.set()
        while not self.stop.is_set():
            sum(range(1000))

    def __enter__(self) -> Burner:
        self.thread.start()
        assert self.started.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_counters_count_the_launching_thread_and_the_others_apart():
    """The software task clock (no PMU needed) through the same perf_event_open path as the
    hardware counters: the launching thread's count is its own, the sum over threads takes in
    a thread started after the counters opened (refresh), as the shim's launcher thread is."""
    counters = perfcount.Counters.open(threading.get_native_id(), (perfcount.TASK_CLOCK,))
    if not counters.hardware:
        pytest.skip(f"this machine opens no perf_event counter: {counters.unavailable}")
    try:
        assert counters.describe().startswith("perf_event task-clock (")
        with Burner():
            counters.refresh()
            before = counters.sample()
            burn(0.1)
            delta = counters.sample().minus(before)
    finally:
        counters.close()
    mine = delta.launching["task-clock"]
    assert 0.08e9 <= mine <= 2 * delta.launching_cpu_ns
    # The other thread ran too (how long depends on the host: at least some of it).
    assert delta.all_threads["task-clock"] > mine
    assert delta.all_cpu_ns > delta.launching_cpu_ns


def test_without_the_counters_it_says_why_and_counts_cpu_time():
    bogus = perfcount.Event("bogus", perfcount.PERF_TYPE_HARDWARE, 0xdead_beef)
    counters = perfcount.Counters.open(threading.get_native_id(), (bogus,))
    assert not counters.hardware
    assert counters.describe().startswith("cpu-time (no hardware counters: bogus: ")
    before = counters.sample()
    burn(0.05)
    delta = counters.sample().minus(before)
    assert delta.launching == {} and delta.all_threads == {}
    assert delta.launching_cpu_ns >= 30_000_000
    assert delta.all_cpu_ns >= delta.launching_cpu_ns


# -- what the programs print ------------------------------------------------------------------


def program(chunk_ms, instr=None, cpu_us=None, gpu=None, workload="gpt") -> ProgramRun:
    n = len(chunk_ms)
    instr = instr if instr is not None else [None] * n
    return ProgramRun(workload, 10, "perf_event instructions,cycles (user+kernel)",
                      list(chunk_ms), list(instr), [v * 2 if v else None for v in instr],
                      list(cpu_us or [1000.0] * n), list(instr), [None] * n,
                      list(cpu_us or [1000.0] * n), gpu, 2.5)


def test_what_a_program_prints_reads_back_the_same():
    run = program([1.5, 1.25], instr=[2e6, 2.5e6], gpu=GpuTotals(10.0, 4, 100.0, 40, 2.0))
    assert parse_program("\n".join(["noise before", *program_lines(run)]), "w") == run
    bare = program([1.5], cpu_us=[900.0])
    back = parse_program("\n".join(program_lines(bare)), "w")
    assert back == bare and back.gpu is None and not back.hardware
    assert "instr -\n" in "\n".join(program_lines(bare)) + "\n"


@pytest.mark.parametrize(("drop", "change", "message"), [
    ("chunk_ms", None, "w: the program printed no `chunk_ms` line"),
    (None, ("cycles 2,4", "cycles 2,4,6"), "w: `cycles` has 3 values, `chunk_ms` 2"),
    (None, ("cpu_us 1000,1000", "cpu_us 1000,-"), "w: `cpu_us` is not a number: '-'"),
    (None, ("steps 10", "steps 0"), "w: `steps` should be a whole number of steps: 0.0"),
    ("gpu_other_us", None, "w: the program printed no `gpu_other_us` line"),
])
def test_a_program_that_printed_what_it_should_not_is_named_with_the_key(drop, change,
                                                                         message):
    run = program([1.0, 1.0], instr=[1.0, 2.0], gpu=GpuTotals(1, 1, 1, 1, 1))
    lines = [ln for ln in program_lines(run) if drop is None or not ln.startswith(drop + " ")]
    text = "\n".join(lines)
    if change:
        assert change[0] in text
        text = text.replace(change[0], change[1])
    with pytest.raises(BenchError) as err:
        parse_program(text, "w")
    assert str(err.value) == message


def test_device_time_is_split_between_cudumps_kernels_the_programs_and_copies():
    totals = gpu_totals([("cudump_tools", 5.0), ("void at::native::vectorized_kernel", 10.0),
                         ("cudump_tools", 1.0), ("Memcpy HtoD (Pageable -> Device)", 3.0),
                         ("Memset (Device)", 1.0), ("ampere_sgemm_128x64_nn", 20.0)])
    assert totals == GpuTotals(6.0, 2, 30.0, 2, 4.0)
    assert totals.total_us == 40.0
    assert totals.per(2) == GpuTotals(3.0, 1, 15.0, 1, 2.0)


def test_summary_counts_give_cudumps_launches_per_program_kernel():
    counts = CudumpCounts.from_summary({"launches": 300, "graph_kernel_launches": 100,
                                        "tool_launches": 40, "nan_reports": 0}, "w")
    assert counts.program_kernels == 400 and counts.tool_per_launch == 0.1
    older = CudumpCounts.from_summary({"launches": 10}, "w")
    assert older.tool_launches is None and older.tool_per_launch is None
    with pytest.raises(BenchError, match="w: summary.json's `tool_launches` is not a count"):
        CudumpCounts.from_summary({"launches": 1, "tool_launches": "many"}, "w")
    with pytest.raises(BenchError, match="not a JSON object"):
        CudumpCounts.from_summary([], "w")


# -- figures and goals ------------------------------------------------------------------------


def test_ratios_are_taken_round_by_round_not_of_the_medians():
    """The host ran round 2 slower for both: round by round the mode costs 1.1x, 1.2x and
    1.0x (median 1.1x), while the medians' ratio would say 1.2x."""
    bare = program([10.0, 20.0, 30.0], instr=[1e6, 1e6, 1e6],
                   gpu=GpuTotals(0, 0, 1000.0, 100, 0))
    mode = program([11.0, 24.0, 30.0], instr=[1.2e6, 1.3e6, 1.25e6],
                   gpu=GpuTotals(50.0, 20, 1000.0, 100, 0))
    counts = CudumpCounts(1000, 0, 50, 0)
    f = figures(mode, bare, counts)
    assert f.ratio == pytest.approx(1.1)
    assert f.ms == 24.0
    assert f.instr_ratio == pytest.approx(1.25)
    # 250,000 more instructions a step over the 100 kernels of bare's step
    assert f.extra_instr_per_kernel == pytest.approx(2500.0)
    assert f.gpu_us == 1050.0 and f.gpu_ratio == pytest.approx(1.05)
    assert f.tool_fraction == pytest.approx(50 / 1050)
    assert f.tool_kernels_per_kernel == pytest.approx(0.2)
    assert f.tool_launches_per_launch == pytest.approx(0.05)
    assert f.cpu_side == f.instr_ratio and f.step_bound == pytest.approx(1.25)
    assert f.all_instr == 1.25e6 and f.all_cpu_us == 1000.0     # the stand-in's: as given


def test_without_hardware_counters_the_cpu_time_stands_in():
    bare = program([10.0, 10.0], cpu_us=[100.0, 200.0])
    mode = program([10.5, 10.5], cpu_us=[104.0, 212.0])
    f = figures(mode, bare, None)
    assert not f.hardware and f.instr_ratio is None and f.extra_instr_per_kernel is None
    assert f.cpu_ratio == pytest.approx(1.05)
    assert f.gpu_ratio is None and f.step_bound == pytest.approx(1.05)
    assert f.tool_launches_per_launch is None


def fig(ratio=1.0, instr_ratio=1.0, gpu_ratio=1.0, extra=100.0, reports=0, hardware=True,
        cpu_ratio=1.0, bare_cpu_us=None, bare_gpu_us=None) -> Figures:
    """A mode's figures; with bare's CPU and GPU time a step, its GPU time is bare's times
    gpu_ratio."""
    gpu_us = 10.0 if bare_gpu_us is None else bare_gpu_us * gpu_ratio
    return Figures(ms=1.0, ratio=ratio, instr=1e6, instr_ratio=instr_ratio if hardware else None,
                   cycles=2e6, cycles_ratio=None, cpu_us=100.0, cpu_ratio=cpu_ratio,
                   extra_instr_per_kernel=extra if hardware else None,
                   extra_cpu_ns_per_kernel=extra / 10, gpu_us=gpu_us, gpu_ratio=gpu_ratio,
                   tool_fraction=0.01, tool_kernels_per_kernel=0.1,
                   tool_launches_per_launch=0.05, nan_reports=reports, hardware=hardware,
                   bare_cpu_us=bare_cpu_us, bare_gpu_us=bare_gpu_us)


GOAL = Goal("1", "stay-on, eager", "stay-on", ("gpt",), 1.10)


def test_a_modes_row_gives_medians_over_the_runs_and_each_runs_ratio():
    row = figure_row("m", [fig(ratio=1.05, extra=100.0), fig(ratio=1.15, extra=300.0),
                           fig(ratio=1.10, extra=200.0, hardware=False)])
    assert row[:4] == ["m", "1.000", "1.050/1.150/1.100", "1.000"]
    assert row[4] == "1.000/1.000/-"                # the third run counted no instructions
    assert row[8:10] == ["-", "-"]                  # every thread: not given
    assert row[10] == "200"                         # median of 100 and 300
    assert row[14:] == ["1.0%", "0.100", "0.050"]


@pytest.mark.parametrize(("figs", "wall", "free"), [
    (fig(ratio=1.08, instr_ratio=1.09, gpu_ratio=1.02), True, True),
    (fig(ratio=1.10, instr_ratio=1.10, gpu_ratio=1.10), True, True),       # at the limit
    # a noisy host: the wall clock says 1.14x, the counts that it costs 1.06x
    (fig(ratio=1.14, instr_ratio=1.06, gpu_ratio=1.03), False, True),
    (fig(ratio=1.05, instr_ratio=1.04, gpu_ratio=1.12), True, False),      # the GPU side
    (fig(ratio=1.05, instr_ratio=1.20, gpu_ratio=1.0), True, False),       # the CPU side
])
def test_a_ratio_goal_is_judged_on_the_wall_clock_and_on_the_longer_side(figs, wall, free):
    v = judge(GOAL, figs, None)
    assert (v.wall_met, v.free_met) == (wall, free)
    assert v.wall == figs.ratio and v.free == max(figs.instr_ratio, figs.gpu_ratio)


def test_the_side_that_does_not_bound_the_step_counts_only_once_it_would():
    """Bare's step: 100 µs of the launching thread's work, 400 µs of the GPU's (GPU-bound, as
    a graph replay or ResNet-50 b64). 50% more instructions make the thread's side 150 µs,
    still under the GPU's: the step does not grow. 4.5x makes it the longer side."""
    goal = Goal("3", "gpu-bound", "stay-on", ("resnet50",), 1.02)
    hidden = fig(instr_ratio=1.5, gpu_ratio=1.01, bare_cpu_us=100.0, bare_gpu_us=400.0)
    assert hidden.step_bound == pytest.approx(1.01)
    assert judge(goal, hidden, None).free_met is True
    shown = fig(instr_ratio=4.5, gpu_ratio=1.0, bare_cpu_us=100.0, bare_gpu_us=400.0)
    assert shown.step_bound == pytest.approx(450 / 400)
    assert judge(goal, shown, None).free_met is False
    # Launch-bound (the thread's 400 µs against the GPU's 100): the thread's side decides.
    eager = fig(instr_ratio=1.08, gpu_ratio=1.3, bare_cpu_us=400.0, bare_gpu_us=100.0)
    assert eager.step_bound == pytest.approx(1.08)
    assert judge(GOAL, eager, None).free_met is True


def test_a_goal_on_a_model_that_makes_no_nan_fails_where_one_was_reported():
    goal = Goal("3", "gpu-bound", "stay-on", ("resnet50",), 1.02, nothing_found=True)
    v = judge(goal, fig(ratio=1.0, instr_ratio=1.0, gpu_ratio=1.0, reports=2), None)
    assert (v.wall_met, v.free_met) == (False, False)
    assert "2 NaN/Inf reports" in v.why
    assert judge(goal, fig(reports=0), None).wall_met is True


def test_the_anchor_goal_sets_trace_against_the_cupti_subscriber_of_the_same_run():
    goal = Goal("5", "trace vs cupti", "trace", ("gpt",), anchor="cupti")
    v = judge(goal, fig(ratio=1.02, extra=300.0), fig(ratio=1.03, extra=400.0))
    assert (v.wall_met, v.free_met, v.free) == (True, True, 300.0)
    assert "cupti: 400" in v.free_how
    v = judge(goal, fig(ratio=1.04, extra=500.0), fig(ratio=1.03, extra=400.0))
    assert (v.wall_met, v.free_met) == (False, False)
    v = judge(goal, fig(extra=300.0, hardware=False), fig(extra=400.0))
    assert v.free == 30.0 and "not noise-free" in v.free_how
    assert judge(goal, fig(), None).why == "cupti not run"
    assert judge(goal, None, fig()).why == "not run"


def test_a_goal_passes_only_where_every_run_did():
    result = GoalResult(GOAL, "gpt", [judge(GOAL, fig(ratio=1.05), None),
                                      judge(GOAL, fig(ratio=1.12, instr_ratio=1.05), None)])
    assert result.passed("wall") is False and result.passed("free") is True
    row = goal_row(result)
    assert row[:4] == ["1 stay-on, eager", "gpt", "<= 1.10x",
                       "the longer of (bare's launching-thread CPU time x its instructions "
                       "ratio) and GPU time, a step, <= 1.10x bare's longer"]
    assert row[4] == "1: 1.050x pass, 1.000 pass; 2: 1.120x FAIL, 1.050 pass"
    assert row[5:] == ["FAIL", "pass"]
    missing = GoalResult(GOAL, "gpt", [judge(GOAL, None, None)])
    assert missing.passed("wall") is None and goal_row(missing)[4] == "1: not run"


# -- which modes run --------------------------------------------------------------------------


HELP = textwrap.dedent("""\
    usage: cudump [-h] [--trace] [--check-nan] [--watch-nan-later]
                  [--flight [N]]

    options:
      --check-nan           scan every kernel's floating-point outputs
      --watch-nan-later     not the option looked for
    """)


def test_an_option_counts_as_accepted_only_where_the_help_lists_it():
    assert stay_on.accepts(HELP, "--check-nan")
    assert stay_on.accepts(HELP, "--flight")
    assert not stay_on.accepts(HELP, "--watch-nan")
    assert stay_on.accepts(HELP + "  --watch-nan MODE      stay on\n", "--watch-nan")


def test_the_stay_on_mode_is_left_out_with_a_line_where_cudump_lacks_its_option():
    said: list[str] = []
    kept = stay_on.usable_modes(stay_on.MODES, HELP, cupti=False, say=said.append)
    assert [m.name for m in kept] == ["bare", "trace", "check-nan"]
    assert said[0].startswith("cupti: left out: no CUPTI subscriber could be built here")
    assert said[1].startswith("stay-on: left out: this cudump does not accept --watch-nan")
    kept = stay_on.usable_modes(stay_on.MODES, HELP + "  --watch-nan\n", cupti=True,
                                say=said.append)
    assert [m.name for m in kept] == [m.name for m in stay_on.MODES]


def test_this_checkouts_cudump_help_is_read_as_it_prints():
    """cudump --help of this checkout: --check-nan and --trace are there."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    text = subprocess.run([sys.executable, "-m", "cudump", "--help"], capture_output=True,
                          text=True, env=env, cwd=ROOT / "tests", timeout=120).stdout
    assert stay_on.accepts(text, "--check-nan") and stay_on.accepts(text, "--trace")


def test_modes_and_workloads_chosen_on_the_command_line():
    assert stay_on.chosen_modes("check-nan, trace") == ("bare", "check-nan", "trace")
    assert stay_on.chosen_modes(None)[0] == "bare"
    with pytest.raises(ValueError, match="--modes: unknown mode 'fast'"):
        stay_on.chosen_modes("fast")
    assert stay_on.chosen_workloads("resnet50,gpt") == ("gpt", "resnet50")
    with pytest.raises(ValueError, match="--only: unknown workload 'bert'"):
        stay_on.chosen_workloads("gpt,bert")


def test_the_command_line_refuses_bad_values_with_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        stay_on.main(["--only", "bert"])
    assert done.value.code == 2
    assert "--only: unknown workload 'bert'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        stay_on.main(["--runs", "0", "--only", "gpt"])
    assert "--runs, --rounds and --limit must be positive" in capsys.readouterr().err


# -- a run of the ring, with a stand-in for the workload program ------------------------------


STAND_IN = textwrap.dedent("""\
    import sys, time
    sys.path.insert(0, {bench!r})
    from stay_on_table import GpuTotals, ProgramRun, program_lines
    from turns import Turns
    workload, chunks, spec = sys.argv[1], int(sys.argv[3]), sys.argv[5]
    slow = 1.5 if "{slow}" in sys.argv[0] else 1.0
    turns = Turns.parse(spec)
    turns.say_ready()
    ms = []
    for k in range(chunks):
        turns.wait()
        ms.append((k + 1) * slow)
        turns.pass_on()
    turns.wait()
    turns.pass_on()
    gpu = None if "--no-profile" in sys.argv else GpuTotals(0, 0, 100 * slow, 10, 0)
    run = ProgramRun(workload, 5, "cpu-time (no hardware counters: stand-in)", ms,
                     [None] * chunks, [None] * chunks, [10 * slow] * chunks, [None] * chunks,
                     [None] * chunks, [20.0] * chunks, gpu, 1.0)
    print("\\n".join(program_lines(run)))
    if "--out" in sys.argv:         # as cudump would: its summary, and a trace
        import json, pathlib
        out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
        out.mkdir()
        (out / "summary.json").write_text(json.dumps({{
            "launches": 100, "graph_kernel_launches": 0, "tool_launches": 10,
            "nan_reports": 0}}))
        (out / "trace.jsonl").write_text("")
    """)


def test_one_run_takes_turns_and_sets_each_mode_against_bare_round_by_round(tmp_path,
                                                                          monkeypatch):
    """Two stand-in programs in a ring, the second 1.5x slower in everything: the run's
    figures say so, round by round, and the table prints them."""
    for name, slow in (("plain.py", "never"), ("slow.py", "slow.py")):
        (tmp_path / name).write_text(STAND_IN.format(bench=str(ROOT / "bench"), slow=slow))
    modes = [stay_on.Mode("bare", "bare"), stay_on.Mode("other", "slower stand-in")]
    commands = {"bare": tmp_path / "plain.py", "other": tmp_path / "slow.py"}
    real = stay_on.command

    def command(mode, workload, spec, out, s):
        return real(mode, workload, spec, out,
                    stay_on.Settings(s.runs, s.rounds, s.limit_s, s.scratch, None,
                                     commands[mode.name]))

    monkeypatch.setattr(stay_on, "command", command)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    s = stay_on.Settings(1, 4, 120, scratch, None)
    result = stay_on.WorkloadResult("gpt", modes)
    said: list[str] = []
    stay_on.one_run(result, 1, s, said.append)
    assert result.failed == {}, said
    other = result.runs[0]["other"]
    assert other.ratio == pytest.approx(1.5) and other.cpu_ratio == pytest.approx(1.5)
    assert other.gpu_ratio == pytest.approx(1.5) and other.step_bound == pytest.approx(1.5)
    assert result.notes == ["counters: cpu-time (no hardware counters: stand-in)"]
    goal = Goal("x", "stand-in", "other", ("gpt",), 1.4)
    goals = stay_on.goal_results({"gpt": result}, [goal])
    assert [(g.passed("wall"), g.passed("free")) for g in goals] == [(False, False)]
    text = stay_on.report({"gpt": result}, goals, s)
    assert "| slower stand-in |" in text and "1: 1.500x FAIL, 1.500 FAIL" in text
    assert "goal x, gpt: noise-free figure is CPU time for instructions" in text
    assert not list(scratch.glob("gpt-*"))      # the run directories are gone


def test_a_program_that_fails_is_named_and_leaves_the_others_figures(tmp_path, monkeypatch):
    (tmp_path / "plain.py").write_text(STAND_IN.format(bench=str(ROOT / "bench"),
                                                       slow="never"))
    (tmp_path / "broken.py").write_text("import sys\nsys.exit('no GPU here')\n")
    modes = [stay_on.Mode("bare", "bare"), stay_on.Mode("other", "broken")]
    commands = {"bare": tmp_path / "plain.py", "other": tmp_path / "broken.py"}
    real = stay_on.command
    monkeypatch.setattr(stay_on, "command", lambda mode, w, spec, out, s: real(
        mode, w, spec, out, stay_on.Settings(s.runs, s.rounds, s.limit_s, s.scratch, None,
                                             commands[mode.name])))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = stay_on.WorkloadResult("gpt", modes)
    said: list[str] = []
    stay_on.one_run(result, 1, stay_on.Settings(1, 3, 60, scratch, None), said.append)
    assert set(result.failed) == {"bare", "other"}
    assert result.failed["other"].startswith("gpt other (run 1): exit status 1")
    assert result.runs == [{}]
    text = stay_on.report({"gpt": result}, [], stay_on.Settings(1, 3, 60, scratch, None))
    rows = [ln for ln in text.splitlines() if ln.startswith("| broken ")]
    assert len(rows) == 1 and rows[0].split("|")[2].strip() == "FAILED"
    assert "\n- FAILED: gpt other (run 1): exit status 1\n" in text
    assert ("\n- FAILED: gpt bare (run 1): stopped: gpt other (run 1) ended (exit status 1) "
            "before it was ready") in text


def test_the_whole_command_says_what_it_left_out_and_judges_the_rest(tmp_path, monkeypatch,
                                                                     capsys):
    """main() over stand-ins for the GPU, the subscriber and cudump: the CUPTI subscriber
    and the stay-on mode are left out, each with a line; --check-nan's goal is judged, run by
    run, the goals of the modes left out are said not judged, and the exit status is 1."""
    for name, slow in (("plain.py", "never"), ("slow.py", "slow.py")):
        (tmp_path / name).write_text(STAND_IN.format(bench=str(ROOT / "bench"), slow=slow))
    real = stay_on.command

    def command(mode, workload, spec, out, s):
        cmd = real(mode, workload, spec, out,
                   stay_on.Settings(s.runs, s.rounds, s.limit_s, s.scratch, None,
                                    tmp_path / ("plain.py" if mode.name == "bare"
                                                else "slow.py")))
        return cmd if mode.cudump is None else [*cmd[cmd.index("--") + 1:], "--out", str(out)]

    monkeypatch.setattr(stay_on, "command", command)
    monkeypatch.setattr(stay_on, "device_name", lambda _who: "a stand-in device")
    monkeypatch.setattr(stay_on, "check_needs", lambda workloads: None)
    monkeypatch.setattr(stay_on, "cupti_files", lambda scratch: None)
    monkeypatch.setattr(stay_on, "cudump_help", lambda: HELP)
    status = stay_on.main(["--only", "gpt", "--runs", "2", "--rounds", "3"])
    out = capsys.readouterr().out
    assert status == 1
    assert "cupti: left out: no CUPTI subscriber could be built here" in out
    assert "stay-on: left out: this cudump does not accept --watch-nan" in out
    goal4 = [ln for ln in out.splitlines() if ln.startswith("| 4 exact --check-nan")]
    assert len(goal4) == 1, out
    cells = [c.strip() for c in goal4[0].strip("|").split("|")]
    assert cells[1] == "gpt"
    assert cells[4] == "1: 1.500x pass, 1.500 pass; 2: 1.500x pass, 1.500 pass"
    assert cells[5:] == ["pass", "pass"]
    for key in "1235":
        assert f"- goal {key} (" in out
    assert "- goal 1 (stay-on, eager launch-bound training step): not judged: stay-on did " \
           "not run" in out
    assert "- goal 5 (--trace costs no more than the CUPTI subscriber): not judged: cupti " \
           "did not run" in out
    assert ("run 1, cudump --check-nan (exact): 100 program kernel runs, 10 launches of "
            "cudump's kernel from the host, 0 NaN/Inf reports") in out


def test_a_run_is_checked_for_having_done_its_work(tmp_path):
    """A loss gone non-finite, a cudump run without its summary or its trace, and a subscriber
    that counted nothing each fail the run, naming it; a profiler that failed is noted."""
    bare, trace, cupti = stay_on.MODES[0], stay_on.MODES[1], stay_on.MODES[2]
    clean = program([1.0])
    with pytest.raises(BenchError, match=r"^w: the workload's loss or output went non-finite"):
        stay_on.checked(bare, ProgramRun(**{**clean.__dict__, "check": float("nan")}), "",
                        tmp_path, "w")
    lost = "stay_on_program.py: torch.profiler failed: CUPTI_ERROR_NOT_INITIALIZED\n"
    assert stay_on.checked(bare, clean, lost, tmp_path, "w") == (
        None, "no GPU figures: torch.profiler failed: CUPTI_ERROR_NOT_INITIALIZED")
    with pytest.raises(BenchError, match="^w: no readable summary.json"):
        stay_on.checked(trace, clean, "", tmp_path / "none", "w")
    (tmp_path / "summary.json").write_text('{"launches": 10, "tool_launches": 0}')
    with pytest.raises(BenchError, match="^w: --trace wrote no trace.jsonl"):
        stay_on.checked(trace, clean, "", tmp_path, "w")
    (tmp_path / "trace.jsonl").write_text("")
    counts, note = stay_on.checked(trace, clean, "", tmp_path, "w")
    assert counts == CudumpCounts(10, 0, 0, 0)
    assert note == ("10 program kernel runs, 0 launches of cudump's kernel from the host, "
                    "0 NaN/Inf reports")
    with pytest.raises(BenchError, match="^w: the CUPTI subscriber printed no count"):
        stay_on.checked(cupti, clean, "", tmp_path, "w")
    assert stay_on.checked(cupti, clean, "cupti_count: 1234 launches\n", tmp_path, "w") == (
        None, "the subscriber counted 1234 launches")
