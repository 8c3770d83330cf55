"""The goals of NaN/Inf detection meant to stay on, measured side by side in one run, on the wall
clock and on figures the host's clock speed does not move.

Workloads (bench/stay_on_program.py): resnet18 (ResNet-18 batch 8, eager training step), gpt
(a small GPT-style model's eager training step), decode (a transformer's decode step captured
once as a CUDA graph and replayed), resnet50 (ResNet-50 batch 64 training step, bound by the
GPU). Modes (MODES below, one line each): bare, cudump --trace, the CUPTI-subscriber anchor
(bench/cupti_count.c preloaded, no cudump), cudump --check-nan (exact, one scan per launch),
and the stay-on mode; a mode whose cudump option this cudump does not accept is left out with
a line that says so.

For each workload, each of --runs runs starts one process per mode at once; they warm up, then
take turns (bench/turns.py) for --rounds rounds: bare's chunk of steps, then each mode's, so
that each mode's chunk runs within a fraction of a second of bare's; then each profiles a few
steps in its turn. For each workload and mode the table gives, as the median over the rounds
(ratios: each run's, over bare's chunk of the same round):
  - wall ms a step, and its ratio to bare;
  - the launching thread's instructions and cycles a step (hardware counters through
    perf_event_open; where the machine allows none, the output says why and the thread's CPU
    time stands in), the ratio of instructions, and the extra instructions (or CPU ns) per
    program kernel;
  - device time a step (CUPTI activity records through torch.profiler, in the profiled steps),
    its ratio to bare, and the share of it spent in cudump's kernels (named cudump_*);
  - cudump's kernels run per program kernel (the same records, graph nodes included), and
    cudump's launches from the host per program kernel run (summary.json's tool_launches over
    launches and graph kernel runs).
Then each goal, for each run: its wall-clock ratio and its noise-free counterpart, each with
pass or FAIL, and both verdicts over the runs. The noise-free counterpart of a ratio goal: a
step takes the longer of the launching thread's work and the GPU's; the thread's side is
bare's CPU time a step grown by the instructions' ratio, the GPU's the device time a step, and
the longer of the two over the longer of bare's two must stay within the goal (so work added
on the side that does not bound the step counts only once it makes that side the longer).

usage: python3 bench/stay_on.py [--only resnet18,gpt,decode,resnet50] [--modes M,N]
                                [--runs 3] [--rounds 10] [--limit 420] [--quick]
       (GPU: torch, torchvision, cudump installed; the CUDA toolkit's CUPTI for the anchor)
Exits 0 when every run did its work and every goal passed on both counts, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
sys.path.insert(0, str(BENCH))

from gpurun import cudump_command, under_cudump  # noqa: E402
from realworld_run import device_name  # noqa: E402
from stay_on_table import (  # noqa: E402
    FIGURE_HEADER,
    GOAL_HEADER,
    BenchError,
    CudumpCounts,
    Figures,
    Goal,
    GoalResult,
    ProgramRun,
    figure_row,
    figures,
    goal_row,
    judge,
    markdown,
    parse_program,
)

PROGRAM = BENCH / "stay_on_program.py"
WORKLOADS = ("resnet18", "gpt", "decode", "resnet50")
TITLES = {"resnet18": "ResNet-18 b8, eager training step",
          "gpt": "small GPT, eager training step",
          "decode": "transformer decode step, CUDA graph replayed",
          "resnet50": "ResNet-50 b64, training step (GPU-bound)"}
NEEDS = {"resnet18": ("torch", "torchvision"), "gpt": ("torch",), "decode": ("torch",),
         "resnet50": ("torch", "torchvision")}


@dataclass(frozen=True)
class Mode:
    """How a mode's program runs: under cudump with `cudump` options, or under the CUPTI
    subscriber, or bare. `needs`: the cudump option it needs; left out where this cudump does
    not accept it. `profile`: it profiles a few steps with torch.profiler (which the CUPTI
    subscriber's own subscription would stand in the way of)."""

    name: str
    label: str
    cudump: tuple[str, ...] | None = None
    cupti: bool = False
    needs: str = ""
    profile: bool = True


# One line a mode. The stay-on mode's option is a placeholder until cudump has it.
MODES = (
    Mode("bare", "bare"),
    Mode("trace", "cudump --trace", ("--trace",)),
    Mode("cupti", "CUPTI subscriber (no cudump)", cupti=True, profile=False),
    Mode("check-nan", "cudump --check-nan (exact)", ("--check-nan",)),
    Mode("stay-on", "cudump --watch-nan (stay-on)", ("--watch-nan",), needs="--watch-nan"),
)

# Issue 57's goals. --check-nan's present figures on a training step are 1.42-1.51x
# (docs/performance.md, row 14 before this benchmark): it keeps them or better.
GOALS = (
    Goal("1", "stay-on, eager launch-bound training step", "stay-on", ("resnet18", "gpt"),
         1.10, nothing_found=True),
    Goal("2", "stay-on, CUDA-graph decode loop", "stay-on", ("decode",), 1.05,
         nothing_found=True),
    Goal("3", "stay-on, GPU-bound, nothing found", "stay-on", ("resnet50",), 1.02,
         nothing_found=True),
    Goal("4", "exact --check-nan keeps its figures (training step 1.42-1.51x)", "check-nan",
         ("resnet18", "gpt"), 1.51),
    Goal("5", "--trace costs no more than the CUPTI subscriber", "trace", WORKLOADS,
         anchor="cupti"),
)

Say = Callable[[str], None]


def accepts(help_text: str, option: str) -> bool:
    """Whether cudump's --help lists `option` (in its usage line or as an option)."""
    name = re.escape(option)
    return bool(re.search(rf"\[{name}[\] ]", help_text)
                or re.search(rf"^\s+(?:-\w, )?{name}(?![\w-])", help_text, re.MULTILINE))


def cudump_help() -> str:
    done = subprocess.run([*cudump_command(), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=tempfile.gettempdir())
    return done.stdout


def usable_modes(modes: Sequence[Mode], help_text: str, cupti: bool, say: Say
                 ) -> list[Mode]:
    """The modes that can run here, each left out said in one line."""
    kept = []
    for mode in modes:
        if mode.needs and not accepts(help_text, mode.needs):
            say(f"{mode.name}: left out: this cudump does not accept {mode.needs} (the "
                "stay-on mode's option; change its line in bench/stay_on.py's MODES if it has "
                "another name)")
        elif mode.cupti and not cupti:
            say(f"{mode.name}: left out: no CUPTI subscriber could be built here (no CUPTI in "
                "the CUDA toolkit)")
        else:
            kept.append(mode)
    return kept


def chosen_modes(text: str | None) -> tuple[str, ...]:
    """--modes: the names given (bare always runs); ValueError naming an unknown one."""
    if text is None:
        return tuple(m.name for m in MODES)
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {m.name for m in MODES}
    for name in names:
        if name not in known:
            raise ValueError(f"--modes: unknown mode {name!r}: choose from "
                             f"{', '.join(sorted(known - {'bare'}))}")
    return ("bare", *[n for n in names if n != "bare"])


def chosen_workloads(text: str | None) -> tuple[str, ...]:
    if text is None:
        return WORKLOADS
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(WORKLOADS))
    if unknown or not names:
        raise ValueError(f"--only: unknown workload {unknown[0] if unknown else text!r}: "
                         f"choose from {', '.join(WORKLOADS)}")
    return tuple(w for w in WORKLOADS if w in names)


@dataclass
class Settings:
    runs: int
    rounds: int
    limit_s: int
    scratch: Path
    cupti: tuple[Path, Path] | None      # the subscriber and the libcupti it links
    program: Path = PROGRAM              # what each mode runs (its command line as PROGRAM's)


def command(mode: Mode, workload: str, spec: str, out: Path, s: Settings) -> list[str]:
    program = [sys.executable, str(s.program), workload, "--chunks", str(s.rounds),
               "--turns", spec, *([] if mode.profile else ["--no-profile"])]
    if mode.cupti:
        assert s.cupti is not None
        return ["env", f"LD_PRELOAD={s.cupti[1]}:{s.cupti[0]}", *program]
    if mode.cudump is None:
        return program
    return under_cudump(program, out, extra=mode.cudump)


def cupti_count(stderr: str, where: str) -> int:
    """The count bench/cupti_count.c prints at exit: proof that the subscriber was loaded."""
    found = re.findall(r"^cupti_count: (\d+) launches$", stderr, re.MULTILINE)
    if len(found) != 1:
        raise BenchError(f"{where}: the CUPTI subscriber printed no count (not loaded?)")
    return int(found[0])


def checked(mode: Mode, run: ProgramRun, stderr: str, out: Path, where: str
            ) -> tuple[CudumpCounts | None, str]:
    """That the run did its work (a run that quietly did nothing measures nothing): its
    counts from summary.json where cudump ran, and a note of what it did."""
    if not math.isfinite(run.check):
        raise BenchError(f"{where}: the workload's loss or output went non-finite "
                         f"({run.check}): its figures are not those of a clean run")
    lost = re.search(r"^stay_on_program\.py: (torch\.profiler failed: .*)$", stderr,
                     re.MULTILINE)
    counts, note = _counted(mode, stderr, out, where)
    if lost:
        note = "; ".join(filter(None, [note, f"no GPU figures: {lost.group(1)[:200]}"]))
    return counts, note


def _counted(mode: Mode, stderr: str, out: Path, where: str
             ) -> tuple[CudumpCounts | None, str]:
    if mode.cupti:
        return None, f"the subscriber counted {cupti_count(stderr, where)} launches"
    if mode.cudump is None:
        return None, ""
    try:
        data = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError) as err:
        raise BenchError(f"{where}: no readable summary.json: {err}") from None
    counts = CudumpCounts.from_summary(data, where)
    if counts.program_kernels == 0:
        raise BenchError(f"{where}: cudump saw none of the program's launches")
    if "--trace" in mode.cudump and not (out / "trace.jsonl").is_file():
        raise BenchError(f"{where}: --trace wrote no trace.jsonl")
    tools = ("tool_launches: not in this cudump's summary" if counts.tool_launches is None
             else f"{counts.tool_launches} launches of cudump's kernel from the host")
    watched, waited = data.get("graph_replays_watched"), data.get("graph_replays_instrumented")
    graphs = (f", graph replays: {watched} watched, {waited} instrumented (waited for)"
              if isinstance(watched, int) and isinstance(waited, int) and watched + waited
              else "")
    return counts, (f"{counts.program_kernels} program kernel runs, {tools}, "
                    f"{counts.nan_reports} NaN/Inf reports{graphs}")


@dataclass
class WorkloadResult:
    name: str
    modes: list[Mode]
    # per run: mode name -> figures against that run's bare (bare's own included)
    runs: list[dict[str, Figures]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)       # mode -> first failure
    notes: list[str] = field(default_factory=list)


def one_run(result: WorkloadResult, number: int, s: Settings, say: Say) -> None:
    """One run of a workload: every mode's process at once, taking turns."""
    from realworld_run import run_in_turns
    from turns import Ring

    modes = result.modes
    wheres = [f"{result.name} {m.name} (run {number})" for m in modes]
    outs = [s.scratch / f"{result.name}-{m.name}-{number}" for m in modes]
    programs: dict[str, ProgramRun] = {}
    counts: dict[str, CudumpCounts | None] = {}
    try:
        with Ring(s.scratch / f"ring-{result.name}-{number}", len(modes)) as ring:
            cmds = [(command(m, result.name, ring.spec(i), outs[i], s), wheres[i])
                    for i, m in enumerate(modes)]
            done = run_in_turns(ring, cmds, s.scratch, s.limit_s)
        for mode, where, out, got in zip(modes, wheres, outs, done, strict=True):
            try:
                if isinstance(got, Exception):
                    raise got
                program = parse_program(got.stdout, where)
                counts[mode.name], note = checked(mode, program, got.stderr, out, where)
            except BenchError as err:
                first = str(err).splitlines()[0].rstrip(":")
                result.failed.setdefault(mode.name, first)
                say(f"FAILED {err}")
                continue
            programs[mode.name] = program
            if note:
                result.notes.append(f"run {number}, {mode.label}: {note}")
            say(f"run {number} {result.name:8} {mode.name:10} "
                f"{sum(program.chunk_ms) / len(program.chunk_ms):.3f} ms/step")
    finally:
        for out in outs:
            shutil.rmtree(out, ignore_errors=True)
    bare = programs.get("bare")
    if bare is None:
        result.runs.append({})
        return
    if number == 1:
        result.notes.append(f"counters: {bare.counters}")
    result.runs.append({name: figures(p, bare, counts.get(name))
                        for name, p in programs.items()})


def goal_results(results: dict[str, WorkloadResult], goals: Sequence[Goal]
                 ) -> list[GoalResult]:
    out = []
    for goal in goals:
        for workload in goal.workloads:
            if workload not in results:
                continue
            result = GoalResult(goal, workload)
            for run in results[workload].runs:
                result.verdicts.append(judge(goal, run.get(goal.mode),
                                             run.get(goal.anchor) if goal.anchor else None))
            out.append(result)
    return out


def check_needs(workloads: Sequence[str]) -> None:
    for name in workloads:
        for module in NEEDS[name]:
            if importlib.util.find_spec(module) is None:
                raise SystemExit(f"stay_on.py: {name} needs {module}, which does not import "
                                 "here (or leave it out with --only)")


def cupti_files(scratch: Path) -> tuple[Path, Path] | None:
    """The subscriber and the libcupti it links, both preloaded by path (no LD_LIBRARY_PATH,
    which could hand the program the toolkit's libraries instead of its own)."""
    from launch_overhead import build_cupti

    built = build_cupti(scratch)
    if built is None:
        return None
    libs = sorted(built[1].glob("libcupti.so*"), key=lambda p: len(p.name))
    return (built[0], libs[0]) if libs else None


def report(results: dict[str, WorkloadResult], goals: list[GoalResult], s: Settings) -> str:
    lines = []
    for name, result in results.items():
        lines += ["", f"{TITLES[name]} ({name}): median of {s.rounds} rounds a run; ratios are "
                  f"each run's, run 1/run 2/...", ""]
        rows = []
        for mode in result.modes:
            runs = [run[mode.name] for run in result.runs if mode.name in run]
            if runs:
                rows.append(figure_row(mode.label, runs))
            elif mode.name in result.failed:
                rows.append([mode.label, "FAILED", *["-"] * (len(FIGURE_HEADER) - 2)])
        lines.append(markdown(FIGURE_HEADER, rows))
        lines += [f"- {note}" for note in result.notes]
        lines += [f"- FAILED: {reason}" for reason in result.failed.values()]
    lines += ["", "Goals, run by run (wall-clock ratio, then its noise-free counterpart), and "
              "the verdict over all runs on each count:", ""]
    lines.append(markdown(GOAL_HEADER, [goal_row(g) for g in goals], right_from=5))
    for g in goals:
        hows = {v.free_how for v in g.verdicts if v.free_how}
        for how in sorted(hows):
            lines.append(f"- goal {g.goal.key}, {g.workload}: noise-free figure is {how}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--only", help=f"comma-separated workloads: {','.join(WORKLOADS)}")
    parser.add_argument("--modes", help="comma-separated modes besides bare: "
                        f"{','.join(m.name for m in MODES[1:])}")
    parser.add_argument("--runs", type=int, default=3, help="runs of every workload (3)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="rounds of turns a run, one chunk of steps a mode each (10)")
    parser.add_argument("--limit", type=int, default=420,
                        help="seconds a run of one workload may take (420)")
    parser.add_argument("--quick", action="store_true", help="1 run of 4 rounds")
    args = parser.parse_args(argv)
    try:
        workloads = chosen_workloads(args.only)
        names = chosen_modes(args.modes)
    except ValueError as err:
        parser.error(str(err))
    runs, rounds = (1, 4) if args.quick else (args.runs, args.rounds)
    if runs < 1 or rounds < 1 or args.limit < 1:
        parser.error("--runs, --rounds and --limit must be positive")
    check_needs(workloads)
    device = device_name("stay_on.py")
    start = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - start:6.1f} s] {text}", flush=True)

    with tempfile.TemporaryDirectory(prefix="cudump-stay-on-") as tmp:
        scratch = Path(tmp)
        wanted = [m for m in MODES if m.name in names]
        cupti = cupti_files(scratch) if any(m.cupti for m in wanted) else None
        help_text = cudump_help()
        if not accepts(help_text, "--check-nan"):
            raise SystemExit("stay_on.py: `cudump --help` did not answer as cudump does: is "
                             "cudump installed here (pip install .)?")
        modes = usable_modes(wanted, help_text, cupti is not None, say)
        s = Settings(runs, rounds, args.limit, scratch, cupti)
        results = {w: WorkloadResult(w, modes) for w in workloads}
        for number in range(1, runs + 1):
            for w in workloads:
                one_run(results[w], number, s, say)
    names_run = {m.name for m in modes}
    goals = goal_results(results, [g for g in GOALS if g.mode in names_run
                                   and (not g.anchor or g.anchor in names_run)])
    print()
    print(f"device: {device}; {runs} runs, {rounds} rounds each; took "
          f"{time.monotonic() - start:.0f} s")
    print(report(results, goals, s))
    left_out = [g for g in GOALS if g not in [r.goal for r in goals]]
    for g in left_out:
        missing = [name for name in (g.mode, g.anchor) if name and name not in names_run]
        print(f"- goal {g.key} ({g.text}): not judged: {' and '.join(missing)} did not run")
    failed = any(r.failed for r in results.values())
    passed = all(g.passed("wall") and g.passed("free") for g in goals)
    return 0 if passed and not failed and not left_out else 1


if __name__ == "__main__":
    # Ended by a signal (bench/run.sh's timeout), it still kills the programs of the run in
    # progress (each in a session of its own) on its way out, and removes their directories.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    sys.exit(main())
