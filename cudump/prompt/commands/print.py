"""`print EXPR` (`p`): an argument's value, or typed elements of the memory it points to."""

from __future__ import annotations

import argparse
import re

import numpy as np

from cudump.prompt.context import CommandError, Context
from cudump.prompt.display import format_element, format_number, format_value, type_text
from cudump.prompt.memory import evaluate, pointee, read, whole
from cudump.prompt.registry import STOPPED, command, make_parser

MAX_ELEMENTS = 200   # as gdb's `print elements`: longer arrays end in "..."

parser = make_parser(
    "print", "Print an argument or the typed elements it points to.",
    "print argN          the argument's value (pointers: type and address)\n"
    "print argN[I]       element I of what argN points to, typed by the signature\n"
    "print *argN         the same as argN[0]\n"
    "print argN[I]@N     N elements from element I (argN@N starts at 0)\n"
    "print EXPR          arithmetic over argument values: print arg5 * arg6\n\n"
    "I and N may be expressions (argN[arg3 - 1]). Vector types print as {r, g, b, a};\n"
    f"at most {MAX_ELEMENTS} elements are shown.",
    usage="print EXPR")
parser.add_argument("expr", metavar="EXPR", help="argN, argN[I], *argN, argN[I]@N or EXPR")

_ELEMENTS = re.compile(r"^(?P<star>\*\s*)?arg(?P<n>\d+)\s*(?:\[(?P<index>[^\]]+)\])?"
                       r"\s*(?:@(?P<count>.+))?$")


@command(parser, aliases=("p", "inspect"), requires=(STOPPED,), raw=True, complete="args")
def print_(ctx: Context, args: argparse.Namespace) -> None:
    text = args.expr.strip()
    m = _ELEMENTS.match(text)
    values = ctx.values()
    if m is None:
        value = evaluate(text, values, "expression")
        ctx.say(f"{text} = {format_number(value, None)}")
        return
    arg = ctx.arg(int(m.group("n")))
    name = f"arg{arg.index}"
    if not (m.group("star") or m.group("index") is not None or m.group("count") is not None):
        if arg.type is not None and arg.type.is_pointer:
            ctx.say(f"{name} = ({type_text(arg)}) {format_value(arg)}")
        else:
            ctx.say(f"{name} = {format_value(arg)}")
        return
    if m.group("star") and (m.group("index") is not None or m.group("count") is not None):
        raise CommandError("print: write *argN, argN[I] or argN[I]@N")
    target = pointee(arg)
    if not isinstance(arg.value, int):
        raise CommandError(f"{name} has no pointer value")
    if arg.value == 0:
        raise CommandError(f"{name} is a null pointer")
    index = 0
    if m.group("index") is not None:
        index = whole(m.group("index"), values, "index", minimum=-(1 << 62))
    count = None if m.group("count") is None else whole(m.group("count"), values, "count", 1)
    itemsize = target.elem.itemsize
    start = arg.value + index * itemsize
    if start < 0:
        raise CommandError(f"{name}[{index}] is at a negative address")
    n = count or 1
    alloc = ctx.allocation_for(arg)
    if alloc is not None and not (alloc.base <= start and start + n * itemsize <= alloc.end):
        what = f"{name}[{index}]" + (f"@{count}" if count is not None else "")
        raise CommandError(f"{what} (0x{start:x}..0x{start + n * itemsize:x}) is outside the "
                           f"allocation of {name} (0x{alloc.base:x}, {alloc.size} bytes)")
    shown = min(n, MAX_ELEMENTS)
    data = read(ctx.stopped, start, shown * itemsize)
    array = np.frombuffer(data, dtype=target.elem.dtype).reshape(shown, target.elem.channels)
    texts = [format_element(row, target.elem, target.hexadecimal) for row in array]
    if count is None:
        label = f"*{name}" if m.group("star") else f"{name}[{index}]"
        ctx.say(f"{label} = {texts[0]}")
        return
    more = "..." if shown < n else ""
    ctx.say(f"{name}[{index}]@{count} = {{{', '.join(texts)}{more}}}")
