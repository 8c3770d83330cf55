"""The controller's native loop (libcudumpdiff.so, from shim/diff/absdiff.c): `cudump diff`'s
comparison of 8-bit images in one pass instead of numpy's ten. Optional: without the library
(a source checkout that was not built) cudump.analysis.diff computes the same in numpy."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LIBRARY = "libcudumpdiff.so"


class _Totals(ctypes.Structure):
    _fields_ = [("differing", ctypes.c_uint64), ("per_channel", ctypes.c_uint64 * 4),
                ("pixels", ctypes.c_uint64), ("sum_abs", ctypes.c_uint64),
                ("sum_sq", ctypes.c_uint64), ("max_abs", ctypes.c_uint64),
                ("max_at", ctypes.c_uint64)]


@dataclass
class ByteDiff:
    """What one chunk of two 8-bit arrays gives (cudump.analysis.diff adds it to its totals)."""

    differing: int
    per_channel: list[int]
    pixels: int
    sum_abs: int
    sum_sq: int
    max_abs: int
    max_at: int | None      # set when max_abs exceeded `above`


_lib: ctypes.CDLL | None = None
_tried = False


def load(path: Path | None = None) -> bool:
    """Loads the library (by default the one installed with the package); whether it is."""
    global _lib, _tried
    _tried = True
    path = path or Path(__file__).resolve().parents[1] / "_lib" / LIBRARY
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        _lib = None
        return False
    fn = lib.cudump_absdiff_u8
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint,
                   ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.POINTER(_Totals)]
    fn.restype = ctypes.c_int
    _lib = lib
    return True


def unload() -> None:
    """Back to numpy alone (the tests compare the two)."""
    global _lib, _tried
    _lib, _tried = None, True


def available() -> bool:
    if not _tried:
        load()
    return _lib is not None


def byte_diff(a: np.ndarray, b: np.ndarray, channels: int, limit: int,
              above: float) -> ByteDiff | None:
    """|a - b| of two contiguous 1-D int8 or uint8 chunks (whole pixels of `channels`), and
    elements differing by more than `limit`; None where the native loop does not apply."""
    if not available() or channels not in (1, 2, 4) or a.dtype.itemsize != 1:
        return None
    assert _lib is not None
    t = _Totals()
    rc = _lib.cudump_absdiff_u8(a.ctypes.data, b.ctypes.data, a.size, channels,
                                int(a.dtype.kind == "i"), max(0, min(limit, 255)),
                                int(max(above, 0)), ctypes.byref(t))
    if rc != 0:
        return None
    return ByteDiff(t.differing, list(t.per_channel)[:channels], t.pixels, t.sum_abs,
                    t.sum_sq, t.max_abs, t.max_at if t.max_abs > above else None)
