"""How a stop, its arguments and device values are shown. Formats are stable: tests assert them.

Banner (one stop; the type column is as wide as the longest type)::

    Breakpoint 1, launch 2 (occurrence 1) of void scale(float const*, float*, int)
      pid 4242 thread 4243 device 0 grid (4,1,1) block (128,1,1) smem 0 stream 0x0
      arg0  float const* = 0x7f0000000000  -> linear 0x7f0000000000 size 64, offset 0
      arg1  float*       = 0x7f0000100040  -> pitched 0x7f0000100000 size 192 pitch 64 ...
      arg2  int          = 16

A pitched allocation reads `pitched BASE size S pitch P width W B height H, offset O` and,
for an interior pointer, ` (row R, byte B)`. Pointers that fall nowhere say `-> null` or
`-> not in any tracked allocation`; pointers inside an argument passed by value follow it
as `+OFFSET = 0x... -> ...` lines. The first line starts with the reason (`Breakpoint 1`,
`Interrupt`, `Step`) and says `after launch N` for the stop after a kernel ran.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from cudump.kernels.args import ArgValue
from cudump.kernels.elements import ElementType, element_type
from cudump.kernels.geometry import Allocation
from cudump.launches.stop import Frame, StopInfo, StoppedLaunch, TargetError
from cudump.wire import protocol as p

RAW_BYTES_SHOWN = 32
# print/FMT: gdb's letters. x d u o t z show the value's bits (a float's too), c the value
# as an integer and its character, f the value as a floating-point number.
PRINT_FORMATS = "xduotzcf"
_ESCAPES = {0: "\\000", 7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f",
            13: "\\r", 27: "\\033", 39: "\\'", 92: "\\\\"}

AllocationFor = Callable[[ArgValue], Allocation | None]


def dims(d: Sequence[int]) -> str:
    return "(" + ",".join(str(int(v)) for v in d) + ")"


def type_text(arg: ArgValue) -> str:
    return arg.type.text if arg.type is not None else f"<{len(arg.raw)} bytes>"


def arg_label(arg: ArgValue) -> str:
    return f"arg{arg.index} ({type_text(arg)})"


def headline(info: StopInfo) -> str:
    reason = info.reason[:1].upper() + info.reason[1:] if info.reason else "Stopped"
    if info.graph is not None:
        where = "after graph launch" if info.phase == "after" else "graph launch"
        return (f"{reason}, {where} {info.launch} (graph {info.graph}, replay {info.replay}, "
                f"node {info.node}) of {info.kernel}")
    where = "after launch" if info.phase == "after" else "launch"
    return f"{reason}, {where} {info.launch} (occurrence {info.occurrence}) of {info.kernel}"


def placement(info: StopInfo) -> str:
    return (f"  pid {info.pid} thread {info.tid} device {info.device} grid {dims(info.grid)} "
            f"block {dims(info.block)} smem {info.smem} stream {info.stream}")


def describe_allocation(alloc: Allocation, address: int) -> str:
    text = f"{alloc.kind} 0x{alloc.base:x} size {alloc.size}"
    offset = address - alloc.base
    if alloc.kind == "pitched" and alloc.pitch > 0:
        text += f" pitch {alloc.pitch} width {alloc.width_bytes} B height {alloc.height}"
        row, col = divmod(offset, alloc.pitch)
        where = f", offset {offset}"
        if offset and alloc.base <= address < alloc.end:
            where += f" (row {row}, byte {col})"
        return text + where
    return f"{text}, offset {offset}"


def is_typed_pointer(arg: ArgValue) -> bool:
    return arg.type is not None and arg.type.is_pointer and not arg.type.function


def format_number(value: int | float, elem: ElementType | None) -> str:
    """One scalar as its C type would print: floats shortest round-trip at their width."""
    dtype = elem.dtype if elem is not None else None
    if dtype == "bool":
        return "true" if value else "false"
    if isinstance(value, float) or (dtype is not None and dtype.startswith("float")):
        kind = {"float16": np.float16, "float32": np.float32}.get(dtype or "", np.float64)
        number = kind(value)
        if math.isnan(number):
            return "nan"
        if math.isinf(number):
            return "inf" if number > 0 else "-inf"
        return float_text(number)
    return str(int(value))


def char_text(code: int) -> str:
    """One byte as C writes it inside quotes: `A`, `\\n`, `\\377`."""
    code &= 0xFF
    if code in _ESCAPES:
        return _ESCAPES[code]
    if 32 <= code < 127:
        return chr(code)
    return f"\\{code:03o}"


def format_char(value: int) -> str:
    """`65 'A'`: the value and its low byte as a character, as gdb's /c."""
    return f"{value} '{char_text(value)}'"


def format_as(value: int | float, dtype: np.dtype, fmt: str) -> str:
    """One scalar of `dtype` in a print/FMT letter (PRINT_FORMATS)."""
    kind, size = dtype.kind, dtype.itemsize
    if fmt == "f":
        if kind == "f":
            return format_number(value, ElementType(dtype.name, 1))
        return float_text(np.float64(value))
    if fmt == "c":
        return format_char(int(value))
    if kind == "f":
        bits = int(np.array(value, dtype=dtype).view(f"u{size}"))
    else:
        bits = int(value) & ((1 << 8 * size) - 1)
    if fmt == "x":
        return f"0x{bits:x}"
    if fmt == "z":
        return f"0x{bits:0{2 * size}x}"
    if fmt == "o":
        return f"0{bits:o}" if bits else "0"
    if fmt == "t":
        return f"{bits:b}"
    if fmt == "d" and bits >> (8 * size - 1):
        return str(bits - (1 << 8 * size))
    return str(bits)


def number_dtype(value: int | float) -> np.dtype:
    """The C type an expression's result is printed as: double, long, unsigned long."""
    if isinstance(value, float):
        return np.dtype("float64")
    return np.dtype("int64") if value < 1 << 63 else np.dtype("uint64")


def float_text(number: np.floating) -> str:
    """Shortest text that reads back as the same value at its width, `1` for 1.0 as gdb."""
    text = str(number)
    return text[:-2] if text.endswith(".0") else text


def raw_bytes(raw: bytes) -> str:
    shown = " ".join(f"{b:02x}" for b in raw[:RAW_BYTES_SHOWN])
    more = " ..." if len(raw) > RAW_BYTES_SHOWN else ""
    return f"<{len(raw)} bytes: {shown}{more}>" if raw else "<0 bytes>"


def format_value(arg: ArgValue) -> str:
    """An argument's value: pointers and untyped words in hex, numbers in their type."""
    if arg.type is not None and (arg.type.is_pointer or arg.type.reference):
        return f"0x{arg.value:x}" if isinstance(arg.value, int) else raw_bytes(arg.raw)
    if arg.type is None:
        if isinstance(arg.value, int) and len(arg.raw) == 8:
            return f"0x{arg.value:x}"
        return str(arg.value) if arg.value is not None else raw_bytes(arg.raw)
    elem = element_type(arg.type.base)
    if arg.value is not None:
        return format_number(arg.value, elem)
    if elem is not None and elem.channels > 1 and len(arg.raw) == elem.itemsize:
        values = np.frombuffer(arg.raw, dtype=elem.dtype)
        return format_element(values, elem)
    return raw_bytes(arg.raw)


def format_element(values: np.ndarray, elem: ElementType, hexadecimal: bool = False,
                   fmt: str | None = None) -> str:
    """One element: a number, or `{r, g, b, a}` for vector types. bfloat16 bits are shown
    as the float they hold; `hexadecimal` is for pointers stored in memory; `fmt` a
    print/FMT letter."""
    flat = [v.item() for v in np.asarray(values).reshape(-1)]
    if fmt is not None and not (fmt == "f" and elem.note and "bfloat16" in elem.note):
        texts = [format_as(v, np.dtype(elem.dtype), fmt) for v in flat]
        return texts[0] if elem.channels == 1 else "{" + ", ".join(texts) + "}"
    if elem.note and "bfloat16" in elem.note:
        bits = np.array(flat, dtype=np.uint32) << np.uint32(16)
        flat = [float(v) for v in bits.view(np.float32)]
        elem = ElementType("float32", elem.channels)
    if hexadecimal:
        texts = [f"0x{int(v):x}" for v in flat]
    else:
        texts = [format_number(v, elem) for v in flat]
    if elem.channels == 1:
        return texts[0]
    return "{" + ", ".join(texts) + "}"


def arg_lines(stop: StoppedLaunch, allocation_for: AllocationFor | None = None) -> list[str]:
    """One line per argument (index, type, value, allocation), aligned in columns."""
    info = stop.info
    args = info.args
    if not args:
        return ["  (no arguments)"]
    name_w = max(len(f"arg{a.index}") for a in args)
    tmaps = info.tensormaps

    def shown_type(arg: ArgValue) -> str:
        # A parameter that is one tensor map is shown as what it is.
        whole = (arg.index, 0) in tmaps and len(arg.raw) == p.TMAP_BYTES
        return "CUtensorMap" if whole else type_text(arg)

    type_w = max(len(shown_type(a)) for a in args)
    lines: list[str] = []
    for arg in args:
        head = f"  {f'arg{arg.index}':<{name_w}}  {shown_type(arg):<{type_w}}"
        whole_map = tmaps.get((arg.index, 0)) if len(arg.raw) == p.TMAP_BYTES else None
        if whole_map is not None:
            lines.append(f"{head} = {whole_map.describe()}")
            continue
        line = f"{head} = {format_value(arg)}"
        scalar = isinstance(arg.value, int)
        alloc = info.allocation_of(arg.index) if scalar else None
        if alloc is None and allocation_for is not None and scalar:
            alloc = allocation_for(arg)
        if alloc is not None and isinstance(arg.value, int):
            line += f"  -> {describe_allocation(alloc, arg.value)}"
        elif is_typed_pointer(arg) and isinstance(arg.value, int):
            line += "  -> null" if arg.value == 0 else "  -> not in any tracked allocation"
        lines.append(line)
        # Pointers inside an argument passed by value (std::array<char*, 3>, accessors).
        for (index, offset), field_alloc in sorted(info.pointers.items()):
            if index != arg.index or (offset == 0 and scalar):
                continue
            word = int.from_bytes(arg.raw[offset:offset + 8], "little")
            label = f"+{offset}"
            lines.append(f"  {'':<{name_w}}  {label:<{type_w}} = 0x{word:x}  -> "
                         f"{describe_allocation(field_alloc, word)}")
        # Tensor maps inside a struct passed by value (CUTLASS's Params).
        for (index, offset), tmap in sorted(tmaps.items()):
            if index == arg.index:
                label = f"+{offset}"
                lines.append(f"  {'':<{name_w}}  {label:<{type_w}} = CUtensorMap "
                             f"{tmap.describe()}")
    return lines


def banner(stop: StoppedLaunch, allocation_for: AllocationFor | None = None) -> list[str]:
    where = [f"  {stop.info.where.text()}"] if stop.info.where else []
    return [headline(stop.info), *where, placement(stop.info),
            *arg_lines(stop, allocation_for)]


def scope_lines(info: StopInfo) -> list[str]:
    """What `bt` shows above the host frames: the scopes open on the launching thread,
    innermost first as frames are (`scope 0  layer3.0.conv1 (forward, step 2)`), and the
    line of the program's own code that made the launch (`source   train.py:57`)."""
    where = info.where
    lines = []
    for depth, name in enumerate(reversed(where.scopes)):
        inside = [p for p in (where.pass_ if name == where.layer else None,
                              f"step {where.step}" if depth == 0 and where.step is not None
                              else None) if p]
        lines.append(f"scope {depth:<2} {name}" + (f" ({', '.join(inside)})" if inside else ""))
    if not where.scopes and where.step is not None:
        lines.append(f"step     {where.step}")
    if where.source:
        lines.append(f"source   {where.source}")
    return lines


def format_frame(frame: Frame) -> str:
    text = f"#{frame.index:<2} 0x{frame.address:016x} in "
    if frame.symbol:
        text += frame.symbol
        if frame.offset:
            text += f"+0x{frame.offset:x}"
        if frame.module:
            text += f" ({frame.module})"
        return text
    text += "??"
    if frame.module:
        offset = f"+0x{frame.offset:x}" if frame.offset else ""
        text += f" ({frame.module}{offset})"
    return text


def safe_allocation(stop: StoppedLaunch, address: int) -> Allocation | None:
    try:
        return stop.allocation(address)
    except TargetError:
        return None
