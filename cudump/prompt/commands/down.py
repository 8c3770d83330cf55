"""`down [N]`: select the frame N levels inward (toward the launch) of the selected one."""

from __future__ import annotations

import argparse

from cudump.prompt.commands.frame import move_frame
from cudump.prompt.context import Context
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser("down", "Select and show the frame N levels inward (default 1).",
                     "Toward frame 0, where the launch was made. See 'frame' and 'bt'.",
                     usage="down [N]")
parser.add_argument("count", nargs="?", type=int, default=1, metavar="N", help="levels")


@command(parser, requires=(STOPPED,), repeat=True)
def down(ctx: Context, args: argparse.Namespace) -> None:
    move_frame(ctx, args.count, outward=False,
               end="Bottom (innermost) frame selected; you cannot go down.")
