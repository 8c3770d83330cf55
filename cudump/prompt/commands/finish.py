"""`finish`: as gdb's finish returns from a function, run the held kernel to its end."""

from __future__ import annotations

import argparse

from cudump.prompt.commands.step import step_over
from cudump.prompt.context import Context, Outcome
from cudump.prompt.registry import BEFORE, command, make_parser

parser = make_parser("finish", "Run the kernel and stop after it (as step).",
                     "As gdb's finish runs a function to its return: see 'help step'.")


@command(parser, category="running", aliases=("fin",), requires=(BEFORE,), repeat=True)
def finish(ctx: Context, args: argparse.Namespace) -> Outcome | None:
    return step_over(ctx)
