"""`detach`: no more stops; the program runs to its end and the prompt ends."""

from __future__ import annotations

import argparse

from cudump.prompt.context import Context, Outcome
from cudump.prompt.registry import STOPPED, command, make_parser

DETACHED = "Detaching: the program runs to its end without stopping."

parser = make_parser("detach", "Stop no more: the program runs to its end; the prompt ends.",
                     "Breakpoints stop nothing after this; rules still take snapshots.\n"
                     "As after gdb's detach, Ctrl-C is then the program's: cudump passes it\n"
                     "on to the program.")


def detach_now(ctx: Context, message: str | None = DETACHED) -> Outcome:
    ctx.debugger.resume(ctx.stopped, "detach")
    ctx.set_stop(None)
    if message:
        ctx.say(message)
    return Outcome.ENDED


@command(parser, category="running", requires=(STOPPED,))
def detach(ctx: Context, args: argparse.Namespace) -> Outcome:
    return detach_now(ctx)
