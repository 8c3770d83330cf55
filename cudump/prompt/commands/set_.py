"""`set var LVALUE = VALUE`: write an element of device memory at a stop.

So that "what if this input were right" can be tried without rebuilding: the element
is written where the launch's arguments point, before the kernel runs (or after it, for
the kernels after it). The launch's own parameters (arguments passed by value) cannot
be changed: the shim holds them as the program passed them.
"""

from __future__ import annotations

import argparse
import re

import numpy as np

from cudump.kernels.elements import ElementType
from cudump.kernels.expr import ExprError, parse_expr
from cudump.prompt.commands.print import pointer_sizes
from cudump.prompt.context import CommandError, Context
from cudump.prompt.memory import Pointee, evaluate, pointee, whole
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser(
    "set", "Write device memory: set var argN[I] = VALUE.",
    "set var argN[I] = VALUE      element I of what argN points to, typed by the signature\n"
    "set var *argN = VALUE        element 0\n"
    "set var *(argN + I) = VALUE  the element a pointer expression points to\n"
    "VALUE is an expression over the arguments (arg3 * 2, 1.5); for vector types a list,\n"
    "{1, 2, 3, 255}. Values are converted as C converts them (a float into an int drops\n"
    "the fraction); one that does not fit the element type is refused (1e40 into a float\n"
    "would become inf). nan, inf and -inf are written as they are into floating elements\n"
    "(to plant a NaN). 'var' may be left out. The element must lie inside the allocation\n"
    "argN points into. Arguments passed by value (argN itself) cannot be changed.",
    usage="set var LVALUE = VALUE")
parser.add_argument("assignment", metavar="LVALUE = VALUE")

_VAR = re.compile(r"^var(?:iable)?\b\s*")
_INDEXED = re.compile(r"^arg(?P<n>\d+)\s*\[(?P<index>[^\]]+)\]$")
_STAR_ARG = re.compile(r"^\*\s*arg(?P<n>\d+)$")
_ARG = re.compile(r"^arg(?P<n>\d+)$")
# The values that are no finite number, as they are written: only floating elements take them.
_NONFINITE = {"nan": float("nan"), "+nan": float("nan"), "-nan": float("nan"),
              "inf": float("inf"), "+inf": float("inf"), "-inf": float("-inf"),
              "infinity": float("inf"), "+infinity": float("inf"),
              "-infinity": float("-inf")}


def split_assignment(text: str) -> tuple[str, str]:
    """`arg0[1] = arg3 == 2` -> ("arg0[1]", "arg3 == 2"): the first `=` that is not part of
    `==`, `<=`, `>=` or `!=`."""
    for i, char in enumerate(text):
        if char != "=":
            continue
        before = text[i - 1] if i else ""
        after = text[i + 1] if i + 1 < len(text) else ""
        if before not in "<>!=" and after != "=":
            left, right = text[:i].strip(), text[i + 1:].strip()
            if left and right:
                return left, right
            break
    raise CommandError("set: write set var LVALUE = VALUE (set var arg0[3] = 1.5)")


def target_of(ctx: Context, lvalue: str) -> tuple[int, Pointee, str, int]:
    """(address, element type, the pointer argument's name, its index) of an lvalue."""
    values = ctx.values()
    m = _INDEXED.match(lvalue) or _STAR_ARG.match(lvalue)
    if m is not None:
        arg = ctx.arg(int(m.group("n")))
        target = pointee(arg)
        if not isinstance(arg.value, int) or arg.value == 0:
            raise CommandError(f"arg{arg.index} is a null pointer")
        index = 0
        if "index" in m.groupdict() and m.group("index") is not None:
            index = whole(m.group("index"), values, "index", minimum=-(1 << 62))
        return arg.value + index * target.elem.itemsize, target, lvalue, arg.index
    if lvalue.startswith("*"):
        source = lvalue[1:]
        try:
            address, ptr = parse_expr(source).evaluate_typed(values, pointer_sizes(ctx))
        except ExprError as err:
            raise CommandError(f"expression '{source}': {err}") from None
        if ptr is not None:
            arg = ctx.arg(int(ptr[3:]))
            return int(address), pointee(arg), lvalue, arg.index
    m = _ARG.match(lvalue)
    if m is not None:
        arg = ctx.arg(int(m.group("n")))
        raise CommandError(f"set: arg{arg.index} is passed by value: the launch's parameters "
                           "cannot be changed, only the device memory they point to "
                           f"(set var arg{arg.index}[I] = VALUE)")
    raise CommandError(f"set: cannot write to '{lvalue}' (write argN[I], *argN or "
                       "*(argN + I))")


def is_floating(elem: ElementType) -> bool:
    return (bool(elem.note) and "bfloat16" in elem.note) or (
        not elem.note and np.dtype(elem.dtype).kind == "f")


def type_name(elem: ElementType) -> str:
    return "bfloat16" if elem.note and "bfloat16" in elem.note else np.dtype(elem.dtype).name


def _overflows(value: int | float, stored: float) -> bool:
    """A finite value that became infinite when stored: it does not fit the type."""
    return bool(np.isfinite(float(value)) and not np.isfinite(stored))


def encode(numbers: list[int | float], elem: ElementType, what: str) -> bytes:
    """The element's bytes, converted as C converts; out-of-range values are refused (a
    finite value too large for a floating type too: C would store inf)."""
    if elem.note and "bfloat16" in elem.note:
        with np.errstate(over="ignore"):
            bits = np.array(numbers, dtype=np.float32).view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
        nan = np.isnan(bits.view(np.float32))
        halves = np.where(nan, bits >> np.uint32(16) | np.uint32(0x40),
                          rounded >> np.uint32(16)).astype(np.uint16)
        stored = (halves.astype(np.uint32) << np.uint32(16)).view(np.float32)
        for value, back in zip(numbers, stored, strict=True):
            if _overflows(value, float(back)):
                raise CommandError(f"set: {value} does not fit in {what} (bfloat16: at most "
                                   "3.39e+38 in magnitude)")
        return halves.tobytes()
    if elem.note:
        raise CommandError(f"set: cudump cannot write this element type ({elem.note})")
    dtype = np.dtype(elem.dtype)
    out = []
    for value in numbers:
        if dtype.kind == "f":
            with np.errstate(over="ignore"):
                stored = dtype.type(value)
            if _overflows(value, float(stored)):
                raise CommandError(f"set: {value} does not fit in {what} ({dtype.name}: at "
                                   f"most {float(np.finfo(dtype).max):.6g} in magnitude)")
            out.append(value)
        elif dtype.kind == "b":
            out.append(bool(value))
        else:
            whole_value = int(value)          # C drops a float's fraction
            info = np.iinfo(dtype)
            if not info.min <= whole_value <= info.max:
                raise CommandError(f"set: {value} does not fit in {what} ({dtype.name}: "
                                   f"{info.min}..{info.max})")
            out.append(whole_value)
    with np.errstate(over="ignore"):
        return np.array(out, dtype=dtype).tobytes()


def values_of(ctx: Context, text: str, elem: ElementType) -> list[int | float]:
    values = ctx.values()
    if text.startswith("{") and text.endswith("}"):
        parts = [p.strip() for p in text[1:-1].split(",")]
    else:
        parts = [text]
    if len(parts) != elem.channels:
        want = "one value" if elem.channels == 1 else \
            f"{elem.channels} values in braces ({{{', '.join(['0'] * elem.channels)}}})"
        raise CommandError(f"set: the element takes {want}, not {len(parts)}")
    out: list[int | float] = []
    for part in parts:
        word = part.replace(" ", "").lower()
        if word in _NONFINITE:
            if not is_floating(elem):
                raise CommandError(f"set: {part} is not a value of {type_name(elem)}: nan and "
                                   "inf go only into floating elements (float, double, half)")
            out.append(_NONFINITE[word])
            continue
        out.append(evaluate(part, values, "value"))
    return out


@command(parser, requires=(STOPPED,), raw=True, complete="args")
def set_(ctx: Context, args: argparse.Namespace) -> None:
    text = _VAR.sub("", args.assignment.strip(), count=1)
    lvalue, rvalue = split_assignment(text)
    address, target, what, index = target_of(ctx, lvalue)
    data = encode(values_of(ctx, rvalue, target.elem), target.elem, what)
    arg = ctx.arg(index)
    alloc = ctx.allocation_for(arg)
    if alloc is None:
        raise CommandError(f"set: arg{index} points into no known allocation; cudump writes "
                           "only inside the device allocations it knows")
    if not (alloc.base <= address and address + len(data) <= alloc.end):
        raise CommandError(f"set: {what} (0x{address:x}..0x{address + len(data):x}) is "
                           f"outside the allocation of arg{index} (0x{alloc.base:x}, "
                           f"{alloc.size} bytes)")
    if alloc.kind == "host":
        raise CommandError(f"set: arg{index} points into host memory; cudump writes device "
                           "memory only")
    ctx.stopped.write(address, data)
