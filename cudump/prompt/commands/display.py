"""`display[/FMT] [EXPR]`: an expression shown at every stop, as gdb's display.

The expressions are those of `print` (argN, argN[I]@N, arithmetic, *(argN + I)), and
stay from stop to stop; one that cannot be shown at a stop (a kernel without that
argument) says why there, in place of its value.
"""

from __future__ import annotations

import argparse

from cudump.launches.stop import TargetError
from cudump.prompt.commands.print import print_format, print_text
from cudump.prompt.context import CommandError, Context, Display
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser(
    "display", "Show EXPR (as print does) now and at every stop.",
    "display/FMT EXPR takes print's format letters (display/x arg3). Without EXPR, shows\n"
    "every display now. 'info display' lists them, 'undisplay N' removes one.",
    usage="display[/FMT] [EXPR]")
parser.add_argument("expr", nargs="?", metavar="EXPR", help="what print takes")


def display_line(ctx: Context, shown: Display) -> str:
    fmt = f"/{shown.fmt} " if shown.fmt else ""
    try:
        text = print_text(ctx, shown.expr, shown.fmt)
    except (CommandError, TargetError) as err:
        text = f"{shown.expr} = <error: {err}>"
    return f"{shown.number}: {fmt}{text}"


def show_displays(ctx: Context) -> None:
    """Every display, at a stop (after its banner)."""
    if ctx.stop is None:
        return
    for shown in ctx.displays:
        ctx.say(display_line(ctx, shown))


@command(parser, requires=(STOPPED,), raw=True, slash=True, complete="args")
def display(ctx: Context, args: argparse.Namespace) -> None:
    fmt = print_format(args.slash)
    if not args.expr:
        if args.slash is not None:
            raise CommandError("display: a format needs an expression (display/x arg3)")
        show_displays(ctx)
        return
    text = args.expr.strip()
    line = print_text(ctx, text, fmt)          # one that cannot be shown is not kept
    ctx.display_number += 1
    shown = Display(ctx.display_number, text, fmt)
    ctx.displays.append(shown)
    ctx.say(f"{shown.number}: {f'/{fmt} ' if fmt else ''}{line}")
