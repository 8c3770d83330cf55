"""`disable [N...]`: breakpoints that stop nothing until enabled again."""

from __future__ import annotations

import argparse

from cudump.prompt.commands._numbers import breakpoint_number, joined
from cudump.prompt.context import Context
from cudump.prompt.registry import command, make_parser

parser = make_parser("disable", "Disable breakpoints (all of them without N).",
                     "A disabled breakpoint stops nothing until it is enabled again.")
parser.add_argument("numbers", nargs="*", metavar="N", help="breakpoint numbers")


@command(parser, category="breakpoints", complete="breakpoints")
def disable(ctx: Context, args: argparse.Namespace) -> None:
    table = ctx.debugger.breakpoints
    numbers = list(dict.fromkeys(breakpoint_number(n) for n in args.numbers))
    for number in numbers:
        table.get(number)     # all exist, or nothing changes
    done: list[int] = []
    if not numbers:
        done = table.set_enabled(None, False)
    for number in numbers:
        done += table.set_enabled(number, False)
    ctx.debugger.changed()
    if not done:
        ctx.say("No breakpoints.")
    else:
        ctx.say(f"Disabled breakpoint{'s' if len(done) > 1 else ''} {joined(done)}.")
