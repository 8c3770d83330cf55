"""`disable [N...]`: breakpoints that stop nothing until enabled again."""

from __future__ import annotations

import argparse

from cudump.prompt.commands._numbers import set_enabled
from cudump.prompt.context import Context
from cudump.prompt.registry import command, make_parser

parser = make_parser("disable", "Disable breakpoints (all of them without N).",
                     "A disabled breakpoint stops nothing until it is enabled again.")
parser.add_argument("numbers", nargs="*", metavar="N", help="breakpoint numbers")


@command(parser, category="breakpoints", complete="breakpoints")
def disable(ctx: Context, args: argparse.Namespace) -> None:
    set_enabled(ctx, args.numbers, False)
