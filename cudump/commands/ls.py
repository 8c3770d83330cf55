"""`cudump ls RUN`: a run's snapshots as a table."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from cudump.analysis.job_runs import has_snapshots, one_run, open_run
from cudump.analysis.report.tables import (
    LS_HEADERS,
    LS_RIGHT,
    format_table,
    snapshot_rows,
    with_node_column,
    with_rank_column,
    with_where_column,
)
from cudump.analysis.stats import (
    DIGEST,
    FAILED,
    REPORT,
    SNAPSHOT,
    record_kind,
    run_stats,
)
from cudump.commands import (
    KERNEL_PATTERN_HELP,
    RUN_METAVAR,
    add_launch_option,
    launch_choice,
)
from cudump.commands.stats import job_stats_lines, say_unmatched, stats_lines
from cudump.rundir import reading
from cudump.rundir.job import is_job
from cudump.rundir.layout import MANIFEST_FILE
from cudump.rundir.runs import Snapshot, kernel_pattern
from cudump.rundir.summary import plural
from cudump.rundir.wheres import record_where


class LsCommand:
    name = "ls"
    help = ("List the records of a run directory: snapshots (files of data), digests, NaN/Inf "
            "reports (of a run without any, its kernels, as cudump stats shows them).")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.epilog = ("The # column is the snapshot's index in manifest.jsonl (from 0); "
                         "`cudump show RUN --index N` shows that snapshot. "
                         + KERNEL_PATTERN_HELP)
        parser.add_argument("run", type=Path, metavar=RUN_METAVAR,
                            help="run directory, or a job directory (cudump --job): every "
                                 "node's records, with a node column")
        parser.add_argument("--node", metavar="NAME", help="a job: only this node's records")
        parser.add_argument("--kernel", metavar="PATTERN",
                            help="only kernels matching PATTERN (glob such as 'ns::k*', a "
                                 "kernel name, or re:REGEX)")
        add_launch_option(parser, "only this process")
        parser.add_argument("--arg", type=int, help="only this argument index")
        parser.add_argument("--phase", choices=("before", "after"), help="only this phase")
        parser.add_argument("--full-names", action="store_true",
                            help="print whole demangled signatures, not shortened names")

    def run(self, args: argparse.Namespace) -> int:
        pattern = kernel_pattern(args.kernel)
        job = is_job(args.run)
        if job and not has_snapshots(args.run, args.node):
            for line in job_stats_lines(args.run, args.node, pattern, args.full_names):
                print(line)
            print(f"0 snapshots: no node of {args.run} has a {MANIFEST_FILE} (no rule took "
                  f"any); the kernels above are `cudump stats {args.run}`")
            return 0
        if not job and not reading.present(one_run(args.run, args.node, "ls") / MANIFEST_FILE):
            # A run no rule took anything of (--trace, or nothing at all): its kernels.
            stats = run_stats(args.run, pattern)
            for line in stats_lines(stats, stats.select(pattern), args.full_names):
                print(line)
            say_unmatched("ls", pattern, stats)
            print(f"0 snapshots: {args.run} has no {MANIFEST_FILE} (no rule took any); the kernels "
                  f"above are `cudump stats {args.run}`")
            return 0
        run = open_run(args.run, args.node)
        launch, pid = launch_choice(args)
        snaps = run.select(pattern, arg=args.arg, phase=args.phase, launch=launch, pid=pid)
        headers, right, rows = LS_HEADERS, LS_RIGHT, snapshot_rows(snaps, args.full_names)
        if any(s.record.rank is not None for s in snaps):
            headers, right, rows = with_rank_column(snaps, headers, right, rows)
        if job:
            headers, right, rows = with_node_column(snaps, headers, right, rows)
        if any(record_where(s.record.extra) for s in snaps):
            headers, right, rows = with_where_column(snaps, headers, right, rows)
        for line in format_table(headers, rows, right):
            print(line)
        print(count_line(snaps, len(run.snapshots)))
        if pattern is not None and not run.select(pattern) and not job:
            say_unmatched("ls", pattern, run_stats(args.run))
        return 0


def count_line(snaps: list[Snapshot], total: int) -> str:
    """`9 of 9 records: 5 snapshots, 4 NaN/Inf reports`: the manifest's records shown, by
    kind, counted as stats and the end-of-run summary count them (analysis.stats)."""
    kinds = Counter(record_kind(s.record) for s in snaps)
    parts = [plural(kinds[SNAPSHOT], SNAPSHOT)]
    parts += [plural(kinds[kind], kind) for kind in (DIGEST, REPORT) if kinds[kind]]
    if kinds[FAILED]:
        parts.append(f"{kinds[FAILED]} failed (not captured)")
    unreadable = sum(1 for s in snaps if s.captured and not s.ok)
    if unreadable:
        parts.append(f"{unreadable} unreadable")
    if kinds[DIGEST] and not kinds[SNAPSHOT]:
        parts.pop(0)           # a run of digests: no files of data to speak of
    return f"{len(snaps)} of {plural(total, 'record')}: {', '.join(parts)}"
