"""Content digests and non-finite scans of buffers: the definitions the GPU computes.

The shim runs shim/gpu/tools.cu on the launch's stream; these are the same
definitions in numpy, used to check it and to digest arrays on the host
(a snapshot and a digest of the same bytes agree).

Digest: the buffer's rows (`width` bytes each) are cut into 32-bit
little-endian words, the last word of a row zero-padded; word i of the whole
buffer adds mix(word + i * GOLDEN) to a sum modulo 2**64. Summing makes the
GPU's order free; mixing each word with its index makes the sum depend on
where every byte is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cudump.wire.protocol import ToolMode

ALGORITHM = "cudump-sum64"
GOLDEN = 0x9E3779B97F4A7C15
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_CHUNK = 1 << 22   # words per step: bounded temporary memory for large buffers

# The float formats the scan knows, by element type name: the kernel's `mode`, and the
# element size a scanned row must be a whole number of.
SCAN_MODES: dict[str, ToolMode] = {
    "float32": ToolMode.SCAN_F32, "float64": ToolMode.SCAN_F64,
    "float16": ToolMode.SCAN_F16, "bfloat16": ToolMode.SCAN_BF16,
}
SCAN_ELEMENT_SIZE: dict[ToolMode, int] = {
    ToolMode.SCAN_F32: 4, ToolMode.SCAN_F64: 8, ToolMode.SCAN_F16: 2, ToolMode.SCAN_BF16: 2,
}


def _mix(x: np.ndarray) -> np.ndarray:
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def words(data: bytes | np.ndarray, width: int | None = None) -> np.ndarray:
    """The 32-bit words of rows of `width` bytes (default: one row), each row zero-padded."""
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray | memoryview) \
        else np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    width = raw.size if width is None else width
    if width == 0 or raw.size == 0:
        return np.zeros(0, dtype=np.uint32)
    rows = raw.reshape(-1, width)
    pad = -width % 4
    if pad:
        rows = np.concatenate([rows, np.zeros((rows.shape[0], pad), dtype=np.uint8)], axis=1)
    return np.ascontiguousarray(rows).reshape(-1).view("<u4")


def digest_words(w: np.ndarray) -> int:
    total = np.uint64(0)
    golden = np.uint64(GOLDEN)
    with np.errstate(over="ignore"):
        for start in range(0, w.size, _CHUNK):
            chunk = w[start:start + _CHUNK].astype(np.uint64)
            index = np.arange(start, start + chunk.size, dtype=np.uint64)
            total += _mix(chunk + index * golden).sum(dtype=np.uint64)
    return int(total)


def digest(data: bytes | np.ndarray, width: int | None = None) -> int:
    """The digest of a buffer given as bytes or an array (rows of `width` bytes)."""
    return digest_words(words(data, width))


def digest_hex(value: int) -> str:
    return f"{value:016x}"


@dataclass(frozen=True)
class Scan:
    """What a non-finite scan found: how many elements are NaN or Inf, and the first."""

    count: int
    first: int | None

    @classmethod
    def from_words(cls, count: int, marked: int) -> Scan:
        """From the kernel's two result words (count, max of ~index)."""
        return cls(count, ((~marked) & (2**64 - 1)) if count else None)


def scan(array: np.ndarray) -> Scan:
    """The scan of a float array on the host (bfloat16 given as uint16 bits)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.dtype == np.uint16:      # bfloat16 bits
        bad = (flat & 0x7F80) == 0x7F80
    else:
        bad = ~np.isfinite(flat)
    where = np.flatnonzero(bad)
    return Scan(int(where.size), int(where[0]) if where.size else None)
