"""`run` (`r`): gdb starts the program with it; under cudump the program is already running
(cudump started it), so run says what to type instead, in one line."""

from __future__ import annotations

import argparse

from cudump.prompt.context import Context
from cudump.prompt.registry import command, make_parser

parser = make_parser(
    "run", "The program already runs under cudump: says what to type instead.",
    "cudump starts the program itself (cudump --break PATTERN PROGRAM ARGS...), so there is\n"
    "nothing to start: 'continue' lets the held launch go, 'next' stops at the next launch,\n"
    "'kill' ends the program. To run it again, start cudump again.")
parser.add_argument("ignored", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


@command(parser, category="running", aliases=("r",))
def run(ctx: Context, args: argparse.Namespace) -> None:
    if ctx.stop is None and ctx.debugger.finished:
        ctx.say("The program has ended; cudump runs it once: start cudump again to run it "
                "again.")
        return
    ctx.say("The program is already running (cudump started it): 'continue' lets it go on, "
            "'next' stops at the next launch, 'kill' ends it.")
