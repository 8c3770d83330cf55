"""Reading device memory for the prompt: chunked to the target's largest read, typed by the
signature."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cudump.kernels.args import ArgValue
from cudump.kernels.elements import ElementType, element_type
from cudump.kernels.expr import ExprError, parse_expr
from cudump.kernels.geometry import CopyPlan
from cudump.launches.stop import StoppedLaunch
from cudump.prompt.context import CommandError

Number = int | float


@dataclass(frozen=True)
class Pointee:
    """What a pointer argument points to, as `print` reads it."""

    elem: ElementType
    hexadecimal: bool = False    # pointers to pointers: elements are addresses


def pointee(arg: ArgValue) -> Pointee:
    """The element type of a pointer argument, from its signature type."""
    ptype = arg.type
    name = f"arg{arg.index}"
    if ptype is None:
        raise CommandError(f"{name} has no type (the kernel has no signature); "
                           f"use x/FMT {name} to see its memory")
    if not ptype.is_pointer or ptype.function:
        raise CommandError(f"{name} is not a pointer to data (its type is {ptype.text})")
    if ptype.pointer_depth >= 2:
        return Pointee(ElementType("uint64", 1), hexadecimal=True)
    elem = element_type(ptype.base)
    if elem is None:
        raise CommandError(f"{name} points to '{ptype.base}', a type cudump does not know; "
                           f"use x/FMT {name}, or dump {name} as TYPE ...")
    return Pointee(elem)


ADDRESS_SPACE = 1 << 64      # device addresses and sizes are 64-bit words in the protocol


def check_span(address: int, nbytes: int) -> None:
    """Refuses a read that the 64-bit address space cannot hold, before anything is sent."""
    if address < 0:
        raise CommandError(f"address {address} is negative")
    if address + nbytes > ADDRESS_SPACE:
        shown = f"0x{address:x}" if address < ADDRESS_SPACE else f"{address} (0x{address:x})"
        what = "the byte" if nbytes == 1 else f"the {nbytes} bytes"
        raise CommandError(f"address {shown} and {what} from it do not fit in the 64-bit "
                           "address space")


class NotInAllocation(CommandError):
    """A read of bytes outside every allocation the target knows: refused before anything is
    asked of the program. `inside`: how many bytes from the start are in allocations."""

    def __init__(self, message: str, inside: int) -> None:
        super().__init__(message)
        self.inside = inside


def covered(stop: StoppedLaunch, address: int, nbytes: int) -> int:
    """How many of the `nbytes` bytes from `address` lie, without a gap, in allocations the
    target knows (tracked by the shim, or resolved by the driver: a query that reads no
    memory)."""
    done = 0
    while done < nbytes:
        alloc = stop.allocation(address + done)
        if alloc is None or not alloc.base <= address + done < alloc.end:
            break
        done = min(nbytes, alloc.end - address)
    return done


def check_inside(stop: StoppedLaunch, address: int, nbytes: int) -> None:
    """Refuses a read of bytes outside the allocations the target knows. A driver may read
    any address it maps (the stand-in one reads host memory, and faults where none is), so
    nothing typed at the prompt is read unless it is in an allocation."""
    inside = covered(stop, address, nbytes)
    if inside == 0:
        raise NotInAllocation(f"address 0x{address:x} is not in any allocation "
                              "('info allocs' lists them)", 0)
    if inside < nbytes:
        raise NotInAllocation(f"the {nbytes} bytes from 0x{address:x} run past the end of "
                              f"the allocations there: 0x{address + inside:x} is not in any "
                              "allocation", inside)


def read(stop: StoppedLaunch, address: int, nbytes: int) -> bytes:
    """`nbytes` from `address`, in reads of at most stop.max_read bytes; refused (before
    anything is read) unless every byte is in an allocation the target knows."""
    check_span(address, nbytes)
    check_inside(stop, address, nbytes)
    return _read_checked(stop, address, nbytes)


def _read_checked(stop: StoppedLaunch, address: int, nbytes: int) -> bytes:
    """read() of a span already checked."""
    step = max(int(stop.max_read), 1)
    parts = []
    done = 0
    while done < nbytes:
        n = min(step, nbytes - done)
        parts.append(stop.read(address + done, n))
        done += n
    return b"".join(parts)


def read_plan(stop: StoppedLaunch, plan: CopyPlan) -> bytes:
    """The bytes a copy plan names (rows of width_bytes at pitch, padding dropped),
    in reads of at most stop.max_read bytes."""
    step = max(int(stop.max_read), 1)
    width, height, pitch = plan.width_bytes, plan.height, plan.pitch
    extent = pitch * (height - 1) + width if height > 1 else width * height
    check_span(plan.address, extent)
    check_inside(stop, plan.address, extent)
    if height == 1 or pitch == width:
        return _read_checked(stop, plan.address, width * height)
    if width > step:
        return b"".join(_read_checked(stop, plan.address + row * pitch, width)
                        for row in range(height))
    rows_per_read = step // width
    parts = []
    for row in range(0, height, rows_per_read):
        rows = min(rows_per_read, height - row)
        parts.append(stop.read2d(plan.address + row * pitch, width, rows, pitch))
    return b"".join(parts)


def evaluate(text: str, values: Mapping[str, Number], what: str) -> Number:
    try:
        return parse_expr(text).evaluate(values)
    except ExprError as err:
        raise CommandError(f"{what} '{text}': {err}") from None
    except (ZeroDivisionError, OverflowError) as err:
        raise CommandError(f"{what} '{text}': {err}") from None


def whole(text: str, values: Mapping[str, Number], what: str, minimum: int = 0) -> int:
    value = evaluate(text, values, what)
    if isinstance(value, float):
        if not value.is_integer():
            raise CommandError(f"{what} '{text}' is {value}, not a whole number")
        value = int(value)
    if value < minimum:
        raise CommandError(f"{what} '{text}' is {value}; it must be >= {minimum}")
    return int(value)
