"""`up [N]`: select the frame N levels outward (the caller's side) of the selected one."""

from __future__ import annotations

import argparse

from cudump.prompt.commands.frame import move_frame
from cudump.prompt.context import Context
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser("up", "Select and show the frame N levels outward (default 1).",
                     "Toward main: the caller of the selected frame. See 'frame' and 'bt'.",
                     usage="up [N]")
parser.add_argument("count", nargs="?", type=int, default=1, metavar="N", help="levels")


@command(parser, requires=(STOPPED,), repeat=True)
def up(ctx: Context, args: argparse.Namespace) -> None:
    move_frame(ctx, args.count, outward=True, end="Initial frame selected; you cannot go up.")
