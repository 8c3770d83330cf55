"""`step`: run the held kernel and stop right after it, listing the buffers it changed.

Before the kernel runs, the bytes of every pointer argument that points into an
allocation are read (snapshot geometry, reads of at most the target's max_read, and at
most KEEP_LIMIT bytes in all); after it, again. `diff argN` compares the two.
"""

from __future__ import annotations

import argparse

import numpy as np

from cudump.kernels.args import ArgValue
from cudump.kernels.elements import element_type
from cudump.kernels.geometry import GeometryError, plan_copy
from cudump.launches.stop import StoppedLaunch, TargetError
from cudump.prompt.commands.display import show_displays
from cudump.prompt.context import Context, Kept, KeptArg, Outcome
from cudump.prompt.display import arg_label, headline, placement
from cudump.prompt.memory import read_plan
from cudump.prompt.registry import BEFORE, command, make_parser

KEEP_LIMIT = 1 << 30   # bytes kept across one step, all arguments together

parser = make_parser(
    "step", "Run the kernel, stop after it, list the buffers it changed.",
    "The buffers of pointer arguments are read before and after the kernel (as snapshots\n"
    "would read them, at most 1 GiB in all); 'diff argN' then compares them.")


def size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def keep_before(ctx: Context, stop: StoppedLaunch) -> Kept:
    info = stop.info
    kept = Kept(info.pid, info.launch)
    values = ctx.values()
    total = 0
    for arg in info.args:
        alloc = ctx.allocation_for(arg)
        if alloc is None or not isinstance(arg.value, int):
            continue
        try:
            plan = plan_copy(arg, alloc, None, values)
        except GeometryError as err:
            kept.skipped[arg.index] = str(err)
            continue
        if total + plan.nbytes > KEEP_LIMIT:
            kept.skipped[arg.index] = (f"{plan.nbytes} bytes would pass the limit of "
                                       f"{size_text(KEEP_LIMIT)} kept across a step")
            continue
        try:
            kept.args[arg.index] = KeptArg(plan, channels_of(arg), read_plan(stop, plan))
        except TargetError as err:
            kept.skipped[arg.index] = f"cannot read it: {err}"
            continue
        total += plan.nbytes
    return kept


def channels_of(arg: ArgValue) -> int:
    """Values per element of what a pointer argument points to (uchar4*: 4)."""
    ptype = arg.type
    if ptype is None or ptype.pointer_depth != 1:
        return 1
    elem = element_type(ptype.base)
    return elem.channels if elem is not None else 1


def changed_elements(entry: KeptArg) -> tuple[int, int]:
    """(elements that differ, elements) between the before and after bytes; an element
    (a uchar4 pixel, a float) differs when any of its bytes does."""
    assert entry.after is not None
    size = np.dtype(entry.plan.dtype).itemsize * entry.channels
    a = np.frombuffer(entry.before, dtype=np.uint8).reshape(-1, size)
    b = np.frombuffer(entry.after, dtype=np.uint8).reshape(-1, size)
    return int(np.count_nonzero((a != b).any(axis=1))), a.shape[0]


def step_over(ctx: Context) -> Outcome | None:
    stop = ctx.stopped
    info = stop.info
    kept = keep_before(ctx, stop)
    after = ctx.debugger.resume(stop, "step")
    if after is None:
        ctx.set_stop(None)
        ctx.say(f"launch {info.launch} gave no stop after it (the launch failed or the "
                "process ended); continuing")
        return Outcome.RESUMED
    ctx.set_stop(after)
    ctx.say(headline(after.info))
    ctx.say(placement(after.info))
    unchanged: list[str] = []
    for index, entry in kept.args.items():
        arg = after.info.args[index] if index < len(after.info.args) else info.args[index]
        try:
            entry.after = read_plan(after, entry.plan)
        except TargetError as err:
            kept.skipped[index] = f"cannot read it after the kernel: {err}"
            continue
        differ, total = changed_elements(entry)
        if differ:
            ctx.say(f"{arg_label(arg)}: {differ} of {total} elements changed")
        else:
            unchanged.append(f"arg{index}")
    for index in list(kept.args):
        if kept.args[index].after is None:
            del kept.args[index]
    if unchanged:
        ctx.say(f"unchanged: {', '.join(unchanged)}")
    for index, why in sorted(kept.skipped.items()):
        ctx.say(f"{arg_label(info.args[index])}: not compared: {why}")
    if not kept.args and not kept.skipped:
        ctx.say("no argument points into a tracked allocation; nothing to compare")
    ctx.kept = kept
    show_displays(ctx)
    return None


@command(parser, category="running", aliases=("s",), requires=(BEFORE,), repeat=True)
def step(ctx: Context, args: argparse.Namespace) -> Outcome | None:
    return step_over(ctx)
