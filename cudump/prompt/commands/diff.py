"""`diff argN`: an argument's buffer before the kernel against after it (kept by `step`)."""

from __future__ import annotations

import argparse
import re

import numpy as np

from cudump.analysis.diff.arrays import compare_arrays
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.report.text import file_report
from cudump.prompt.context import CommandError, Context, KeptArg
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser(
    "diff", "Compare an argument's buffer before and after the kernel.",
    "Needs 'step' (or 'finish') first: it keeps the buffers before the kernel runs. The\n"
    "metrics are those of 'cudump diff A B' (A: before, B: after).")
parser.add_argument("arg", metavar="argN", help="the pointer argument")
parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
parser.add_argument("--rtol", type=float, default=0.0,
                    help="relative tolerance, times |after| (default 0)")

_ARGN = re.compile(r"^arg(\d+)$")


def _array(entry: KeptArg, data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.dtype(entry.plan.dtype)).reshape(entry.plan.shape)


@command(parser, requires=(STOPPED,), complete="args")
def diff(ctx: Context, args: argparse.Namespace) -> None:
    m = _ARGN.match(args.arg)
    if m is None:
        raise CommandError(f"diff: '{args.arg}' is not an argument (write argN, e.g. arg2)")
    arg = ctx.arg(int(m.group(1)))
    info = ctx.stopped.info
    kept = ctx.kept
    if kept is None or (kept.pid, kept.launch) != (info.pid, info.launch):
        raise CommandError(f"diff: nothing to compare yet: no copy of arg{arg.index} from "
                           f"before launch {info.launch} ran; 'step' at a breakpoint keeps "
                           "the buffers before the kernel and stops after it")
    if arg.index in kept.skipped:
        raise CommandError(f"diff: arg{arg.index} was not kept: {kept.skipped[arg.index]}")
    entry = kept.args.get(arg.index)
    if entry is None or entry.after is None:
        raise CommandError(f"diff: arg{arg.index} does not point into a tracked allocation; "
                           "nothing was kept")
    tol = Tolerance(args.atol, args.rtol)
    metrics = compare_arrays(_array(entry, entry.before), _array(entry, entry.after), tol)
    where = f"0x{entry.plan.address:x}"
    for line in file_report(f"arg{arg.index} at {where} before launch {info.launch}",
                            f"arg{arg.index} at {where} after launch {info.launch}",
                            metrics, tol):
        ctx.say(line)
