"""Content digests and non-finite scans of buffers: the definitions the GPU computes.

The shim runs shim/gpu/tools.cu on the launch's stream; these are the same
definitions in numpy, used to check it and to digest arrays on the host
(a snapshot and a digest of the same bytes agree).

Digest: the buffer's rows (`width` bytes each) are cut into 32-bit
little-endian words, the last word of a row zero-padded; word i of the whole
buffer adds mix(word + i * GOLDEN) to a sum modulo 2**64. Summing makes the
GPU's order free; mixing each word with its index makes the sum depend on
where every byte is.

Beside it, where the buffer's elements are floats of a known format, the sum of |x| over
them (whole elements of each row), as a float64: the tolerant companion of the digest.
Buffers whose elements are each within a tolerance (|a-b| <= atol + rtol*|b|) have sums
within n*atol + rtol*sum|b| of each other (n elements), so sums further apart than that say
for certain that the buffers differ beyond the tolerance; sums within it say only that they
may not. The GPU adds in its own order, so the sum's last bits may differ from run to run
(SUM_SLACK).
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


# A digest's sum of |x|: the float formats it reads elements as (the scan modes), by mode.
SUM_DTYPES: dict[ToolMode, str] = {mode: name for name, mode in SCAN_MODES.items()}
SUM_SIZES: dict[str, int] = {name: SCAN_ELEMENT_SIZE[mode] for name, mode in SCAN_MODES.items()}
# Relative error two sums of the same elements may have from adding in another order
# (float64; far below any tolerance worth asking for).
SUM_SLACK = 1e-9


def _mix(x: np.ndarray) -> np.ndarray:
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def _bytes(data: bytes | np.ndarray) -> np.ndarray:
    """A buffer given as bytes or an array, as its bytes (uint8, one dimension)."""
    if isinstance(data, bytes | bytearray | memoryview):
        return np.frombuffer(data, dtype=np.uint8)
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


def words(data: bytes | np.ndarray, width: int | None = None) -> np.ndarray:
    """The 32-bit words of rows of `width` bytes (default: one row), each row zero-padded."""
    raw = _bytes(data)
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


def abs_sum(data: bytes | np.ndarray, fmt: ToolMode, width: int | None = None) -> float:
    """The sum of |x| of a buffer's elements of format `fmt` (a scan mode), rows of `width`
    bytes (default: one row), whole elements of each row, in float64."""
    raw = _bytes(data)
    size = SCAN_ELEMENT_SIZE[fmt]
    width = raw.size if width is None else width
    if width == 0 or raw.size == 0:
        return 0.0
    rows = raw.reshape(-1, width)[:, :width - width % size]
    flat = np.ascontiguousarray(rows).reshape(-1)
    if fmt == ToolMode.SCAN_BF16:
        bits = flat.view("<u2").astype(np.uint32) << np.uint32(16)
        values = bits.view(np.float32)
    else:
        values = flat.view({ToolMode.SCAN_F32: "<f4", ToolMode.SCAN_F64: "<f8",
                            ToolMode.SCAN_F16: "<f2"}[fmt])
    total = 0.0
    for start in range(0, values.size, _CHUNK):
        total += float(np.abs(values[start:start + _CHUNK].astype(np.float64)).sum())
    return total


def sum_of_bits(bits: int) -> float:
    """The float64 whose bits the kernel's second result word holds."""
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def sum_json(value: float) -> float | str:
    """A sum as a manifest holds it: a number, or "nan" / "inf" (JSON has neither)."""
    return value if np.isfinite(value) else ("nan" if np.isnan(value) else "inf")


def sums_within(a: float, b: float, elements: int, atol: float, rtol: float) -> bool:
    """Whether two sums of |x| over `elements` elements may come from buffers within the
    tolerance (see the module's note): False says for certain they do not. NaN or Inf on
    both sides may; on one side, does not."""
    if not (np.isfinite(a) and np.isfinite(b)):
        return bool(np.isnan(a) and np.isnan(b) or a == b)
    bound = elements * atol + rtol * abs(b) + SUM_SLACK * max(abs(a), abs(b))
    return abs(a - b) <= bound


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
