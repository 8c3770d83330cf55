"""`enable [N...]`: breakpoints that stop launches again."""

from __future__ import annotations

import argparse

from cudump.prompt.commands._numbers import set_enabled
from cudump.prompt.context import Context
from cudump.prompt.registry import command, make_parser

parser = make_parser("enable", "Enable breakpoints (all of them without N).")
parser.add_argument("numbers", nargs="*", metavar="N", help="breakpoint numbers")


@command(parser, category="breakpoints", complete="breakpoints")
def enable(ctx: Context, args: argparse.Namespace) -> None:
    set_enabled(ctx, args.numbers, True)
