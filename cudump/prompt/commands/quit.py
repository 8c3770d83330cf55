"""`quit` (`q`): leave cudump; a run still going is killed (as `kill`), as gdb's quit kills
its inferior: the run's last lines say it was ended at the prompt, and cudump exits 0."""

from __future__ import annotations

import argparse

from cudump.prompt.commands.kill import kill_now
from cudump.prompt.context import Context, Outcome
from cudump.prompt.registry import command, make_parser

parser = make_parser("quit", "Leave cudump; a program still running is killed.",
                     "What was captured is kept. Interactively you are asked first. As "
                     "after gdb's quit, cudump then exits 0 (summary.json keeps the "
                     "program's status, 137, and says ended_at_prompt: quit).")


@command(parser, category="running", aliases=("q", "exit"))
def quit_(ctx: Context, args: argparse.Namespace) -> Outcome | None:
    if ctx.check_gone() and ctx.debugger.finished:
        return Outcome.ENDED
    if ctx.stop is None and ctx.debugger.finished:
        return Outcome.ENDED
    return kill_now(ctx, "quit")
