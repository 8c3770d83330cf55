"""TMA tensor maps: the buffers of kernels that reach memory through a CUtensorMap.

On Hopper, cuDNN, cuBLAS and CUTLASS kernels read and write through 128-byte descriptors
made by cuTensorMapEncodeTiled/Im2col/Im2colWide and passed by value, not through pointer
words. The shim remembers what each map was made with and reports the maps it finds in a
launch's parameters (protocol.h's proto_tensormap); the map says exactly where its tensor
lies: from `address`, `dims[0]` elements along the innermost dimension and, for each
further dimension k, `dims[k]` steps of `strides[k - 1]` bytes. So its extent is exact,
never a guess: the byte span from the address to the end of the last element.

The copy plan is 2-D where the outer dimensions nest tightly (each stride the one below
it times its dimension; dimensions of 1 left out): rows of the innermost dimension at the
first stride, shaped
(dims[rank-1], ..., dims[1], dims[0]). Otherwise the span is taken whole, as 1-D elements,
gaps included (a note says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cudump.errors import GeometryError
from cudump.kernels.elements import BF16_NOTE
from cudump.kernels.geometry import Allocation, CopyPlan
from cudump.sizes import human_bytes

# CUtensorMapDataType -> (name, numpy dtype, bits per element, note)
_TYPES: dict[int, tuple[str, str, int, str | None]] = {
    0: ("uint8", "uint8", 8, None),
    1: ("uint16", "uint16", 16, None),
    2: ("uint32", "uint32", 32, None),
    3: ("int32", "int32", 32, None),
    4: ("uint64", "uint64", 64, None),
    5: ("int64", "int64", 64, None),
    6: ("float16", "float16", 16, None),
    7: ("float32", "float32", 32, None),
    8: ("float64", "float64", 64, None),
    9: ("bfloat16", "uint16", 16, BF16_NOTE),
    10: ("float32_ftz", "float32", 32, None),
    11: ("tfloat32", "float32", 32, "tfloat32 stored as float32 (its low mantissa bits unused)"),
    12: ("tfloat32_ftz", "float32", 32,
         "tfloat32 stored as float32 (its low mantissa bits unused)"),
    # Packed sub-byte types: read as their bytes.
    13: ("16u4_align8b", "uint8", 4, "4-bit elements, packed two to a byte: read as bytes"),
    14: ("16u4_align16b", "uint8", 4, "4-bit elements, packed two to a byte: read as bytes"),
    15: ("16u6_align16b", "uint8", 6, "6-bit elements, packed: read as bytes"),
}


@dataclass(frozen=True)
class TensorMap:
    """One tensor map found in a launch's parameters, as the shim reports it."""

    arg: int                       # parameter index
    offset: int                    # byte offset of its 128 bytes inside the parameter
    address: int                   # globalAddress
    encoding: str                  # "tiled", "im2col", "im2col_wide"
    dtype_code: int                # CUtensorMapDataType
    dims: tuple[int, ...]          # globalDim, innermost first (rank entries)
    strides: tuple[int, ...]       # globalStrides in bytes (rank - 1 entries)
    interleave: int = 0
    alloc: Allocation | None = None   # the allocation holding `address`, if known

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def type_name(self) -> str:
        return _TYPES.get(self.dtype_code, (f"type{self.dtype_code}", "uint8", 8, None))[0]

    @property
    def numpy_dtype(self) -> str:
        return _TYPES.get(self.dtype_code, ("", "uint8", 8, None))[1]

    @property
    def bits(self) -> int:
        return _TYPES.get(self.dtype_code, ("", "uint8", 8, None))[2]

    @property
    def row_bytes(self) -> int:
        """Bytes of one run of the innermost dimension."""
        return (self.dims[0] * self.bits + 7) // 8

    @property
    def span(self) -> int:
        """Bytes from the address to the end of the last element (0 for an empty tensor)."""
        if any(d == 0 for d in self.dims):
            return 0
        return self.row_bytes + sum((d - 1) * s for d, s in zip(self.dims[1:], self.strides,
                                                                  strict=False))

    @property
    def stepped(self) -> list[tuple[int, int]]:
        """(dimension, stride) of the outer dimensions the tensor steps along: a dimension
        of 1 is never stepped, so its stride says nothing (a batch of one may have any)."""
        return [(d, s) for d, s in zip(self.dims[1:], self.strides, strict=False) if d > 1]

    @property
    def nested(self) -> bool:
        """Whether the outer dimensions nest tightly on the first stride: then the tensor is
        rows of the innermost dimension at one pitch."""
        outer = self.stepped
        return all(outer[k][1] == outer[k - 1][1] * outer[k - 1][0]
                   for k in range(1, len(outer)))

    @property
    def pitch(self) -> int:
        """Bytes from one row of the innermost dimension to the next, where they nest."""
        outer = self.stepped
        return outer[0][1] if outer else self.row_bytes

    def describe(self) -> str:
        """`tiled float32 rank 2 dims [1024, 512] strides [4096] -> 0x7f00... (2.0 MiB)`"""
        return (f"{self.encoding} {self.type_name} rank {self.rank} "
                f"dims [{', '.join(map(str, self.dims))}] "
                f"strides [{', '.join(map(str, self.strides))}] -> 0x{self.address:x} "
                f"({human_bytes(self.span)})")


def tensormap_plan(tmap: TensorMap, type_text: str | None = "CUtensorMap") -> CopyPlan:
    """The copy of the tensor a map describes. Raises GeometryError where it cannot be
    copied safely: empty, or not inside memory cudump knows (the map is the driver's word,
    but a copy outside an allocation would be cudump's fault)."""
    span = tmap.span
    if span <= 0:
        raise GeometryError(f"the tensor map in arg {tmap.arg} describes an empty tensor")
    alloc = tmap.alloc
    if alloc is None:
        raise GeometryError(f"the tensor map in arg {tmap.arg} points at 0x{tmap.address:x}, "
                            "in no tracked allocation")
    if not alloc.base <= tmap.address or tmap.address + span > alloc.end:
        raise GeometryError(f"the tensor map in arg {tmap.arg} spans {span} bytes from "
                            f"0x{tmap.address:x}, past its allocation 0x{alloc.base:x}.."
                            f"0x{alloc.end:x}")
    note = _TYPES.get(tmap.dtype_code, ("", "", 8, "unknown data type: read as bytes"))[3]
    dtype, bits = tmap.numpy_dtype, tmap.bits
    packed = bits % 8 != 0
    width = tmap.row_bytes
    rows = math.prod(tmap.dims[1:])
    if tmap.nested and tmap.pitch >= width:
        pitch = tmap.pitch
        if packed:
            shape: tuple[int, ...] = (rows, width)
        else:
            shape = (*reversed(tmap.dims[1:]), tmap.dims[0])
        if pitch == width:  # tight: one run of bytes
            return CopyPlan(tmap.arg, tmap.address, width * rows, 1, width * rows, dtype,
                            shape, type_text, note)
        return CopyPlan(tmap.arg, tmap.address, width, rows, pitch, dtype, shape, type_text,
                        note)
    itemsize = max(1, bits // 8) if not packed else 1
    count = span // itemsize
    gaps = "the tensor's strides do not nest: its span is copied whole, gaps included"
    return CopyPlan(tmap.arg, tmap.address, count * itemsize, 1, count * itemsize, dtype,
                    (count,), type_text, "; ".join(n for n in (note, gaps) if n))
