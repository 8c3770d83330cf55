"""`tbreak PATTERN [if EXPR]`: a breakpoint that deletes itself when it stops."""

from __future__ import annotations

import argparse

from cudump.prompt.commands.break_ import DETAILS, add_breakpoint
from cudump.prompt.context import Context
from cudump.prompt.registry import command, make_parser

parser = make_parser("tbreak", "Stop once at a kernel matching PATTERN [if EXPR].",
                     "The breakpoint is deleted when it stops.\n\n"
                     + DETAILS.replace("break ", "tbreak "),
                     usage="tbreak PATTERN [if EXPR]")
parser.add_argument("spec", metavar="PATTERN [if EXPR]")


@command(parser, category="breakpoints", raw=True, complete="kernels")
def tbreak(ctx: Context, args: argparse.Namespace) -> None:
    add_breakpoint(ctx, args.spec, temporary=True)
