"""`cudump ls RUN`: a run's snapshots as a table."""

from __future__ import annotations

import argparse
from pathlib import Path

from cudump.report import LS_HEADERS, LS_RIGHT, format_table, snapshot_rows
from cudump.runs import Run


class LsCommand:
    name = "ls"
    help = "List the snapshots of a run directory."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.epilog = ("The # column is the snapshot's index in manifest.jsonl (from 0); "
                         "`cudump show RUN --index N` shows that snapshot.")
        parser.add_argument("run", type=Path, help="run directory (holds manifest.jsonl)")
        parser.add_argument("--kernel", metavar="PATTERN",
                            help="only kernels matching PATTERN (glob, or a substring)")
        parser.add_argument("--arg", type=int, help="only this argument index")
        parser.add_argument("--phase", choices=("before", "after"), help="only this phase")
        parser.add_argument("--full-names", action="store_true",
                            help="print whole demangled signatures, not shortened names")

    def run(self, args: argparse.Namespace) -> int:
        run = Run.open(args.run)
        snaps = run.select(args.kernel, arg=args.arg, phase=args.phase)
        for line in format_table(LS_HEADERS, snapshot_rows(snaps, args.full_names), LS_RIGHT):
            print(line)
        errors = sum(1 for s in snaps if not s.ok)
        tail = f", {errors} not captured" if errors else ""
        print(f"{len(snaps)} of {len(run.snapshots)} snapshots{tail}")
        return 0
