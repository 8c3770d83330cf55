"""Snapshot geometry: which bytes of an allocation a pointer argument names.

A plan is a 2-D copy (rows of `width_bytes` at `pitch`, as cuMemcpy2D takes
it; a 1-D buffer is one row) and the numpy dtype and shape of the result.

- Pitched allocation: the rows x width of the allocation at its pitch, padding
  dropped. An interior pointer starts at its row (offset // pitch) and column
  (offset % pitch) and takes the remaining rows and the remaining width.
- Any other allocation (linear, managed, async, vmm, range): the bytes from the
  pointer to the end of the allocation, as a 1-D array.
- A rule's override decides instead where it says so: `count` elements as a
  1-D array; or `width`/`height`/`pitch` as an image. What it leaves out comes
  from a pitched allocation (its width, pitch, remaining rows) or, for linear
  memory, from the other two (tight rows; as many whole rows as fit).
- Element type: the override's dtype/channels, else the signature's pointee
  type (cudump.kernels.elements), else bytes (uint8 x 1). Pointers to pointers are
  uint64.
- Shapes: images (height, width, channels), or (height, width) for one
  channel; 1-D buffers (count, channels) or (count,).
- A width in bytes that is not a whole number of elements is cut to whole
  elements, and the plan's `note` says how many bytes were left out. Asking a
  rule for more than the allocation holds is a GeometryError, never a read
  outside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from cudump.errors import GeometryError
from cudump.kernels.args import ArgValue
from cudump.kernels.elements import ElementType, element_type
from cudump.kernels.expr import Expr, ExprError
from cudump.kernels.overrides import ArgOverride

__all__ = ["Allocation", "CopyPlan", "GeometryError", "plan_copy"]

Number = int | float


@dataclass(frozen=True)
class Allocation:
    base: int
    size: int
    kind: str   # "linear", "pitched", "managed", "async", "vmm", "range"
    pitch: int = 0        # pitched only: bytes from row to row
    width_bytes: int = 0  # pitched only: bytes of data in a row
    height: int = 0       # pitched only: rows
    elem_size: int = 0    # pitched only: ElementSizeBytes given to cuMemAllocPitch

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(frozen=True)
class CopyPlan:
    arg: int
    address: int       # device address of the first byte copied
    width_bytes: int
    height: int
    pitch: int         # source pitch (== width_bytes for 1-D buffers)
    dtype: str
    shape: tuple[int, ...]
    type_text: str | None
    note: str | None = None  # what the plan had to leave out or assume

    @property
    def nbytes(self) -> int:
        return self.width_bytes * self.height


def _element(arg: ArgValue, override: ArgOverride | None,
             values: Mapping[str, Number]) -> tuple[ElementType, str | None]:
    note = None
    ptype = arg.type
    if override is not None and override.dtype is not None:
        elem = ElementType(override.dtype, 1, override.note)
        note = override.note
    elif ptype is not None and ptype.pointer_depth >= 2:
        elem = ElementType("uint64", 1)
    elif ptype is not None and ptype.is_pointer and not ptype.function:
        found = element_type(ptype.base)
        if found is None:
            note = f"element type {ptype.base!r} is unknown; read as bytes"
            elem = ElementType("uint8", 1)
        else:
            elem, note = found, found.note
    else:
        elem = ElementType("uint8", 1)
    if override is not None and override.channels is not None:
        channels = _whole(override.channels, "channels", values, 1)
        elem = ElementType(elem.dtype, channels, elem.note)
    return elem, note


def _whole(expr: Expr, name: str, values: Mapping[str, Number], minimum: int) -> int:
    try:
        value = expr.evaluate(values)
    except ExprError as err:
        raise GeometryError(f"{name} = {expr.text}: {err}") from None
    if not math.isfinite(value) or value != int(value) or value < minimum:
        raise GeometryError(f"{name} = {expr.text} gives {value}, "
                            f"expected a whole number >= {minimum}")
    return int(value)


def _join(*notes: str | None) -> str | None:
    kept = [n for n in notes if n]
    return "; ".join(kept) if kept else None


def plan_copy(arg: ArgValue, alloc: Allocation | None, override: ArgOverride | None,
              values: Mapping[str, Number]) -> CopyPlan:
    """Plan the snapshot of one pointer argument. Raises GeometryError with the reason."""
    if not isinstance(arg.value, int):
        raise GeometryError(f"argument {arg.index} has no pointer value")
    address = arg.value
    if alloc is None:
        raise GeometryError(f"pointer 0x{address:x} is not in any tracked allocation")
    if not alloc.base <= address < alloc.end:
        raise GeometryError(f"pointer 0x{address:x} is outside its allocation "
                            f"0x{alloc.base:x}..0x{alloc.end:x}")
    elem, elem_note = _element(arg, override, values)
    type_text = arg.type.text if arg.type is not None else None
    pitched = alloc.kind == "pitched" and alloc.pitch > 0

    if override is not None and override.count is not None:
        count = _whole(override.count, "count", values, 1)
        return _linear(arg.index, address, alloc, elem, count, type_text, elem_note)
    if override is not None and override.is_2d:
        return _image_from_rule(arg.index, address, alloc, elem, override, values, type_text,
                                elem_note)
    if pitched:
        return _pitched(arg.index, address, alloc, elem, type_text, elem_note)
    remaining = alloc.end - address
    count = remaining // elem.itemsize
    if count == 0:
        raise GeometryError(f"pointer 0x{address:x} leaves {remaining} bytes in its allocation, "
                            f"less than one {elem.itemsize}-byte element")
    cut = remaining - count * elem.itemsize
    note = f"the last {cut} bytes do not fill a whole element and are left out" if cut else None
    return _linear(arg.index, address, alloc, elem, count, type_text, _join(elem_note, note))


def _shape(elem: ElementType, *dims: int) -> tuple[int, ...]:
    return (*dims, elem.channels) if elem.channels > 1 else tuple(dims)


def _linear(index: int, address: int, alloc: Allocation, elem: ElementType, count: int,
            type_text: str | None, note: str | None) -> CopyPlan:
    nbytes = count * elem.itemsize
    remaining = alloc.end - address
    if nbytes > remaining:
        raise GeometryError(f"{count} elements of {elem.itemsize} bytes need {nbytes} bytes "
                            f"from 0x{address:x}, but the allocation has {remaining} left")
    return CopyPlan(index, address, nbytes, 1, nbytes, elem.dtype, _shape(elem, count),
                    type_text, note)


def _whole_width(width_bytes: int, elem: ElementType) -> tuple[int, str | None]:
    """Elements per row, and a note when bytes at the end of a row were left out."""
    width = width_bytes // elem.itemsize
    cut = width_bytes - width * elem.itemsize
    note = (f"rows of {width_bytes} bytes are not whole {elem.itemsize}-byte elements; "
            f"the last {cut} bytes of each row are left out") if cut else None
    return width, note


def _pitched(index: int, address: int, alloc: Allocation, elem: ElementType,
             type_text: str | None, elem_note: str | None) -> CopyPlan:
    offset = address - alloc.base
    row, col = divmod(offset, alloc.pitch)
    if col >= alloc.width_bytes:
        raise GeometryError(f"pointer 0x{address:x} is in the padding of row {row} of the "
                            f"pitched allocation 0x{alloc.base:x} (column {col} >= width "
                            f"{alloc.width_bytes} bytes)")
    rows = (alloc.height or alloc.size // alloc.pitch) - row
    width, note = _whole_width(alloc.width_bytes - col, elem)
    if width == 0:
        raise GeometryError(f"pointer 0x{address:x} leaves {alloc.width_bytes - col} bytes in "
                            f"its row, less than one {elem.itemsize}-byte element")
    return _image(index, address, alloc, elem, width, rows, alloc.pitch, type_text,
                  _join(elem_note, note))


def _image_from_rule(index: int, address: int, alloc: Allocation, elem: ElementType,
                     override: ArgOverride, values: Mapping[str, Number],
                     type_text: str | None, elem_note: str | None) -> CopyPlan:
    pitched = alloc.kind == "pitched" and alloc.pitch > 0
    offset = address - alloc.base
    remaining = alloc.end - address
    pitch = _whole(override.pitch, "pitch", values, 1) if override.pitch is not None else None
    if pitch is None and pitched:
        pitch = alloc.pitch
    note = None
    if override.width is not None:
        width = _whole(override.width, "width", values, 1)
    elif pitched:
        width, note = _whole_width(alloc.width_bytes - offset % alloc.pitch, elem)
    elif pitch is not None:
        width, note = _whole_width(pitch, elem)
    else:
        raise GeometryError("the rule gives no width for a buffer in linear memory; "
                            "add 'width' to its override")
    width_bytes = width * elem.itemsize
    if pitch is None:
        pitch = width_bytes
    if width_bytes > pitch:
        raise GeometryError(f"width {width} x {elem.itemsize} bytes = {width_bytes} bytes "
                            f"exceeds the pitch of {pitch} bytes")
    if override.height is not None:
        height = _whole(override.height, "height", values, 1)
    elif pitched and pitch == alloc.pitch:
        height = (alloc.height or alloc.size // alloc.pitch) - offset // alloc.pitch
    else:
        height = (remaining - width_bytes) // pitch + 1 if remaining >= width_bytes else 0
    if height < 1:
        raise GeometryError(f"not one row of {width_bytes} bytes fits between 0x{address:x} "
                            f"and the end of its allocation ({remaining} bytes)")
    return _image(index, address, alloc, elem, width, height, pitch, type_text,
                  _join(elem_note, note))


def _image(index: int, address: int, alloc: Allocation, elem: ElementType, width: int,
           height: int, pitch: int, type_text: str | None, note: str | None) -> CopyPlan:
    width_bytes = width * elem.itemsize
    need = (height - 1) * pitch + width_bytes
    remaining = alloc.end - address
    if need > remaining:
        raise GeometryError(f"{height} rows of {width_bytes} bytes at pitch {pitch} need "
                            f"{need} bytes from 0x{address:x}, but the allocation has "
                            f"{remaining} left")
    return CopyPlan(index, address, width_bytes, height, pitch, elem.dtype,
                    _shape(elem, height, width), type_text, note)
