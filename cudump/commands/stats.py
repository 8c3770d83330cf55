"""`cudump stats RUN`: per-kernel statistics of any run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cudump.analysis.job_order import job_order_lines
from cudump.analysis.job_runs import node_runs, one_run
from cudump.analysis.report.tables import fit, format_table
from cudump.analysis.stats import (
    KernelStats,
    LayerRun,
    RunStats,
    format_shape,
    layer_stats,
    run_stats,
)
from cudump.commands import KERNEL_PATTERN_HELP, RUN_METAVAR
from cudump.kernels.pattern import KernelPattern
from cudump.kernels.unmatched import NamedPattern, SeenKernel, unmatched_lines
from cudump.rundir.job import is_job
from cudump.rundir.layout import TRACE_FILE
from cudump.rundir.runs import kernel_pattern, short_kernel_name
from cudump.rundir.summary import plural
from cudump.rundir.triggers import read_triggers

HEADERS = ["kernel", "launches", "in graphs", "shapes", "most common grid / block",
           "snapshots", "failed", "digests", "NaN/Inf"]
RIGHT = [False, True, True, True, False, True, True, True, True]
# Where the run's NaN/Inf reports say where they came from: how many of each kernel's
# it produced from finite inputs, and how many it carried on from an input's.
ORIGIN_HEADERS = ["produced", "propagated"]


class StatsCommand:
    name = "stats"
    help = ("Per-kernel statistics of a run directory: launches, grid and block shapes, "
            "snapshots, failed ones, digests and NaN/Inf reports (produced or propagated), "
            "and the ranks of processes that have one, from whichever of summary.json, "
            "trace.jsonl and manifest.jsonl it holds.")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.epilog = ("Launch counts come from summary.json (from trace.jsonl where the run "
                         "ended before writing it); grid and block shapes need a trace "
                         "(--trace), '-' without one; snapshots, failed ones, digests and "
                         "NaN/Inf reports come from manifest.jsonl. " + KERNEL_PATTERN_HELP)
        parser.add_argument("run", type=Path, metavar=RUN_METAVAR,
                            help="run directory (holds summary.json, trace.jsonl and/or "
                                 "manifest.jsonl), or a job directory (cudump --job): a row "
                                 "per node and kernel")
        parser.add_argument("--kernel", metavar="PATTERN",
                            help="only kernels matching PATTERN (glob such as 'ns::k*', a "
                                 "kernel name, or re:REGEX)")
        parser.add_argument("--full-names", action="store_true",
                            help="print whole demangled signatures, not shortened names")
        parser.add_argument("--against", type=Path, metavar="OTHER",
                            help="with a job (or run): the first place, in the job's order, "
                                 "where a rank's launches or digests differ from OTHER's")
        parser.add_argument("--by", choices=("kernel", "layer"), default="kernel",
                            help="group by kernel (the default) or by layer: the module (or "
                                 "innermost scope) and pass the launches were made in, in "
                                 "the order of their first launches, with which layers "
                                 "produced NaN/Inf and which only propagated it")
        parser.add_argument("--node", metavar="NAME",
                            help="a job directory (cudump --job): only this node's run")

    def run(self, args: argparse.Namespace) -> int:
        pattern = kernel_pattern(args.kernel)
        if args.by == "layer":
            run = one_run(args.run, args.node, "stats --by layer")
            for line in layer_lines(layer_stats(run, pattern)):
                print(line)
            return 0
        job = is_job(args.run)
        if job or args.against is not None:
            if job:
                for line in job_stats_lines(args.run, args.node, pattern, args.full_names):
                    print(line)
            # The job as a whole: its ranks in one order (analysis/job_order.py).
            for line in job_order_lines(args.run, args.against):
                print(line)
            return 0
        one_run(args.run, args.node, "stats")      # --node of a run: refused
        stats = run_stats(args.run, pattern)
        for line in stats_lines(stats, stats.select(pattern), args.full_names):
            print(line)
        say_unmatched("stats", pattern, stats)
        return 0


def say_unmatched(command: str, pattern: KernelPattern | None, stats: RunStats) -> None:
    """`--kernel PATTERN` that names no kernel of the run: one line on stderr with the names
    it may have meant (the exit status stays 0, as for any selection that is empty)."""
    if pattern is None:
        return
    seen = [SeenKernel(k.kernel, k.mangled) for k in stats.kernels.values()]
    for line in unmatched_lines([NamedPattern(f"--kernel '{pattern.text}'", pattern)], seen,
                                prefix=f"cudump {command}", what=f"kernel of {stats.path}"):
        print(line, file=sys.stderr)


def job_stats_lines(job: Path, node: str | None, pattern: KernelPattern | None,
                    full_names: bool) -> list[str]:
    """`cudump stats JOB`: each node's kernels, a row per node and kernel (a `node` column),
    then the job's triggers (the nodes that failed or found NaN/Inf)."""
    nodes = node_runs(job, node)
    kernels: list[KernelStats] = []
    names: list[str] = []
    sources: dict[str, None] = {}
    for job_node in nodes:
        stats = run_stats(job_node.run, pattern)
        chosen = stats.select(pattern)
        kernels += chosen
        names += [job_node.name] * len(chosen)
        sources.update(dict.fromkeys(stats.sources))
    merged = RunStats(job, {}, list(sources), None)
    lines = stats_lines(merged, kernels, full_names, names)
    lines[-1] += f" on {plural(len(nodes), 'node')}"
    lines += [f"trigger: {t.text()}" for t in read_triggers(job) if node in (None, t.node)]
    return lines


def stats_lines(stats: RunStats, kernels: list[KernelStats],
                full_names: bool = False, nodes: list[str] | None = None) -> list[str]:
    """The table of `kernels` (KernelStats) and a line saying where the figures come from;
    `nodes`: a job's, each kernel's node (a `node` column after `ranks`)."""
    traced = TRACE_FILE in stats.sources
    origins = any(k.nan_produced or k.nan_propagated for k in kernels)
    rows = []
    for k in kernels:
        name = k.kernel if full_names else fit(short_kernel_name(k.kernel), 48)
        common = k.common_shape()
        if common is None:
            shape_count, shape_text = "-", "-"
        else:
            shape, n = common
            shape_count = str(len(k.shapes))
            shape_text = format_shape(shape) + (f" ({n} of {k.shapes.total()})"
                                                if len(k.shapes) > 1 else "")
        rows.append([name, str(k.launches), str(k.graph), shape_count, shape_text,
                     str(k.snapshots), str(k.failed), str(k.digests), str(k.nan_reports)]
                    + ([str(k.nan_produced), str(k.nan_propagated)] if origins else []))
    headers, right = HEADERS, RIGHT
    if origins:
        headers, right = HEADERS + ORIGIN_HEADERS, RIGHT + [True, True]
    if any(k.ranks for k in kernels):     # processes with ranks: which ranks ran each kernel
        headers, right = headers + ["ranks"], right + [False]
        rows = [row + [",".join(map(str, sorted(k.ranks))) or "-"]
                for row, k in zip(rows, kernels, strict=True)]
    if nodes is not None:
        headers, right = headers + ["node"], right + [False]
        rows = [row + [name] for row, name in zip(rows, nodes, strict=True)]
    lines = format_table(headers, rows, right) if rows else []
    total = sum(k.launches for k in kernels)
    where = ", ".join(stats.sources)
    note = "" if traced else "; shapes need a trace (--trace)"
    distinct = len({k.kernel for k in kernels})
    lines.append(f"{plural(distinct, 'kernel')}, {plural(total, 'launch', 'launches')} "
                 f"(from {where}{note})")
    return lines


LAYER_HEADERS = ["layer", "pass", "steps", "launches", "kernels", "NaN/Inf", "produced",
                 "propagated"]
LAYER_RIGHT = [False, False, False, True, True, False, True, True]


def _steps(steps: set[int]) -> str:
    if not steps:
        return "-"
    low, high = min(steps), max(steps)
    return str(low) if low == high else f"{low}-{high}"


def layer_lines(run: LayerRun) -> list[str]:
    """`cudump stats --by layer`: a row per layer and pass, in the order of their first
    launches; its NaN/Inf column says `produced` where a launch of it made NaN/Inf from
    finite inputs and `propagated` where its launches only carried it on."""
    rows = [[x.layer if x.layer is not None else "(no scope)", x.pass_ or "-", _steps(x.steps),
             str(x.launches), str(len(x.kernels)), x.verdict or "-", str(x.nan_produced),
             str(x.nan_propagated)] for x in run.layers]
    lines = format_table(LAYER_HEADERS, rows, LAYER_RIGHT) if rows else []
    named = sum(1 for x in run.layers if x.layer is not None)
    total = sum(x.launches for x in run.layers)
    counted = ("" if run.launches_from in (None, TRACE_FILE) else
               "; launches with records only: a trace (--trace) counts every one")
    lines.append(f"{plural(named, 'layer')}, {plural(total, 'launch', 'launches')} "
                 f"(from {run.launches_from or 'no trace or manifest'}{counted})")
    if not run.scoped:
        lines.append("no launch of this run names a scope (run with --layers for PyTorch "
                     "modules, or NVTX ranges)")
    return lines
