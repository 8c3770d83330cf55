"""The arithmetic of one chunk of a comparison: running totals, scratch memory, exact sums of
small integers, and the chunk loops for small integers and for floats (see cudump.analysis.diff
for the semantics)."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np

from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.native_diff import ByteDiff, byte_diff

# Columns of the blocks that sums and counts are reduced in: numpy adds a block's rows into one
# row in a wider type (its casting loop is fast, where a same-type reduction along axis 0 is
# slow), and the rows of successive chunks are added up column by column.
COLUMNS = 4096


@dataclass
class Totals:
    """Running sums over the chunks of one comparison."""

    channels: int
    differing: int = 0
    per_channel: list[int] = field(default_factory=list)
    pixels: int = 0
    sum_abs: int | float = 0    # exact integers for integers of up to 16 bits
    sum_sq: int | float = 0
    invalid: int = 0            # elements whose |a - b| is not finite
    nonfinite_mismatch: int = 0
    max_abs: float = 0.0
    max_flat: int | None = None
    # Differing elements by column of COLUMNS // channels * channels (so column j holds
    # channel j % channels), for chunks where some but not all elements differ.
    columns: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.per_channel = [0] * self.channels

    def channel_counts(self) -> list[int]:
        counts = list(self.per_channel)
        if self.columns is not None:
            for ch, n in enumerate(self.columns.reshape(-1, self.channels).sum(axis=0)):
                counts[ch] += int(n)
        return counts


# ---------------------------------------------------------------------------------------
# Scratch memory: each thread keeps its chunk-sized temporaries and reuses them, chunk after
# chunk and pair after pair (fresh memory would cost a page fault per page, every chunk). At
# most a few arrays of CHUNK_ELEMENTS each, freed with the thread.

_scratch = threading.local()


def scratch_buffer(name: str, n: int, dtype: np.dtype | type) -> np.ndarray:
    """This thread's scratch array `name`: n elements of dtype, contents undefined."""
    cache: dict[tuple[str, np.dtype], np.ndarray] | None = getattr(_scratch, "buffers", None)
    if cache is None:
        cache = _scratch.buffers = {}
    key = (name, np.dtype(dtype))
    buf = cache.get(key)
    if buf is None or buf.size < n:
        buf = cache[key] = np.empty(n, dtype)
    return buf[:n]


_U8, _U16, _U32, _U64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
_WIDER = {_U8: _U16, _U16: _U32, _U32: _U64}
_MAX = {t: int(np.iinfo(t).max) for t in (_U8, _U16, _U32, _U64)}


def _exact_sum(x: np.ndarray, bound: int) -> int:
    """The exact sum of unsigned integers x (each at most `bound` >= 1), as a Python int."""
    acc = _WIDER[x.dtype]
    rows = x.size // COLUMNS
    total = 0
    if rows:
        block = max(_MAX[acc] // bound, 1)      # rows that add up without overflow
        body = x[:rows * COLUMNS].reshape(rows, COLUMNS)
        for r in range(0, rows, block):
            row = np.add.reduce(body[r:r + block], axis=0, dtype=acc)
            total += int(np.add.reduce(row, dtype=_U64))
    if rows * COLUMNS < x.size:
        total += int(np.add.reduce(x[rows * COLUMNS:], dtype=_U64))
    return total


def _fold_sum(x: np.ndarray, bound: int) -> int:
    """The exact sum of scratch array x, unsigned integers each at most `bound`, which it
    overwrites: its second half is added onto its first (native SIMD adds, nothing widened)
    while the type holds the sums, and what is left is summed by _exact_sum."""
    n, top = x.size, _MAX[x.dtype]
    while n % 2 == 0 and n > COLUMNS and 2 * bound <= top:
        n //= 2
        np.add(x[:n], x[n:2 * n], out=x[:n])
        bound *= 2
    return _exact_sum(x[:n], bound)


def _count_channels(mask: np.ndarray, t: Totals) -> None:
    """Add a chunk's mask of differing elements per channel, and its pixels with any."""
    c = t.channels
    if c == 1:
        t.per_channel[0] += int(np.count_nonzero(mask))
        return
    cols = COLUMNS // c * c             # whole pixels per row: column j is channel j % c
    if t.columns is None:
        t.columns = np.zeros(cols, np.int64)
    rows = mask.size // cols
    body = mask[:rows * cols].reshape(rows, cols)
    for r in range(0, rows, 255):       # up to 255 rows of 0/1 add up in uint8
        np.add(t.columns, np.add.reduce(body[r:r + 255], axis=0, dtype=_U8), out=t.columns)
    tail = mask[rows * cols:]
    np.add(t.columns[:tail.size], tail, out=t.columns[:tail.size])
    if c in (2, 4):   # one flag byte per channel: a pixel differs if its word is non-zero
        t.pixels += int(np.count_nonzero(mask.view(np.uint16 if c == 2 else np.uint32)))
    else:
        any_ = np.logical_or(mask[0::3], mask[1::3],
                             out=scratch_buffer("pixels", mask.size // 3, bool))
        np.logical_or(any_, mask[2::3], out=any_)
        t.pixels += int(np.count_nonzero(any_))


def _count_all(n: int, t: Totals) -> None:
    """Every element of a chunk of n elements (whole pixels) differs."""
    c = t.channels
    for ch in range(c):
        t.per_channel[ch] += n // c
    if c > 1:
        t.pixels += n // c


def _allowed(bc: np.ndarray, tol: Tolerance) -> np.ndarray:
    """atol + rtol * |b| in float64, as numpy.isclose allows."""
    allowed = scratch_buffer("allowed", bc.size, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(allowed, bc, casting="unsafe")
        np.abs(allowed, out=allowed)
        allowed *= tol.rtol
        allowed += tol.atol
    return allowed


def small_int_chunk(ac: np.ndarray, bc: np.ndarray, start: int, tol: Tolerance,
                     t: Totals) -> int:
    """A chunk of integers of 1 or 2 bytes, in exact integer arithmetic, widened only where
    it must be. Returns how many of its elements differ."""
    if tol.rtol == 0 and ac.dtype.itemsize == 1:
        fast = byte_diff(ac, bc, t.channels, math.floor(min(tol.atol, 2.0**62)), t.max_abs)
        if fast is not None:
            return _add_byte_diff(fast, start, t)
    n = ac.size
    u = _U8 if ac.dtype.itemsize == 1 else _U16     # |a - b| always fits the unsigned type
    # Two scratch arrays: |a - b| in one, then the mask and the squares in the other.
    hi = np.maximum(ac, bc, out=scratch_buffer("hi", n, ac.dtype))
    lo = np.minimum(ac, bc, out=scratch_buffer("lo", n, ac.dtype))
    d = np.subtract(hi.view(u), lo.view(u), out=hi.view(u))   # hi - lo: never wraps
    spare = lo.view(u)
    top = int(np.maximum.reduce(d))
    if top == 0:
        return 0
    low = int(np.minimum.reduce(d))
    nonzero = n if low else None                # elements that are not equal, when known
    mask: np.ndarray | None = None
    if tol.rtol == 0:
        # Integer differences: d > atol  <=>  d > floor(atol), compared in d's own type.
        limit = math.floor(min(tol.atol, 2.0**62))
        if limit >= top:
            count = 0
        elif low > limit:
            count = n
        elif limit == 0:
            count = nonzero = int(np.count_nonzero(d))
        else:
            mask = np.greater(d, limit, out=spare.view(bool)[:n])
            count = int(np.count_nonzero(mask))
    else:
        mask = np.greater(d, _allowed(bc, tol), out=spare.view(bool)[:n])
        count = int(np.count_nonzero(mask))
    t.differing += count
    if count == n:
        _count_all(n, t)
    elif count:
        if mask is None:
            mask = np.greater(d, 0, out=spare.view(bool)[:n])
        _count_channels(mask, t)
    if top > t.max_abs:
        t.max_abs = float(top)
        t.max_flat = start + int(np.argmax(d))
    if top <= 2:
        # |a - b| is 0, 1 or 2, so its square is 3 |a - b| - 2 where it is not 0.
        if nonzero is None:
            nonzero = int(np.count_nonzero(d))
        total = nonzero if top == 1 else _fold_sum(d, top)
        t.sum_abs += total
        t.sum_sq += 3 * total - 2 * nonzero
        return count
    if top * top <= _MAX[u]:                    # squares fit d's own type
        sq = np.square(d, out=spare)
    else:
        sq = np.square(d, dtype=_WIDER[u], out=scratch_buffer("square", n, _WIDER[u]))
    t.sum_abs += _fold_sum(d, top)
    t.sum_sq += _fold_sum(sq, top * top)
    return count


def _add_byte_diff(f: ByteDiff, start: int, t: Totals) -> int:
    """The native loop's figures for a chunk, added as small_int_chunk adds its own."""
    t.differing += f.differing
    for ch, count in enumerate(f.per_channel):
        t.per_channel[ch] += count
    if t.channels > 1:
        t.pixels += f.pixels
    t.sum_abs += f.sum_abs
    t.sum_sq += f.sum_sq
    if f.max_at is not None:
        t.max_abs = float(f.max_abs)
        t.max_flat = start + f.max_at
    return f.differing


def float_chunk(ac: np.ndarray, bc: np.ndarray, start: int, tol: Tolerance,
                 t: Totals) -> int:
    """A chunk of floats or wide integers, in float64. Returns how many of its elements
    differ."""
    n = ac.size
    d = scratch_buffer("float", n, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(ac, bc, out=d, dtype=np.float64)
    np.abs(d, out=d)
    top = d.max()
    mismatch: np.ndarray | None = None
    if not math.isfinite(top):
        bad = ~np.isfinite(d)
        fa, fb = ac[bad].astype(np.float64), bc[bad].astype(np.float64)
        same = (np.isnan(fa) & np.isnan(fb)) | (fa == fb)
        mismatch = np.zeros(d.shape, dtype=bool)
        mismatch[np.flatnonzero(bad)[~same]] = True
        t.invalid += int(np.count_nonzero(bad))
        t.nonfinite_mismatch += int(np.count_nonzero(~same))
        d[bad] = 0.0
        top = d.max()
    if top == 0 and mismatch is None:
        return 0
    mask = scratch_buffer("mask", n, bool)
    if tol.rtol == 0:
        np.greater(d, tol.atol, out=mask)
    else:
        np.greater(d, _allowed(bc, tol), out=mask)
    if mismatch is not None:
        mask |= mismatch
    count = int(np.count_nonzero(mask))
    t.differing += count
    if count == n:
        _count_all(n, t)
    elif count:
        _count_channels(mask, t)
    t.sum_abs += float(d.sum())
    t.sum_sq += float(np.dot(d, d))
    if top > t.max_abs:
        t.max_abs = float(top)
        t.max_flat = start + int(np.argmax(d))
    return count


def bytes_equal(ac: np.ndarray, bc: np.ndarray) -> bool:
    wide = np.uint64 if ac.nbytes % 8 == 0 else np.uint8
    wa, wb = ac.view(wide), bc.view(wide)
    return not np.not_equal(wa, wb, out=scratch_buffer("equal", wa.size, bool)).any()
