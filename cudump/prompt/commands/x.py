"""`x/NFU ADDRESS`: examine device memory, as gdb's x."""

from __future__ import annotations

import argparse
import re

import numpy as np

from cudump.prompt.context import CommandError, Context
from cudump.prompt.display import char_text, float_text, format_char, safe_allocation
from cudump.prompt.memory import check_span, covered, read, whole
from cudump.prompt.registry import STOPPED, command, make_parser

UNITS = {"b": 1, "h": 2, "w": 4, "g": 8}
PER_LINE = {"b": 8, "h": 8, "w": 4, "g": 2}
FORMATS = "xdufcs"
MAX_BYTES = 1 << 20
MAX_STRING = 200     # as gdb's `print elements`: a longer string ends in "..."
_SIGNED = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_FLOATS = {2: np.float16, 4: np.float32, 8: np.float64}

parser = make_parser(
    "x", "Examine device memory: x/NFU ADDRESS.",
    "N is how many units to show (default 1), F the format and U the unit size:\n"
    "  formats  x hex, d signed decimal, u unsigned decimal, f float, c char,\n"
    "           s a C string (bytes up to a NUL, at most 200 shown; N strings, at most\n"
    "           5216 at a time)\n"
    "  units    b byte, h halfword (2), w word (4), g giant (8)\n"
    "Format and unit default to the last ones used (at first x and w); c defaults to b.\n"
    "ADDRESS is a number or an expression over argument values: arg0, arg0+16,\n"
    "arg0 + arg1*4, 0x7f0000000000 (offsets are in bytes). Without one, x goes on after\n"
    "the last memory shown. Only memory inside the program's allocations is read: units\n"
    "past the end of the allocation that ADDRESS is in are shown after a warning naming\n"
    "it, as far as allocations go on without a gap.",
    usage="x[/NFU] [ADDRESS]")
parser.add_argument("address", nargs="?", metavar="ADDRESS",
                    help="number or expression over argN (default: after the last x)")

_SPEC = re.compile(r"^(\d*)([a-z]*)$")


def parse_spec(spec: str | None, last_format: str, last_unit: str) -> tuple[int, str, str]:
    """`/4xw` -> (4, "x", "w"); missing parts come from the last x."""
    if spec is None or spec == "":
        return 1, last_format, last_unit
    m = _SPEC.match(spec)
    if m is None:
        raise CommandError(f"x: bad format '/{spec}' (write /NFU, e.g. /4xw)")
    count = int(m.group(1)) if m.group(1) else 1
    fmt = unit = None
    for letter in m.group(2):
        if letter in UNITS:
            if unit is not None:
                raise CommandError(f"x: two unit sizes in '/{spec}'")
            unit = letter
        elif letter in FORMATS:
            if fmt is not None:
                raise CommandError(f"x: two formats in '/{spec}'")
            fmt = letter
        else:
            raise CommandError(f"x: unknown format or unit '{letter}' in '/{spec}' "
                               "(formats x d u f c s, units b h w g)")
    fmt = fmt or last_format
    if unit is None:
        unit = "b" if fmt in "cs" else last_unit
        if fmt == "f" and unit == "b":
            unit = "w"
    if count < 1:
        raise CommandError("x: the count must be at least 1")
    if fmt == "f" and unit == "b":
        raise CommandError("x: floats need unit h, w or g")
    if fmt == "s" and unit != "b":
        raise CommandError("x: strings are of bytes (unit b)")
    return count, fmt, unit


def string_text(data: bytes) -> str:
    """Bytes as a C string literal's inside: `a\\n\\"b`."""
    return "".join('\\"' if b == 34 else "'" if b == 39 else char_text(b) for b in data)


def show_strings(ctx: Context, address: int, count: int) -> int:
    """x/Ns: `count` C strings from `address`, each up to its NUL; returns the address
    after the last. A string is read no further than the end of its allocation."""
    for _ in range(count):
        check_span(address, 1)
        alloc = safe_allocation(ctx.stopped, address)
        if alloc is None or not alloc.base <= address < alloc.end:
            raise CommandError(f"x: address 0x{address:x} is not in any allocation ('info "
                               "allocs' lists them)")
        limit = min(MAX_STRING + 1, alloc.end - address)
        data = read(ctx.stopped, address, limit)
        end = data.find(0)
        if end >= 0:
            ctx.say(f'0x{address:x}:  "{string_text(data[:end])}"')
            address += end + 1
        elif len(data) > MAX_STRING:
            ctx.say(f'0x{address:x}:  "{string_text(data[:MAX_STRING])}"...')
            address += MAX_STRING
        else:
            assert alloc is not None
            ctx.say(f'0x{address:x}:  "{string_text(data)}" (no NUL before the end of the '
                    f"allocation at 0x{alloc.base:x}, {alloc.size} bytes)")
            address += len(data)
    return address


def format_units(data: bytes, fmt: str, size: int) -> list[str]:
    if fmt == "x":
        return [f"0x{int(v):0{2 * size}x}" for v in np.frombuffer(data, _UNSIGNED[size])]
    if fmt == "u":
        return [str(int(v)) for v in np.frombuffer(data, _UNSIGNED[size])]
    if fmt == "d":
        return [str(int(v)) for v in np.frombuffer(data, _SIGNED[size])]
    if fmt == "c":
        return [format_char(int(v)) for v in np.frombuffer(data, _SIGNED[size])]
    return [float_text(v) for v in np.frombuffer(data, _FLOATS[size])]


def read_checked(ctx: Context, address: int, nbytes: int, size: int) -> bytes:
    """`nbytes` from `address`; a span that runs past the end of the allocation holding
    `address` gets a warning naming the allocation, and only the units inside allocations
    are read (nothing outside them is ever asked of the program)."""
    stop = ctx.stopped
    check_span(address, nbytes)
    alloc = safe_allocation(stop, address)
    if alloc is None or not alloc.base <= address < alloc.end:
        raise CommandError(f"x: address 0x{address:x} is not in any allocation ('info allocs' "
                           "lists them)")
    end = address + nbytes
    if end > alloc.end:
        ctx.say(f"warning: x: the {nbytes} bytes from 0x{address:x} run {end - alloc.end} "
                f"bytes past the end of the allocation at 0x{alloc.base:x} ({alloc.size} "
                "bytes)")
    inside = covered(stop, address, nbytes)
    if inside < nbytes:
        units = inside // size
        if units == 0:
            raise CommandError(f"x: 0x{address + inside:x} is not in any allocation, so not "
                               f"even one unit of {size} bytes can be shown")
        ctx.say(f"x: 0x{address + inside:x} is not in any allocation; showing the {units} "
                "units before it")
        nbytes = units * size
    return read(stop, address, nbytes)


@command(parser, requires=(STOPPED,), raw=True, slash=True, complete="args", repeat=True)
def x(ctx: Context, args: argparse.Namespace) -> None:
    count, fmt, unit = parse_spec(args.slash, ctx.x_format, ctx.x_unit)
    if args.address is not None:
        address = whole(args.address, ctx.values(), "address")
    elif ctx.x_next is not None:
        address = ctx.x_next
    else:
        raise CommandError("x: give an address: argN, argN+OFFSET or a number")
    if fmt == "s":
        most = MAX_BYTES // (MAX_STRING + 1)     # each string reads up to MAX_STRING + 1 bytes
        if count > most:
            raise CommandError(f"x: {count} strings asked for; at most {most} at a time (each "
                               f"reads up to {MAX_STRING + 1} bytes, and x reads at most "
                               f"{MAX_BYTES})")
        ctx.x_next = show_strings(ctx, address, count)
        ctx.x_format, ctx.x_unit = fmt, unit
        ctx.repeat = f"x/{count}s"
        return
    size = UNITS[unit]
    nbytes = count * size
    if nbytes > MAX_BYTES:
        raise CommandError(f"x: {nbytes} bytes asked for; at most {MAX_BYTES} at a time "
                           "(dump writes whole buffers to files)")
    data = read_checked(ctx, address, nbytes, size)
    count = len(data) // size
    cells = format_units(data, fmt, size)
    width = max(len(c) for c in cells)
    per_line = PER_LINE[unit]
    for start in range(0, count, per_line):
        row = cells[start:start + per_line]
        text = "  ".join(row if fmt in "xc" else (c.rjust(width) for c in row))
        ctx.say(f"0x{address + start * size:x}:  {text}".rstrip())
    ctx.x_format, ctx.x_unit = fmt, unit
    ctx.x_next = address + len(data)
    ctx.repeat = f"x/{count}{fmt}{unit}"      # Enter: the next `count` units
