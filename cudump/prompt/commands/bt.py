"""`bt`: the host call stack of the thread that launched the kernel."""

from __future__ import annotations

import argparse

from cudump.prompt.context import Context
from cudump.prompt.display import format_frame, scope_lines
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser("bt", "The host call stack of the launching thread.",
                     "Innermost frame first, as the target unwinds it; 'frame N', 'up' and\n"
                     "'down' select one of them. Above them, where the program names them,\n"
                     "the scopes open on the thread (innermost first) and the line of its\n"
                     "own code that made the launch.")
parser.add_argument("limit", nargs="?", type=int, metavar="N", help="show only N frames")


@command(parser, aliases=("backtrace", "where"), requires=(STOPPED,))
def bt(ctx: Context, args: argparse.Namespace) -> None:
    for line in scope_lines(ctx.stopped.info):
        ctx.say(line)
    frames = ctx.backtrace()
    if not frames:
        ctx.say("no host frames (the stack could not be unwound)")
        return
    shown = frames if args.limit is None else frames[:max(args.limit, 0)]
    for frame in shown:
        ctx.say(format_frame(frame))
    if len(shown) < len(frames):
        ctx.say(f"(more stack frames follow: {len(frames) - len(shown)})")
