"""Decoding of a launch's raw parameter bytes into typed values.

Values are little-endian, as on every CUDA host. Decoding by type:
pointers -> unsigned integer address; integer types -> integer of the type's
signedness; float/double/half -> float; bool -> 0 or 1. Parameters of a type
cudump does not know (enums, structs, `device::uchar8` by value) and untyped
ones (no signature) of 1, 2, 4 or 8 bytes are read as unsigned integers, so
that rules can still compute with them and an 8-byte word can be recognised
as a device pointer; anything else has value None. Vector types by value
(`float2`) have value None: they are not one number.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cudump.kernels.elements import element_type
from cudump.kernels.signature import ParamType, Signature

Number = int | float

_FLOATS = {("float32", 4): "<f", ("float64", 8): "<d", ("float16", 2): "<e"}


@dataclass(frozen=True)
class ArgValue:
    index: int
    type: ParamType | None
    raw: bytes
    value: Number | None

    @property
    def looks_like_pointer(self) -> bool:
        """A typed data pointer, or an untyped 8-byte value that may be one.

        Function pointers are code addresses, never buffers, so they are not.
        """
        if self.type is None:
            return len(self.raw) == 8
        return self.type.is_pointer and not self.type.function

    def words(self) -> list[tuple[int, int]]:
        """(byte offset, value) of each aligned 8-byte word of a by-value struct.

        Structs such as `std::array<char*, 3ul>` or tensor accessors carry
        device pointers inside; the caller checks which words fall in a
        tracked allocation.
        """
        return [(off, int.from_bytes(self.raw[off:off + 8], "little"))
                for off in range(0, len(self.raw) - 7, 8)]


def _decode(ptype: ParamType | None, raw: bytes) -> Number | None:
    size = len(raw)
    if ptype is not None and (ptype.is_pointer or ptype.reference):
        return int.from_bytes(raw, "little") if size in (4, 8) else None
    elem = element_type(ptype.base) if ptype is not None else None
    if elem is not None:
        if elem.channels != 1:
            return None
        fmt = _FLOATS.get((elem.dtype, size))
        if fmt is not None:
            return struct.unpack(fmt, raw)[0]
        if elem.dtype.startswith("float"):
            return None  # size does not fit the type: better no value than a wrong one
        signed = elem.dtype.startswith("int")
        return int.from_bytes(raw, "little", signed=signed) if size in (1, 2, 4, 8) else None
    return int.from_bytes(raw, "little") if size in (1, 2, 4, 8) else None


def decode_args(signature: Signature | None, raw: list[bytes]) -> list[ArgValue]:
    """One ArgValue per parameter; types come from the signature where it has them."""
    params = signature.params if signature is not None else None
    out: list[ArgValue] = []
    for index, data in enumerate(raw):
        ptype = params[index] if params is not None and index < len(params) else None
        out.append(ArgValue(index, ptype, bytes(data), _decode(ptype, bytes(data))))
    return out


def arg_values(args: list[ArgValue]) -> dict[str, Number]:
    """{"arg0": ..., "arg1": ...} for expressions; arguments without a value are left out."""
    return {f"arg{a.index}": a.value for a in args if a.value is not None}
