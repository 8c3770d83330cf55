"""`frame [N]` (`f`): select a frame of the launching thread's host stack, and show it.

The frames are those `bt` lists, unwound once per stop; `up` and `down` move the
selection. Nothing else depends on the selected frame: device memory and the launch's
arguments are the same from every frame.
"""

from __future__ import annotations

import argparse

from cudump.prompt.context import CommandError, Context
from cudump.prompt.display import format_frame
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser("frame", "Select and show frame N of the launching thread's host stack.",
                     "Without N, shows the selected frame. Frame 0 is the innermost, as in\n"
                     "'bt'; 'up' and 'down' move from the selected one.", usage="frame [N]")
parser.add_argument("number", nargs="?", type=int, metavar="N", help="a frame number (bt)")


def select_frame(ctx: Context, number: int) -> None:
    frames = ctx.backtrace()
    if not frames:
        raise CommandError("no host frames (the stack could not be unwound)")
    if not 0 <= number < len(frames):
        raise CommandError(f"No frame at level {number} (frames 0..{len(frames) - 1}).")
    ctx.frame = number
    ctx.say(format_frame(frames[number]))


def move_frame(ctx: Context, count: int, outward: bool, end: str) -> None:
    """`up` (outward) and `down`: selects the frame `count` levels on, kept inside the stack;
    says `end` when the selection is already at that end."""
    last = len(ctx.backtrace()) - 1
    at_end = ctx.frame >= last if outward else ctx.frame <= 0
    if last >= 0 and at_end and count > 0:
        raise CommandError(end)
    step = count if outward else -count
    select_frame(ctx, max(0, min(ctx.frame + step, last)))


@command(parser, aliases=("f",), requires=(STOPPED,))
def frame(ctx: Context, args: argparse.Namespace) -> None:
    select_frame(ctx, ctx.frame if args.number is None else args.number)
