"""`cudump [options] [--] PROGRAM [ARGS...]`: run a program under the shim."""

from __future__ import annotations

import argparse
from pathlib import Path

from cudump.errors import UsageError
from cudump.rules import load_rules
from cudump.session import RunOptions, Session, default_run_dir
from cudump.snapshots import staging_size_arg


class RunCommand:
    name = "run"
    help = ("Run a CUDA program under cudump: trace its launches and snapshot kernel "
            "argument buffers. Subcommands: diff, ls, show (cudump SUBCOMMAND --help).")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--trace", action="store_true",
                            help="print one line per kernel launch (and graph launch) on stderr")
        parser.add_argument("--out", type=Path, metavar="DIR",
                            help="run directory (default: a fresh cudump-out/<n>/)")
        parser.add_argument("--rule", action="append", type=Path, default=[], metavar="FILE",
                            help="YAML rule file naming the kernels and arguments to snapshot "
                                 "(repeatable)")
        parser.add_argument("--max-bytes", type=staging_size_arg, metavar="SIZE",
                            help="stop taking snapshots once this much has been planned "
                                 "(e.g. 2G); the program carries on")
        parser.add_argument("--staging", type=staging_size_arg, default=256 << 20,
                            metavar="SIZE",
                            help="shared staging area per process (default 256M): the largest "
                                 "set of buffers one launch can snapshot")
        parser.add_argument("program", metavar="PROGRAM", help="the program to run")
        parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                            help="its arguments")

    def run(self, args: argparse.Namespace) -> int:
        if not args.program:
            raise UsageError("no program given; usage: cudump [options] [--] PROGRAM [ARGS...]")
        # Rules are checked before anything runs: a bad rule file launches nothing.
        rules = load_rules(args.rule) if args.rule else []
        run_dir: Path = args.out if args.out else default_run_dir()
        run_dir.mkdir(parents=True, exist_ok=True)
        options = RunOptions(argv=[args.program, *args.args], run_dir=run_dir, trace=args.trace,
                             rules=rules, max_bytes=args.max_bytes,
                             staging_bytes=args.staging)
        return Session(options).run()
