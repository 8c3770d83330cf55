"""`info args|allocs|kernels|graph|breakpoints|display|threads|launch|scope` (`args` is short
for `info args`, `scope` for `info scope`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cudump.analysis.report.tables import format_table
from cudump.kernels.pattern import name_forms
from cudump.prompt.context import CommandError, Context
from cudump.prompt.display import arg_lines, dims
from cudump.prompt.registry import (
    REGISTRY,
    STOPPED,
    make_parser,
    prefix_command,
    subcommand,
)

INFO = prefix_command(
    make_parser("info", "The launch, arguments, allocations, kernels, breakpoints, threads, "
                "displays.",
                "A unique prefix names a subcommand (info b); 'args' is short for 'info args'.",
                usage="info SUBCOMMAND"),
    aliases=("i",))
REGISTRY.alias("args", "info args")
REGISTRY.alias("scope", "info scope")


@subcommand(INFO, make_parser("info args", "The launch's arguments and the allocations they "
                              "point into."), requires=(STOPPED,))
def info_args(ctx: Context, args: argparse.Namespace) -> None:
    for line in arg_lines(ctx.stopped, ctx.allocation_for):
        ctx.say(line)


@subcommand(INFO, make_parser("info allocs", "The process's live device allocations."),
            requires=(STOPPED,))
def info_allocs(ctx: Context, args: argparse.Namespace) -> None:
    stop = ctx.stopped
    allocs = stop.allocations()
    if not allocs:
        ctx.say("no live device allocations")
        return
    users: dict[int, list[str]] = {}
    for arg in stop.info.args:
        for (index, offset), alloc in stop.info.pointers.items():
            if index == arg.index:
                users.setdefault(alloc.base, []).append(
                    f"arg{index}" if offset == 0 else f"arg{index}+{offset}")
        alloc = ctx.allocation_for(arg)
        if alloc is not None and (arg.index, 0) not in stop.info.pointers:
            users.setdefault(alloc.base, []).append(f"arg{arg.index}")
    rows = []
    for a in sorted(allocs, key=lambda a: a.base):
        pitched = a.kind == "pitched" and a.pitch > 0
        rows.append([f"0x{a.base:x}", str(a.size), a.kind,
                     str(a.pitch) if pitched else "-",
                     str(a.width_bytes) if pitched else "-",
                     str(a.height) if pitched else "-",
                     ", ".join(users.get(a.base, []))])
    lines = format_table(["base", "size", "kind", "pitch", "width", "height", "args"], rows,
                         [False, True, False, True, True, True, False])
    for line in lines:
        ctx.say(line)
    total = sum(a.size for a in allocs)
    ctx.say(f"{len(allocs)} allocations, {total} bytes")


@subcommand(INFO, make_parser("info kernels", "Kernels seen so far, with launch counts per "
                              "process."))
def info_kernels(ctx: Context, args: argparse.Namespace) -> None:
    seen = ctx.debugger.kernels()
    if not seen:
        ctx.say("no kernels seen yet")
        return
    rows = [[str(k.pid), str(k.launches), k.kernel] for k in seen]
    for line in format_table(["pid", "launches", "kernel"], rows, [True, True, False]):
        ctx.say(line)


@subcommand(INFO, make_parser("info graph", "At a graph launch: its kernels in run order."),
            requires=(STOPPED,))
def info_graph(ctx: Context, args: argparse.Namespace) -> None:
    info = ctx.stopped.info
    if info.graph is None:
        raise CommandError("this stop is not at a graph launch (info graph is for breakpoints "
                           "on kernels inside CUDA graphs)")
    nodes = ctx.stopped.graph_nodes()
    ctx.say(f"graph {info.graph}, replay {info.replay}: {len(nodes)} kernel nodes")
    for n in nodes:
        mark = "*" if n.node == info.node else " "
        where = " (in a child graph)" if n.child else ""
        ctx.say(f"{mark} node {n.node:<3} grid {dims(n.grid)} block {dims(n.block)} smem "
                f"{n.smem}  {n.kernel}{where}")


@subcommand(INFO, make_parser("info breakpoints", "The breakpoint table."))
def info_breakpoints(ctx: Context, args: argparse.Namespace) -> None:
    table = list(ctx.debugger.breakpoints)
    if not table:
        ctx.say("No breakpoints.")
        return
    rows = []
    for bp in table:
        what = bp.pattern.text
        if bp.condition is not None:
            what += f" if {bp.condition.text}"
        rows.append([str(bp.number), "tbreak" if bp.temporary else "break",
                     "y" if bp.enabled else "n", str(bp.hits), str(bp.ignore), what])
    for line in format_table(["Num", "Type", "Enb", "Hits", "Ignore", "What"], rows,
                             [False, False, False, True, True, False]):
        ctx.say(line)


@subcommand(INFO, make_parser("info display", "The expressions 'display' shows at every "
                              "stop."))
def info_display(ctx: Context, args: argparse.Namespace) -> None:
    if not ctx.displays:
        ctx.say("There are no auto-display expressions now.")
        return
    ctx.say("Auto-display expressions now in effect:")
    ctx.say("Num Enb Expression")
    for shown in ctx.displays:
        fmt = f"/{shown.fmt} " if shown.fmt else ""
        ctx.say(f"{f'{shown.number}:':<4} y  {fmt}{shown.expr}")


PROC = Path("/proc")
_STATES = {"R": "running", "S": "sleeping", "D": "waiting (disk)", "T": "stopped",
           "t": "traced", "Z": "zombie", "X": "dead", "I": "idle"}


def host_threads(pid: int, proc: Path | None = None) -> list[tuple[int, str, str]]:
    """(thread id, name, state) of each thread of a process, by thread id, from
    /proc/PID/task; threads that end while it is read are left out."""
    proc = PROC if proc is None else proc
    try:
        tids = sorted(int(t.name) for t in (proc / str(pid) / "task").iterdir()
                      if t.name.isdigit())
    except OSError:
        return []
    threads = []
    for tid in tids:
        task = proc / str(pid) / "task" / str(tid)
        try:
            name = (task / "comm").read_text(encoding="utf-8", errors="replace").rstrip("\n")
            stat = (task / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        letter = (stat.rpartition(")")[2].split() or ["?"])[0]
        threads.append((tid, name, _STATES.get(letter, letter)))
    return threads


@subcommand(INFO, make_parser(
    "info threads", "The host threads of the stopped process; * marks the one holding the "
    "launch.", "From /proc/PID/task: thread id (LWP), name and state. The other threads run\n"
    "on (their next launch waits: all-stop); this lists the launching process only."),
    requires=(STOPPED,))
def info_threads(ctx: Context, args: argparse.Namespace) -> None:
    info = ctx.stopped.info
    threads = host_threads(info.pid)
    if not threads:
        raise CommandError(f"cannot list the threads of process {info.pid} "
                           f"({PROC / str(info.pid) / 'task'} cannot be read)")
    rows = []
    for number, (tid, name, state) in enumerate(threads, 1):
        held = tid == info.tid
        if held:
            state = f"holds launch {info.launch} ({name_forms(info.kernel)[2]})"
        rows.append(["*" if held else "", str(number), f"LWP {tid}", f'"{name}"', state])
    for line in format_table(["", "Id", "Thread", "Name", "State"], rows,
                             [False, False, False, False, False]):
        ctx.say(line.rstrip())


@subcommand(INFO, make_parser("info launch", "Where and why the program stopped."),
            requires=(STOPPED,))
def info_launch(ctx: Context, args: argparse.Namespace) -> None:
    info = ctx.stopped.info
    blocks = info.grid[0] * info.grid[1] * info.grid[2]
    threads = info.block[0] * info.block[1] * info.block[2]
    phase = ("before (the kernel has not run yet)" if info.phase == "before"
             else "after (the kernel has run)")
    rows = [
        ("kernel", info.kernel),
        ("short", name_forms(info.kernel)[2]),
        ("mangled", info.mangled),
        ("launch", f"{info.launch} (occurrence {info.occurrence} of this kernel)"),
        ("phase", phase),
        ("reason", info.reason),
        ("process", f"pid {info.pid} thread {info.tid}"),
        ("device", str(info.device)),
        ("grid", f"{dims(info.grid)} = {blocks} blocks"),
        ("block", f"{dims(info.block)} = {threads} threads"),
        ("smem", f"{info.smem} bytes"),
        ("stream", info.stream),
        ("api", info.api),
    ]
    if info.where:
        rows.append(("where", info.where.text()))
    for key, value in rows:
        ctx.say(f"{key:<8} {value}")


@subcommand(INFO, make_parser("info scope", "Where the launch was made: its layer, pass, "
                              "step and source line.",
                              "The scopes open on the launching thread (NVTX ranges, PyTorch "
                              "modules,\nJAX operations), outermost first; 'bt' shows them "
                              "innermost first.\n'scope' is short for 'info scope'."),
            requires=(STOPPED,))
def info_scope(ctx: Context, args: argparse.Namespace) -> None:
    info = ctx.stopped.info
    where = info.where
    if not where:
        ctx.say(f"launch {info.launch} names no scope (the program opened none on its "
                "thread; a PyTorch program names its modules with --layers)")
        return
    ctx.say(f"launch {info.launch} of {name_forms(info.kernel)[2]} {where.text()}")
    if where.scopes:
        ctx.say(f"  scopes  {' > '.join(where.scopes)}")
