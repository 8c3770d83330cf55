"""`next` (`n`): let the held launch go and stop at the next launch, of any kernel.

gdb's next runs to the next line of the function; the unit cudump stops at is a kernel
launch, so next runs to the next one, whatever its kernel and whatever the breakpoints
say (continue runs to the next breakpoint; step runs the held kernel and stops after it).
"""

from __future__ import annotations

import argparse

from cudump.prompt.context import Context, Outcome
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser(
    "next", "Let the launch go; stop at the next launch of any kernel.",
    "As gdb's next goes to the next line, next goes to the next kernel launch, in any\n"
    "process, breakpoints or not. 'continue' goes to the next breakpoint; 'step' runs the\n"
    "held kernel and stops right after it.")


@command(parser, category="running", aliases=("n",), requires=(STOPPED,), repeat=True)
def next_(ctx: Context, args: argparse.Namespace) -> Outcome:
    ctx.say("Continuing to the next launch.")
    # Asked before the launch goes, so that the very next launch (of this thread or any
    # other) is the one that stops.
    ctx.debugger.interrupt()
    ctx.debugger.resume(ctx.stopped, "continue")
    ctx.set_stop(None)
    return Outcome.RESUMED
