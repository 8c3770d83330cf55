"""`kill`: end the run now; the program is killed, what was captured is kept."""

from __future__ import annotations

import argparse

from cudump.prompt.context import Context, Outcome
from cudump.prompt.registry import command, make_parser

parser = make_parser("kill", "Kill the program now (what was captured is kept).",
                     "The prompt ends. Interactively you are asked first.")


def kill_now(ctx: Context, how: str = "kill") -> Outcome | None:
    """Kills the run after asking (interactive only); None when the user says no. `how`,
    the command ("kill", "quit"), is kept for the run's last lines."""
    if ctx.check_gone() and ctx.debugger.finished:
        return Outcome.ENDED
    if ctx.stop is None and ctx.debugger.finished:
        ctx.say("The program is not being run.")
        return Outcome.ENDED
    if not ctx.confirm("Kill the program being debugged? (y or n) "):
        ctx.say("Not confirmed.")
        return None
    ctx.debugger.ended_at_prompt = how
    if ctx.stop is not None:
        ctx.debugger.resume(ctx.stop, "kill")
        ctx.set_stop(None)
    elif not ctx.debugger.finished:
        ctx.debugger.end()
    ctx.say("Killed the program; what was captured is kept.")
    return Outcome.ENDED


@command(parser, category="running")
def kill(ctx: Context, args: argparse.Namespace) -> Outcome | None:
    return kill_now(ctx)
