"""`delete [N...]` (`d`): delete breakpoints, all of them without N."""

from __future__ import annotations

import argparse

from cudump.prompt.commands._numbers import breakpoint_number, joined
from cudump.prompt.context import Context
from cudump.prompt.registry import command, make_parser

parser = make_parser("delete", "Delete breakpoints (all of them without N).")
parser.add_argument("numbers", nargs="*", metavar="N", help="breakpoint numbers")


@command(parser, category="breakpoints", aliases=("d",), complete="breakpoints")
def delete(ctx: Context, args: argparse.Namespace) -> None:
    table = ctx.debugger.breakpoints
    numbers = list(dict.fromkeys(breakpoint_number(n) for n in args.numbers))
    for number in numbers:
        table.get(number)     # all exist, or nothing is deleted
    gone: list[int] = []
    if not numbers:
        gone = table.delete(None)
    for number in numbers:
        gone += table.delete(number)
    ctx.debugger.changed()
    if not gone:
        ctx.say("No breakpoints to delete.")
    else:
        ctx.say(f"Deleted breakpoint{'s' if len(gone) > 1 else ''} {joined(gone)}.")
