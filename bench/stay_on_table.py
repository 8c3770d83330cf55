"""The pure part of bench/stay_on.py: what its programs print, read back; the figures of each
workload and mode set against bare's; the goals of the stay-on NaN/Inf detection, judged on
the wall clock and on figures the host's clock speed does not move; and the tables.

Nothing here needs a GPU or PyTorch (tests/test_bench_stay_on.py runs it on any machine).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# A run that cannot be measured: its message names the run and what was wrong. The same class
# as the one bench/realworld_run.py's ring of processes gives back for a run that failed.
from realworld_table import BenchError

# cudump's own kernels (shim/gpu/tools.cu): every one is named with this prefix.
TOOL_KERNEL_PREFIX = "cudump_"
# Device activity that is not a kernel, as torch.profiler names it.
NOT_KERNELS = ("Memcpy", "Memset")
MISSING = "-"           # a figure the program could not take (no hardware counters)


def is_tool_kernel(name: str) -> bool:
    return name.startswith(TOOL_KERNEL_PREFIX)


@dataclass(frozen=True)
class GpuTotals:
    """What CUPTI's activity records (through torch.profiler) said of a profiled stretch:
    microseconds and counts of cudump's kernels and of the program's, and the device time of
    copies and memsets."""

    tool_us: float = 0.0
    tool_kernels: float = 0
    program_us: float = 0.0
    program_kernels: float = 0
    other_us: float = 0.0       # copies and memsets

    def per(self, steps: int) -> GpuTotals:
        """The same, a step of `steps`."""
        return GpuTotals(self.tool_us / steps, self.tool_kernels / steps,
                         self.program_us / steps, self.program_kernels / steps,
                         self.other_us / steps)

    @property
    def total_us(self) -> float:
        return self.tool_us + self.program_us + self.other_us


def gpu_totals(events: Iterable[tuple[str, float]]) -> GpuTotals:
    """(name, device µs) of each device activity record, summed by whose it is."""
    tool_us = program_us = other_us = 0.0
    tools = programs = 0
    for name, us in events:
        if is_tool_kernel(name):
            tool_us += us
            tools += 1
        elif name.startswith(NOT_KERNELS):
            other_us += us
        else:
            program_us += us
            programs += 1
    return GpuTotals(tool_us, tools, program_us, programs, other_us)


# -- what a program prints ------------------------------------------------------------------

# Per chunk of steps, comma-separated (MISSING where not taken): wall ms a step, and the
# launching thread's and all threads' counts a step.
CHUNK_KEYS = ("chunk_ms", "instr", "cycles", "cpu_us", "all_instr", "all_cycles", "all_cpu_us")
# One number each; the gpu_ keys only where the program profiled (per step).
GPU_KEYS = ("gpu_tool_us", "gpu_tool_kernels", "gpu_program_us", "gpu_program_kernels",
            "gpu_other_us")
LINE = re.compile(r"^([a-z_]+) (.*)$")


@dataclass(frozen=True)
class ProgramRun:
    """What one run of bench/stay_on_program.py printed: per chunk of steps, the wall time and
    the counts of a step; how it counted; what a profiled step ran on the GPU (None where it
    did not profile); and its loss or output after the last step."""

    workload: str
    steps: int                          # steps a chunk (every figure is a step's)
    counters: str                       # how it counted (perfcount.Counters.describe)
    chunk_ms: list[float]
    instr: list[float | None]
    cycles: list[float | None]
    cpu_us: list[float]
    all_instr: list[float | None]
    all_cycles: list[float | None]
    all_cpu_us: list[float]
    gpu: GpuTotals | None
    check: float                        # finite where the run went as it should

    @property
    def hardware(self) -> bool:
        return all(v is not None for v in self.instr) and bool(self.instr)


def _number(text: str, key: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BenchError(f"{where}: `{key}` is not a number: {text!r}") from None
    return value


def _numbers(text: str, key: str, where: str, missing_ok: bool) -> list[float | None]:
    values: list[float | None] = []
    for part in text.split(","):
        part = part.strip()
        if part == MISSING and missing_ok:
            values.append(None)
        else:
            values.append(_number(part, key, where))
    return values


def parse_program(stdout: str, where: str) -> ProgramRun:
    """The figures a program printed (one `key value` line each); BenchError naming the run
    and the key where one is missing or is not what it should be."""
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        m = LINE.match(line.strip())
        if m:
            found[m.group(1)] = m.group(2).strip()

    def need(key: str) -> str:
        if key not in found:
            raise BenchError(f"{where}: the program printed no `{key}` line")
        return found[key]

    chunks = {key: _numbers(need(key), key, where, missing_ok=key not in ("chunk_ms", "cpu_us",
                                                                           "all_cpu_us"))
              for key in CHUNK_KEYS}
    n = len(chunks["chunk_ms"])
    uneven = [key for key, values in chunks.items() if len(values) != n]
    if uneven:
        raise BenchError(f"{where}: `{uneven[0]}` has {len(chunks[uneven[0]])} values, "
                         f"`chunk_ms` {n}")
    steps = _number(need("steps"), "steps", where)
    if steps < 1 or steps != int(steps):
        raise BenchError(f"{where}: `steps` should be a whole number of steps: {steps}")
    gpu = None
    if any(key in found for key in GPU_KEYS):
        v = {key: _number(need(key), key, where) for key in GPU_KEYS}
        gpu = GpuTotals(v["gpu_tool_us"], v["gpu_tool_kernels"], v["gpu_program_us"],
                        v["gpu_program_kernels"], v["gpu_other_us"])
    return ProgramRun(
        workload=need("workload"), steps=int(steps), counters=need("counters"),
        chunk_ms=[float(x) for x in chunks["chunk_ms"] if x is not None],
        instr=chunks["instr"], cycles=chunks["cycles"],
        cpu_us=[float(x) for x in chunks["cpu_us"] if x is not None],
        all_instr=chunks["all_instr"], all_cycles=chunks["all_cycles"],
        all_cpu_us=[float(x) for x in chunks["all_cpu_us"] if x is not None],
        gpu=gpu, check=_number(need("check"), "check", where))


def program_lines(run: ProgramRun) -> list[str]:
    """The lines a program prints for `run` (parse_program reads them back)."""
    def joined(values: Sequence[float | None]) -> str:
        return ",".join(MISSING if v is None else f"{v:.6g}" for v in values)

    lines = [f"workload {run.workload}", f"steps {run.steps}", f"counters {run.counters}",
             *(f"{key} {joined(getattr(run, key))}" for key in CHUNK_KEYS)]
    if run.gpu is not None:
        g = run.gpu
        lines += [f"gpu_tool_us {g.tool_us:.6g}", f"gpu_tool_kernels {g.tool_kernels:.6g}",
                  f"gpu_program_us {g.program_us:.6g}",
                  f"gpu_program_kernels {g.program_kernels:.6g}",
                  f"gpu_other_us {g.other_us:.6g}"]
    lines.append(f"check {run.check:.6g}")
    return lines


@dataclass(frozen=True)
class CudumpCounts:
    """What a cudump run's summary.json says of its launches: the program's kernel runs
    (launched, and as nodes of graph launches), cudump's kernel launched from the host
    (tool_launches), and the NaN/Inf reports."""

    launches: int
    graph_kernel_launches: int
    tool_launches: int | None       # None: a cudump without the count
    nan_reports: int

    @classmethod
    def from_summary(cls, data: object, where: str) -> CudumpCounts:
        if not isinstance(data, dict):
            raise BenchError(f"{where}: summary.json is not a JSON object")

        def count(key: str, default: int | None = 0) -> int | None:
            value = data.get(key, default)
            if value is None:
                return None
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise BenchError(f"{where}: summary.json's `{key}` is not a count: {value!r}")
            return value

        launches = count("launches")
        graph = count("graph_kernel_launches")
        reports = count("nan_reports")
        assert launches is not None and graph is not None and reports is not None
        return cls(launches, graph, count("tool_launches", None), reports)

    @property
    def program_kernels(self) -> int:
        return self.launches + self.graph_kernel_launches

    @property
    def tool_per_launch(self) -> float | None:
        if self.tool_launches is None or self.program_kernels == 0:
            return None
        return self.tool_launches / self.program_kernels


# -- a mode's figures against bare's, in one run ----------------------------------------------


def median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(kept) if kept else None


def round_ratios(mode: Sequence[float | None], bare: Sequence[float | None]) -> list[float]:
    """Each round's figure over bare's of the same round (the programs take turns: round r's
    chunks ran within a fraction of a second of each other)."""
    return [m / b for m, b in zip(mode, bare, strict=False)
            if m is not None and b is not None and b > 0]


@dataclass(frozen=True)
class Figures:
    """One mode of one workload in one run, against bare's processes of the same run. Ratios
    are medians over the rounds of each round's figure over bare's; per-step figures are
    medians over the chunks."""

    ms: float | None                    # wall ms a step
    ratio: float | None                 # wall clock, to bare
    instr: float | None                 # the launching thread's instructions a step
    instr_ratio: float | None
    cycles: float | None
    cycles_ratio: float | None
    cpu_us: float | None                # the launching thread's CPU µs a step
    cpu_ratio: float | None
    extra_instr_per_kernel: float | None    # (instr - bare's) / the program's kernels a step
    extra_cpu_ns_per_kernel: float | None   # the same in CPU time
    gpu_us: float | None                # device time a step (profiled), cudump's kernels in
    gpu_ratio: float | None
    tool_fraction: float | None         # cudump's kernels' share of the step's device time
    tool_kernels_per_kernel: float | None   # cudump's kernels run per program kernel (GPU)
    tool_launches_per_launch: float | None  # cudump's host launches per program kernel run
    nan_reports: int | None
    hardware: bool                      # the instruction and cycle counts were taken
    bare_cpu_us: float | None = None    # bare's launching thread's CPU µs a step
    bare_gpu_us: float | None = None    # bare's device time a step
    # every thread of the process (the launching thread's work that cudump's threads took
    # on shows here): instructions and CPU µs a step
    all_instr: float | None = None
    all_cpu_us: float | None = None

    @property
    def cpu_side(self) -> float | None:
        """The launching thread's work a step, to bare's: instructions where counted, else
        its CPU time (which moves with the clock)."""
        return self.instr_ratio if self.hardware else self.cpu_ratio

    @property
    def step_bound(self) -> float | None:
        """The noise-free counterpart of the wall-clock ratio. A step takes the longer of the
        launching thread's work and the GPU's: the thread's is bare's CPU time a step grown
        by the instructions' ratio (the counts, not the clock), the GPU's is the device time
        a step; their longer, over the longer of bare's two. So added work on the side that
        does not bound the step counts only once it makes that side the longer (extra
        instructions a graph launch under a GPU-bound replay). Where one side was not
        measured, the other's ratio alone; None where neither was."""
        cpu = self.cpu_side
        if cpu is None or self.gpu_ratio is None:
            return cpu if cpu is not None else self.gpu_ratio
        if self.bare_cpu_us is None or self.bare_gpu_us is None or self.gpu_us is None:
            return max(cpu, self.gpu_ratio)
        return (max(self.bare_cpu_us * cpu, self.gpu_us)
                / max(self.bare_cpu_us, self.bare_gpu_us))


def figures(mode: ProgramRun, bare: ProgramRun, counts: CudumpCounts | None) -> Figures:
    kernels = bare.gpu.program_kernels if bare.gpu else None
    hardware = mode.hardware and bare.hardware
    instr, bare_instr = median(mode.instr), median(bare.instr)
    cpu, bare_cpu = median(mode.cpu_us), median(bare.cpu_us)

    def per_kernel(a: float | None, b: float | None, scale: float) -> float | None:
        if a is None or b is None or not kernels:
            return None
        return (a - b) * scale / kernels

    gpu_us = gpu_ratio = fraction = tools_per_kernel = None
    if mode.gpu is not None and mode.gpu.total_us > 0:
        gpu_us = mode.gpu.total_us
        fraction = mode.gpu.tool_us / mode.gpu.total_us
        if mode.gpu.program_kernels:
            tools_per_kernel = mode.gpu.tool_kernels / mode.gpu.program_kernels
        if bare.gpu is not None and bare.gpu.total_us > 0:
            gpu_ratio = gpu_us / bare.gpu.total_us
    return Figures(
        ms=median(mode.chunk_ms), ratio=median(round_ratios(mode.chunk_ms, bare.chunk_ms)),
        instr=instr, instr_ratio=median(round_ratios(mode.instr, bare.instr)) if hardware
        else None,
        cycles=median(mode.cycles),
        cycles_ratio=median(round_ratios(mode.cycles, bare.cycles)) if hardware else None,
        cpu_us=cpu, cpu_ratio=median(round_ratios(mode.cpu_us, bare.cpu_us)),
        extra_instr_per_kernel=per_kernel(instr, bare_instr, 1.0) if hardware else None,
        extra_cpu_ns_per_kernel=per_kernel(cpu, bare_cpu, 1e3),
        gpu_us=gpu_us, gpu_ratio=gpu_ratio, tool_fraction=fraction,
        tool_kernels_per_kernel=tools_per_kernel,
        tool_launches_per_launch=counts.tool_per_launch if counts else None,
        nan_reports=counts.nan_reports if counts else None, hardware=hardware,
        bare_cpu_us=bare_cpu,
        bare_gpu_us=bare.gpu.total_us if bare.gpu and bare.gpu.total_us > 0 else None,
        all_instr=median(mode.all_instr) if mode.hardware else None,
        all_cpu_us=median(mode.all_cpu_us))


# -- the goals --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    """A goal of issue 57's list: `mode`'s ratio to bare on `workloads`, at most `limit`;
    or, with `anchor`, at most the anchor mode's figure in the same run. `nothing_found`:
    the run must also report no NaN/Inf (the goal is on a model that makes none)."""

    key: str
    text: str
    mode: str
    workloads: tuple[str, ...]
    limit: float = 0.0
    anchor: str = ""
    nothing_found: bool = False

    def wall_text(self) -> str:
        return f"<= {self.anchor} in the same run" if self.anchor else f"<= {self.limit:.2f}x"

    def free_text(self) -> str:
        """The goal in terms the host's clock speed does not move."""
        if self.anchor:
            return (f"extra launching-thread instructions per program kernel <= {self.anchor}'s "
                    "in the same run")
        return (f"the longer of (bare's launching-thread CPU time x its instructions ratio) "
                f"and GPU time, a step, <= {self.limit:.2f}x bare's longer")


@dataclass(frozen=True)
class Verdict:
    """A goal judged in one run, on one workload: on the wall clock, and noise-free."""

    wall: float | None
    wall_met: bool | None               # None: not judged (no figure)
    free: float | None
    free_met: bool | None
    free_how: str                       # what `free` is, where it is not the goal's own terms
    why: str = ""                       # why a verdict is missing or failed beyond its figure


def judge(goal: Goal, mine: Figures | None, anchor: Figures | None) -> Verdict:
    """`mine`: the goal's mode in the run; `anchor`: the anchor mode's (goal.anchor)."""
    if mine is None:
        return Verdict(None, None, None, None, "", "not run")
    why = ""
    found = goal.nothing_found and bool(mine.nan_reports)
    if found:
        why = f"{mine.nan_reports} NaN/Inf reports on a model that makes none"
    if goal.anchor:
        if anchor is None:
            return Verdict(mine.ratio, None, None, None, "", f"{goal.anchor} not run")
        wall_met = (None if mine.ratio is None or anchor.ratio is None
                    else mine.ratio <= anchor.ratio)
        if mine.hardware and anchor.hardware:
            free, limit = mine.extra_instr_per_kernel, anchor.extra_instr_per_kernel
            how = "extra instructions per program kernel"
        else:
            free, limit = mine.extra_cpu_ns_per_kernel, anchor.extra_cpu_ns_per_kernel
            how = "extra CPU ns per program kernel (no hardware counters: not noise-free)"
        free_met = None if free is None or limit is None else free <= limit
        if limit is not None:
            how += f", {goal.anchor}: {limit:.0f}"
        return Verdict(mine.ratio, wall_met, free, free_met, how, why)
    wall_met = None if mine.ratio is None else mine.ratio <= goal.limit and not found
    free = mine.step_bound
    free_met = None if free is None else free <= goal.limit and not found
    how = "" if mine.hardware else "CPU time for instructions (no hardware counters: " \
                                   "not noise-free)"
    if mine.gpu_ratio is None:
        how = ", ".join(filter(None, [how, "no GPU time (not profiled)"]))
    return Verdict(mine.ratio, wall_met, free, free_met, how, why)


@dataclass
class GoalResult:
    """A goal on one workload over the runs."""

    goal: Goal
    workload: str
    verdicts: list[Verdict] = field(default_factory=list)

    def passed(self, which: str) -> bool | None:
        """Every run met the goal (`which`: "wall" or "free"); None where a run has no
        verdict."""
        met = [getattr(v, f"{which}_met") for v in self.verdicts]
        if not met or any(m is None for m in met):
            return None
        return all(met)


# -- the tables -------------------------------------------------------------------------------


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return MISSING if value is None else f"{value:{spec}}{suffix}"


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1) -> str:
    """A table whose columns are padded so that it also reads as plain text; columns from
    `right_from` on are numbers, set right."""
    lines = [list(header), *[list(r) for r in rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if i >= right_from else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))
                                 ) + " |"

    rule = ["-" * (w - 1) + ":" if i >= right_from else "-" * w for i, w in enumerate(widths)]
    return "\n".join([line(lines[0]), line(rule), *[line(c) for c in lines[1:]]])


FIGURE_HEADER = ("mode", "ms/step", "wall to bare", "M instr/step", "instr to bare",
                 "M cycles/step", "CPU µs/step", "CPU to bare", "all threads M instr/step",
                 "all threads CPU µs/step", "+instr/kernel",
                 "+CPU ns/kernel", "GPU µs/step", "GPU to bare", "cudump GPU",
                 "cudump kernels/kernel", "cudump launches/launch")


def figure_row(label: str, runs: Sequence[Figures]) -> list[str]:
    """A mode's row: each figure as the median over the runs, ratios as each run's, joined
    by "/" (so that a reader sees how they moved)."""
    def mid(name: str) -> float | None:
        return median(getattr(f, name) for f in runs)

    def each(name: str) -> str:
        values = [getattr(f, name) for f in runs]
        return "/".join(fmt(v, ".3f") for v in values) if any(v is not None for v in values) \
            else MISSING

    def millions(name: str) -> str:
        value = mid(name)
        return fmt(None if value is None else value / 1e6, ".3f")

    return [label, fmt(mid("ms"), ".3f"), each("ratio"), millions("instr"),
            each("instr_ratio"), millions("cycles"), fmt(mid("cpu_us"), ".1f"),
            each("cpu_ratio"), millions("all_instr"), fmt(mid("all_cpu_us"), ".1f"),
            fmt(mid("extra_instr_per_kernel"), ".0f"),
            fmt(mid("extra_cpu_ns_per_kernel"), ".0f"), fmt(mid("gpu_us"), ".1f"),
            each("gpu_ratio"), fmt(mid("tool_fraction"), ".1%"),
            fmt(mid("tool_kernels_per_kernel"), ".3f"),
            fmt(mid("tool_launches_per_launch"), ".3f")]


def met_text(met: bool | None) -> str:
    return MISSING if met is None else ("pass" if met else "FAIL")


GOAL_HEADER = ("goal", "workload", "on the wall clock", "noise-free", "runs (wall; noise-free)",
               "wall", "noise-free")


def goal_row(result: GoalResult) -> list[str]:
    goal = result.goal
    runs = []
    for n, v in enumerate(result.verdicts, 1):
        if v.wall is None and v.free is None:
            runs.append(f"{n}: {v.why or 'no figure'}")
            continue
        free_spec = ".0f" if goal.anchor else ".3f"
        text = (f"{n}: {fmt(v.wall, '.3f', 'x')} {met_text(v.wall_met)}, "
                f"{fmt(v.free, free_spec)} {met_text(v.free_met)}")
        if v.why:
            text += f" ({v.why})"
        runs.append(text)
    return [f"{goal.key} {goal.text}", result.workload, goal.wall_text(), goal.free_text(),
            "; ".join(runs) if runs else "not run", met_text(result.passed("wall")),
            met_text(result.passed("free"))]
