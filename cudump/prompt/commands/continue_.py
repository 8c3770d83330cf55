"""`continue` (`c`): let the held launch go; the program runs to the next stop."""

from __future__ import annotations

import argparse

from cudump.prompt.context import Context, Outcome
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser("continue", "Let the launch go; run to the next stop.")


@command(parser, category="running", aliases=("c", "cont"), requires=(STOPPED,),
         repeat=True)
def continue_(ctx: Context, args: argparse.Namespace) -> Outcome:
    # Said first, as gdb does: once the launch goes, what the program does next (a report
    # of the launch after it) may be printed at any moment.
    ctx.say("Continuing.")
    ctx.debugger.resume(ctx.stopped, "continue")
    ctx.set_stop(None)
    return Outcome.RESUMED
