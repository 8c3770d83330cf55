"""`ignore N COUNT`: pass over the next COUNT launches breakpoint N would stop at."""

from __future__ import annotations

import argparse

from cudump.prompt.commands._numbers import breakpoint_number
from cudump.prompt.context import CommandError, Context
from cudump.prompt.registry import command, make_parser

parser = make_parser("ignore", "Pass over the next COUNT stops of breakpoint N.",
                     "COUNT 0 makes it stop again at the next matching launch.")
parser.add_argument("number", metavar="N", help="breakpoint number")
parser.add_argument("count", metavar="COUNT", help="launches to pass over (0: stop again)")


@command(parser, category="breakpoints", complete="breakpoints")
def ignore(ctx: Context, args: argparse.Namespace) -> None:
    number = breakpoint_number(args.number)
    try:
        count = int(args.count)
    except ValueError:
        raise CommandError(f"ignore: '{args.count}' is not a whole number") from None
    ctx.debugger.breakpoints.set_ignore(number, count)
    ctx.debugger.changed()
    if count == 0:
        ctx.say(f"Will stop next time breakpoint {number} is reached.")
    elif count == 1:
        ctx.say(f"Will ignore next crossing of breakpoint {number}.")
    else:
        ctx.say(f"Will ignore next {count} crossings of breakpoint {number}.")
