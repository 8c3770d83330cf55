"""C and CUDA element types as numpy dtypes with a channel count.

Sizes are those of CUDA on 64-bit Linux (LP64): `long` is 8 bytes. Plain
`char` is read as int8, as on x86-64 (on aarch64 hosts it is unsigned; state
`dtype: uint8` in a rule there). Types numpy lacks are stored as raw bits of
the same size and say so in `note`: `__nv_bfloat16` -> uint16, the fp8 types
-> uint8. Types with no fixed device layout (`long double`, `__int128`) and
project-defined structs (`device::uchar8`: not a CUDA type) are unknown:
`element_type` returns None and the caller falls back to bytes or to what a
rule states.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# numpy dtype names a rule may state (`dtype: uint16`).
NUMPY_DTYPES = frozenset({
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64",
})


@dataclass(frozen=True)
class ElementType:
    dtype: str        # numpy dtype name
    channels: int     # 1..4: uchar4 -> 4
    note: str | None = None  # set where the dtype only holds the bits (bfloat16 -> uint16)

    @property
    def itemsize(self) -> int:
        """Bytes per element, all channels included."""
        return np.dtype(self.dtype).itemsize * self.channels


_BF16 = BF16_NOTE = "bfloat16 stored as its uint16 bits (numpy has no bfloat16)"
_FP8 = "8-bit float stored as its uint8 bits (numpy has no fp8)"

_SCALARS: dict[str, tuple[str, str | None]] = {
    "char": ("int8", None),
    "signed char": ("int8", None),
    "unsigned char": ("uint8", None),
    "uchar": ("uint8", None),
    "short": ("int16", None),
    "short int": ("int16", None),
    "unsigned short": ("uint16", None),
    "unsigned short int": ("uint16", None),
    "ushort": ("uint16", None),
    "int": ("int32", None),
    "signed int": ("int32", None),
    "unsigned int": ("uint32", None),
    "unsigned": ("uint32", None),
    "uint": ("uint32", None),
    "long": ("int64", None),
    "long int": ("int64", None),
    "unsigned long": ("uint64", None),
    "unsigned long int": ("uint64", None),
    "ulong": ("uint64", None),
    "long long": ("int64", None),
    "long long int": ("int64", None),
    "unsigned long long": ("uint64", None),
    "unsigned long long int": ("uint64", None),
    "wchar_t": ("int32", None),
    "char8_t": ("uint8", None),
    "char16_t": ("uint16", None),
    "char32_t": ("uint32", None),
    "bool": ("bool", None),
    "float": ("float32", None),
    "double": ("float64", None),
    "half": ("float16", None),
    "__half": ("float16", None),
    "c10::Half": ("float16", None),
    "at::Half": ("float16", None),
    "__nv_bfloat16": ("uint16", _BF16),
    "c10::BFloat16": ("uint16", _BF16),
    "at::BFloat16": ("uint16", _BF16),
    "__nv_fp8_e4m3": ("uint8", _FP8),
    "__nv_fp8_e5m2": ("uint8", _FP8),
    "std::byte": ("uint8", None),
}

# CUDA's vector types (vector_types.h): prefix -> scalar dtype.
_VECTOR_PREFIXES = {
    "char": "int8", "uchar": "uint8", "short": "int16", "ushort": "uint16",
    "int": "int32", "uint": "uint32", "long": "int64", "ulong": "uint64",
    "longlong": "int64", "ulonglong": "uint64", "float": "float32", "double": "float64",
}
_PAIRS = {"half2": ("float16", None), "__half2": ("float16", None),
          "__nv_bfloat162": ("uint16", _BF16)}


def element_type(base: str) -> ElementType | None:
    """The element type named by `base` (a ParamType.base), or None if unknown."""
    name = " ".join(base.split())
    if name.startswith("::"):
        name = name[2:]
    if name in _SCALARS:
        dtype, note = _SCALARS[name]
        return ElementType(dtype, 1, note)
    if name in _PAIRS:
        dtype, note = _PAIRS[name]
        return ElementType(dtype, 2, note)
    if name and name[-1] in "1234" and name[:-1] in _VECTOR_PREFIXES:
        return ElementType(_VECTOR_PREFIXES[name[:-1]], int(name[-1]))
    return None


_FLOAT_NAMES = re.compile(r"(?<![\w:])(?:(?:c10|at)::(?:Half|BFloat16)|__nv_bfloat16|__half|half|"
                          r"float|double)(?![\w:])")


# cuDNN's and cuBLAS's precompiled kernels say their types in a block of their plain C name:
# A and B, the math and the accumulator, then C (`sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32
# _f32_nhwckrsc_nhwc_...`, `sm80_xmma_gemm_bf16bf16_bf16f32_bf16_tn_n_...`).
_LIBRARY_TYPE = r"(bf16|f16|tf32|f32|f64)"
_LIBRARY_TYPES = re.compile(rf"_{_LIBRARY_TYPE}{_LIBRARY_TYPE}_{_LIBRARY_TYPE}{_LIBRARY_TYPE}_"
                            rf"{_LIBRARY_TYPE}(?=_)")
_LIBRARY_STORAGE = {"bf16": ("uint16", _BF16), "f16": ("float16", None),
                    "tf32": ("float32", None), "f32": ("float32", None),
                    "f64": ("float64", None)}


@lru_cache(maxsize=4096)
def float_type_in_name(name: str) -> ElementType | None:
    """The one floating-point element type a kernel's name mentions (its template
    arguments: `CUDAFunctor_add<float>`; for a library kernel with a plain C name, its type
    block, where A, B and C are stored in the same type), or None if it names none or
    several."""
    found = {_SCALARS[m.group(0)] for m in _FLOAT_NAMES.finditer(name)}
    if not found:
        block = _LIBRARY_TYPES.search(name)
        if block is not None:
            found = {_LIBRARY_STORAGE[block.group(i)] for i in (1, 2, 5)}
    if len(found) != 1:
        return None
    dtype, note = found.pop()
    return ElementType(dtype, 1, note)


# XLA's HLO element types (xla_data.proto's PrimitiveType, as HLO text writes them).
_HLO: dict[str, tuple[str, str | None]] = {
    "pred": ("bool", None), "s8": ("int8", None), "u8": ("uint8", None),
    "s16": ("int16", None), "u16": ("uint16", None), "s32": ("int32", None),
    "u32": ("uint32", None), "s64": ("int64", None), "u64": ("uint64", None),
    "f16": ("float16", None), "bf16": ("uint16", _BF16), "f32": ("float32", None),
    "f64": ("float64", None),
    # A complex number is two floats: scanned as floats, each part its own element.
    "c64": ("float32", None), "c128": ("float64", None),
}


def hlo_element_type(name: str) -> ElementType | None:
    """The element type an HLO shape names ("f32", "bf16", "s32"), or None (fp8 and the
    narrower types numpy lacks, tokens): not known."""
    found = _HLO.get(name)
    return ElementType(found[0], 1, found[1]) if found else None
