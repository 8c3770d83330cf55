"""`print[/FMT] EXPR` (`p`): an argument's value, or typed elements of the memory it points to."""

from __future__ import annotations

import argparse
import re

import numpy as np

from cudump.kernels.args import ArgValue
from cudump.kernels.elements import element_type
from cudump.kernels.expr import ExprError, parse_expr
from cudump.prompt.context import CommandError, Context
from cudump.prompt.display import (
    PRINT_FORMATS,
    format_as,
    format_element,
    format_number,
    format_value,
    number_dtype,
    type_text,
)
from cudump.prompt.memory import pointee, read, whole
from cudump.prompt.registry import STOPPED, command, make_parser

MAX_ELEMENTS = 200   # as gdb's `print elements`: longer arrays end in "..."
POINTER = np.dtype("uint64")

parser = make_parser(
    "print", "Print an argument or the typed elements it points to.",
    "print argN          the argument's value (pointers: type and address)\n"
    "print argN[I]       element I of what argN points to, typed by the signature\n"
    "print *argN         the same as argN[0]\n"
    "print argN[I]@N     N elements from element I (argN@N starts at 0)\n"
    "print EXPR          arithmetic over argument values: print arg5 * arg6\n"
    "print argN + I      C's pointer arithmetic: on a float* arg0, arg0 + 4 is 16 bytes on,\n"
    "                    shown as a pointer; *(arg0 + 4) is the element there\n\n"
    "I and N may be expressions (argN[arg3 - 1]). Vector types print as {r, g, b, a};\n"
    f"at most {MAX_ELEMENTS} elements are shown.\n\n"
    "print/FMT EXPR takes one of gdb's format letters: x hex, d signed and u unsigned\n"
    "decimal, o octal, t binary, z zero-padded hex (these show the value's bits, a float's\n"
    "too), c the value as a character, f as a floating-point number: p/x arg3, p/t arg0[2].",
    usage="print[/FMT] EXPR")
parser.add_argument("expr", metavar="EXPR", help="argN, argN[I], *argN, argN[I]@N or EXPR")

_ELEMENTS = re.compile(r"^(?P<star>\*\s*)?arg(?P<n>\d+)\s*(?:\[(?P<index>[^\]]+)\])?"
                       r"\s*(?:@(?P<count>.+))?$")


def print_format(slash: str | None) -> str | None:
    """The letter of `print/FMT`, or None without one."""
    if slash is None:
        return None
    if len(slash) != 1 or slash not in PRINT_FORMATS:
        raise CommandError(f"print: bad format '/{slash}' (one of the letters "
                           f"{' '.join(PRINT_FORMATS)}: p/x arg3)")
    return slash


def element_size(arg: ArgValue) -> int | None:
    """The size of what a pointer argument points to, for pointer arithmetic (void*: 1,
    as GNU C); None where cudump does not know the type."""
    ptype = arg.type
    assert ptype is not None
    if ptype.pointer_depth >= 2:
        return 8
    if ptype.base == "void":
        return 1
    elem = element_type(ptype.base)
    if elem is None:
        return None
    size = elem.itemsize
    for extent in ptype.extents:           # a pointer to an array: int (*) [4]
        if not extent.isdigit():
            return None
        size *= int(extent)
    return size


def pointer_sizes(ctx: Context) -> dict[str, int | None]:
    return {f"arg{a.index}": element_size(a) for a in ctx.stopped.info.args
            if a.type is not None and a.type.is_pointer and not a.type.function
            and isinstance(a.value, int)}


def read_elements(ctx: Context, arg: ArgValue, start: int, n: int, what: str
                  ) -> tuple[np.ndarray, int]:
    """Up to MAX_ELEMENTS elements of what `arg` points to, from address `start`, checked
    against its allocation; the rows and how many elements were asked for."""
    target = pointee(arg)
    itemsize = target.elem.itemsize
    name = f"arg{arg.index}"
    if start < 0:
        raise CommandError(f"{what} is at a negative address")
    alloc = ctx.allocation_for(arg)
    if alloc is not None and not (alloc.base <= start and start + n * itemsize <= alloc.end):
        raise CommandError(f"{what} (0x{start:x}..0x{start + n * itemsize:x}) is outside the "
                           f"allocation of {name} (0x{alloc.base:x}, {alloc.size} bytes)")
    shown = min(n, MAX_ELEMENTS)
    data = read(ctx.stopped, start, shown * itemsize)
    return np.frombuffer(data, dtype=target.elem.dtype).reshape(shown, target.elem.channels), n


def print_text(ctx: Context, text: str, fmt: str | None) -> str:
    """`LABEL = VALUE` for `print[/fmt] text` (display uses it too)."""
    text = text.strip()
    m = _ELEMENTS.match(text)
    if m is None:
        return _expression(ctx, text, fmt)
    arg = ctx.arg(int(m.group("n")))
    name = f"arg{arg.index}"
    if not (m.group("star") or m.group("index") is not None or m.group("count") is not None):
        return f"{name} = {_argument(arg, fmt)}"
    if m.group("star") and (m.group("index") is not None or m.group("count") is not None):
        raise CommandError("print: write *argN, argN[I] or argN[I]@N")
    target = pointee(arg)
    if not isinstance(arg.value, int):
        raise CommandError(f"{name} has no pointer value")
    if arg.value == 0:
        raise CommandError(f"{name} is a null pointer")
    values = ctx.values()
    index = 0
    if m.group("index") is not None:
        index = whole(m.group("index"), values, "index", minimum=-(1 << 62))
    count = None if m.group("count") is None else whole(m.group("count"), values, "count", 1)
    what = f"{name}[{index}]" + (f"@{count}" if count is not None else "")
    rows, n = read_elements(ctx, arg, arg.value + index * target.elem.itemsize, count or 1,
                            what)
    texts = [format_element(row, target.elem, target.hexadecimal, fmt) for row in rows]
    if count is None:
        label = f"*{name}" if m.group("star") else f"{name}[{index}]"
        return f"{label} = {texts[0]}"
    more = "..." if len(rows) < n else ""
    return f"{name}[{index}]@{count} = {{{', '.join(texts)}{more}}}"


def _argument(arg: ArgValue, fmt: str | None) -> str:
    """An argument's own value."""
    if fmt is None:
        if arg.type is not None and arg.type.is_pointer:
            return f"({type_text(arg)}) {format_value(arg)}"
        return format_value(arg)
    if arg.type is not None and (arg.type.is_pointer or arg.type.reference):
        if isinstance(arg.value, int):
            return format_as(arg.value, POINTER, fmt)
    elif arg.type is not None:
        elem = element_type(arg.type.base)
        if elem is not None and (arg.value is not None or len(arg.raw) == elem.itemsize):
            values = np.frombuffer(arg.raw[:elem.itemsize], dtype=elem.dtype)
            return format_element(values, elem, fmt=fmt)
    elif isinstance(arg.value, int) and len(arg.raw) in (1, 2, 4, 8):
        return format_as(arg.value, np.dtype(f"u{len(arg.raw)}"), fmt)
    raise CommandError(f"print/{fmt}: arg{arg.index} ({type_text(arg)}) is not a number "
                       f"cudump can format; x/FMT shows its bytes")


def _expression(ctx: Context, text: str, fmt: str | None) -> str:
    """Arithmetic over the arguments, with C's pointer arithmetic; `*EXPR` reads the
    element a pointer expression points to."""
    star = text.startswith("*")
    source = text[1:] if star else text
    try:
        value, ptr = parse_expr(source).evaluate_typed(ctx.values(), pointer_sizes(ctx))
    except ExprError as err:
        raise CommandError(f"expression '{source}': {err}") from None
    except (ZeroDivisionError, OverflowError) as err:
        raise CommandError(f"expression '{source}': {err}") from None
    if star:
        if ptr is None:
            raise CommandError(f"print: '{source.strip()}' is not a pointer: "
                               "* reads what a pointer expression points to")
        arg = ctx.arg(int(ptr[3:]))
        target = pointee(arg)
        rows, _ = read_elements(ctx, arg, int(value), 1, text)
        return f"{text} = {format_element(rows[0], target.elem, target.hexadecimal, fmt)}"
    if ptr is not None:
        if fmt is not None:
            return f"{text} = {format_as(int(value), POINTER, fmt)}"
        return f"{text} = ({type_text(ctx.arg(int(ptr[3:])))}) 0x{int(value):x}"
    if fmt is not None:
        return f"{text} = {format_as(value, number_dtype(value), fmt)}"
    return f"{text} = {format_number(value, None)}"


@command(parser, aliases=("p", "inspect"), requires=(STOPPED,), raw=True, slash=True,
         complete="args", repeat=True)
def print_(ctx: Context, args: argparse.Namespace) -> None:
    ctx.say(print_text(ctx, args.expr, print_format(args.slash)))
