"""`undisplay [N...]`: stop showing displays N (all of them without numbers)."""

from __future__ import annotations

import argparse

from cudump.prompt.context import CommandError, Context
from cudump.prompt.registry import command, make_parser

parser = make_parser("undisplay", "Stop showing the displays N (all without N).",
                     "Numbers are those 'info display' lists. Interactively, removing them\n"
                     "all is asked first.", usage="undisplay [N...]")
parser.add_argument("numbers", nargs="*", metavar="N", help="display numbers")


@command(parser, complete=None)
def undisplay(ctx: Context, args: argparse.Namespace) -> None:
    if not args.numbers:
        if ctx.displays and not ctx.confirm("Delete all auto-display expressions? (y or n) "):
            ctx.say("Not confirmed.")
            return
        ctx.displays.clear()
        return
    numbers = []
    for text in args.numbers:
        try:
            numbers.append(int(text))
        except ValueError:
            raise CommandError(f"undisplay: '{text}' is not a display number "
                               "(see 'info display')") from None
    known = {d.number for d in ctx.displays}
    missing = [n for n in numbers if n not in known]
    if missing:
        raise CommandError(f"undisplay: no display number {missing[0]} (see 'info display')")
    ctx.displays[:] = [d for d in ctx.displays if d.number not in numbers]
