"""`info locals`: gdb lists a function's local variables; a kernel's are in registers and
local memory on the GPU, which cudump does not read, so it says so and names what it shows."""

from __future__ import annotations

import argparse

from cudump.prompt.commands.info import INFO
from cudump.prompt.context import Context
from cudump.prompt.registry import make_parser, subcommand


@subcommand(INFO, make_parser("info locals", "A kernel's locals are not visible: see "
                              "'info args'."))
def info_locals(ctx: Context, args: argparse.Namespace) -> None:
    ctx.say("A kernel's local variables live on the GPU and are not visible from outside it; "
            "'info args' shows its arguments, 'p argN[I]' what they point to.")
