"""Comparing buffers: metrics of two arrays, and two runs aligned snapshot by snapshot.

Semantics (stated once, used by `cudump diff` and the HTML report):
- An element differs when |a - b| > atol + rtol * |b| (numpy.isclose). The defaults are
  atol = rtol = 0: any change counts.
- NaN against NaN is equal, as are infinities of the same sign; NaN or Inf against anything
  else differs. Such elements are counted in `nonfinite_mismatch` and left out of the largest
  difference, the mean absolute difference and the RMSE, which are over the elements where
  |a - b| is finite.
- PSNR = 10 log10(peak^2 / MSE) with peak the dtype's maximum for integers and the finite data
  range of A for floats; inf when MSE is 0, None when the peak is 0.
- Integers of up to 16 bits are compared exactly in integer arithmetic; wider integers and
  floats in float64 (integers beyond 2**53 lose precision there).
- Empty arrays of the same shape and dtype are equal (0 elements, nothing differs).
- In runs, a snapshot that the program's run could not capture on either side, for the same
  reason (device addresses aside), is "not captured on either side": reported, not counted
  as a difference and not as trouble. Captured on one side only, or for different reasons,
  it cannot be compared (trouble).
- Digests (`cudump --digest`, `format: digest`): two digest records compare by digest, byte
  count and geometry, exactly (tolerances do not apply: a digest says only whether the bytes
  are the same). A digest against an .npy compares by digesting the array's bytes the way
  the digest was taken (cudump.policy.digest, rows of the digest's `row_bytes`).
- A run diff names its first divergent launch: launches in order (processes in the order
  they first appear in A's manifest, each one's launches in sequence), the first with a pair
  whose buffers differ, and how many launches before it matched.

Work is done in chunks of about a million elements, whose temporaries stay in cache and are
reused (one set per thread); a stretch whose bytes are identical costs one comparison.
Integers of up to 16 bits never leave integer arithmetic: |a - b| is max - min in the
unsigned type of their width, sums are added in place, half onto half, while the type holds
them, and only what is left is widened; a chunk where every element differs is counted
without a mask. Pairs of a run are compared `jobs` at a time, in worker processes when there
is much to compare (see parallel_kind), on threads otherwise.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import re
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import numpy as np

from cudump.analysis.native_diff import ByteDiff, byte_diff
from cudump.errors import CudumpError, DiffTrouble
from cudump.policy import digest as digests
from cudump.policy.pattern import KernelPattern
from cudump.rundir.runs import Digest, Run, Snapshot, in_launch_order, kernel_pattern

CHUNK_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class Tolerance:
    atol: float = 0.0
    rtol: float = 0.0

    def __post_init__(self) -> None:
        if not (self.atol >= 0 and self.rtol >= 0):
            raise DiffTrouble(f"tolerances must be >= 0 (atol {self.atol}, rtol {self.rtol})")


@dataclass
class Metrics:
    dtype: str
    shape: tuple[int, ...]
    elements: int
    differing: int
    channels: int                              # 1, or the size of a last axis of 2..4
    channel_differing: list[int] | None        # per channel when channels > 1
    pixels_differing: int | None               # pixels (any channel differs) when channels > 1
    max_abs: float                             # largest finite |a - b|
    max_index: tuple[int, ...] | None          # where it is (None when all equal)
    a_at_max: float | None
    b_at_max: float | None
    mean_abs: float
    rmse: float
    psnr: float | None
    peak: float | None
    nonfinite_mismatch: int

    @property
    def equal(self) -> bool:
        return self.differing == 0

    @property
    def share(self) -> float:
        return self.differing / self.elements if self.elements else 0.0


def channel_count(shape: Sequence[int]) -> int:
    """Channels are a last axis of 2..4 on data of two or more dimensions."""
    if len(shape) >= 2 and 2 <= shape[-1] <= 4:
        return int(shape[-1])
    return 1


def check_comparable(a: np.ndarray, b: np.ndarray, what: str = "") -> None:
    where = f"{what}: " if what else ""
    if a.shape != b.shape:
        raise DiffTrouble(f"{where}shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise DiffTrouble(f"{where}dtypes differ: {a.dtype} vs {b.dtype}")


# Columns of the blocks that sums and counts are reduced in: numpy adds a block's rows into one
# row in a wider type (its casting loop is fast, where a same-type reduction along axis 0 is
# slow), and the rows of successive chunks are added up column by column.
COLUMNS = 4096


@dataclass
class _Totals:
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


def _buffer(name: str, n: int, dtype: np.dtype | type) -> np.ndarray:
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


def _count_channels(mask: np.ndarray, t: _Totals) -> None:
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
        any_ = np.logical_or(mask[0::3], mask[1::3], out=_buffer("pixels", mask.size // 3, bool))
        np.logical_or(any_, mask[2::3], out=any_)
        t.pixels += int(np.count_nonzero(any_))


def _count_all(n: int, t: _Totals) -> None:
    """Every element of a chunk of n elements (whole pixels) differs."""
    c = t.channels
    for ch in range(c):
        t.per_channel[ch] += n // c
    if c > 1:
        t.pixels += n // c


def _allowed(bc: np.ndarray, tol: Tolerance) -> np.ndarray:
    """atol + rtol * |b| in float64, as numpy.isclose allows."""
    allowed = _buffer("allowed", bc.size, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(allowed, bc, casting="unsafe")
        np.abs(allowed, out=allowed)
        allowed *= tol.rtol
        allowed += tol.atol
    return allowed


def _small_int_chunk(ac: np.ndarray, bc: np.ndarray, start: int, tol: Tolerance,
                     t: _Totals) -> int:
    """A chunk of integers of 1 or 2 bytes, in exact integer arithmetic, widened only where
    it must be. Returns how many of its elements differ."""
    if tol.rtol == 0 and ac.dtype.itemsize == 1:
        fast = byte_diff(ac, bc, t.channels, math.floor(min(tol.atol, 2.0**62)), t.max_abs)
        if fast is not None:
            return _add_byte_diff(fast, start, t)
    n = ac.size
    u = _U8 if ac.dtype.itemsize == 1 else _U16     # |a - b| always fits the unsigned type
    # Two scratch arrays: |a - b| in one, then the mask and the squares in the other.
    hi = np.maximum(ac, bc, out=_buffer("hi", n, ac.dtype))
    lo = np.minimum(ac, bc, out=_buffer("lo", n, ac.dtype))
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
        sq = np.square(d, dtype=_WIDER[u], out=_buffer("square", n, _WIDER[u]))
    t.sum_abs += _fold_sum(d, top)
    t.sum_sq += _fold_sum(sq, top * top)
    return count


def _add_byte_diff(f: ByteDiff, start: int, t: _Totals) -> int:
    """The native loop's figures for a chunk, added as _small_int_chunk adds its own."""
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


def _float_chunk(ac: np.ndarray, bc: np.ndarray, start: int, tol: Tolerance,
                 t: _Totals) -> int:
    """A chunk of floats or wide integers, in float64. Returns how many of its elements
    differ."""
    n = ac.size
    d = _buffer("float", n, np.float64)
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
    mask = _buffer("mask", n, bool)
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


def _bytes_equal(ac: np.ndarray, bc: np.ndarray) -> bool:
    wide = np.uint64 if ac.nbytes % 8 == 0 else np.uint8
    wa, wb = ac.view(wide), bc.view(wide)
    return not np.not_equal(wa, wb, out=_buffer("equal", wa.size, bool)).any()


def _step(channels: int, elements: int) -> int:
    """Chunk length: whole pixels and whole 8-byte words, so channel strides and word views
    line up."""
    return max(elements // (8 * channels), 1) * 8 * channels


def compare_arrays(a: np.ndarray, b: np.ndarray, tol: Tolerance | None = None) -> Metrics:
    """Metrics of B against A. Shapes and dtypes must match (DiffTrouble otherwise)."""
    tol = tol or Tolerance()
    a, b = np.asarray(a), np.asarray(b)
    check_comparable(a, b)
    if a.dtype.kind not in "uifb":
        raise DiffTrouble(f"cannot compare data of dtype {a.dtype}")
    fa = np.ascontiguousarray(a).reshape(-1)
    fb = np.ascontiguousarray(b).reshape(-1)
    if fa.dtype == np.bool_:
        fa, fb = fa.view(np.uint8), fb.view(np.uint8)
    channels = channel_count(a.shape)
    totals = _Totals(channels)
    # Unless most of the last chunk differed, the next stretch (a probe) is first checked for
    # identical bytes, one cheap pass, and skipped if so; a chunk is compared from where a
    # probe found a difference, and after a chunk mostly different the next one is compared
    # right away (such differences go on). Floats: a probe is a whole chunk, so chunks start
    # at fixed places and float sums do not depend on where the differences are.
    step = _step(channels, CHUNK_ELEMENTS)
    if fa.dtype.kind in "ui" and fa.dtype.itemsize <= 2:
        chunk, probe = _small_int_chunk, _step(channels, CHUNK_ELEMENTS // 4)
    else:
        chunk, probe = _float_chunk, step
    check = True
    skipped: list[np.ndarray] = []
    pos, n = 0, fa.size
    while pos < n:
        if check:
            end = min(pos + probe, n)
            if _bytes_equal(fa[pos:end], fb[pos:end]):
                skipped.append(fa[pos:end])
                pos = end
                continue
        end = min(pos + step, n)
        check = 2 * chunk(fa[pos:end], fb[pos:end], pos, tol, totals) < end - pos
        pos = end
    if fa.dtype.kind == "f" and totals.sum_abs:
        # NaN or Inf against the same is equal but has no finite |a - b|: it is left out of
        # the means, so identical spans count too (only needed when the means are not 0).
        for same in skipped:
            finite = np.isfinite(same, out=_buffer("finite", same.size, bool))
            totals.invalid += same.size - int(np.count_nonzero(finite))
    return _metrics(a, b, totals)


def _metrics(a: np.ndarray, b: np.ndarray, t: _Totals) -> Metrics:
    n = a.size
    valid = n - t.invalid
    mean_abs = t.sum_abs / valid if valid else 0.0
    mse = t.sum_sq / valid if valid else 0.0
    peak: float | None
    if a.dtype.kind in "ui":
        peak = float(np.iinfo(a.dtype).max)
    elif a.dtype.kind == "b":
        peak = 1.0
    else:
        peak = None
    psnr: float | None
    if mse == 0:
        psnr = math.inf
    else:
        if peak is None:          # floats: the data range of A, measured only when needed
            from cudump.rundir.imaging import finite_range

            span = finite_range(a)
            peak = span[1] - span[0] if span else 0.0
        psnr = 10 * math.log10(peak * peak / mse) if peak > 0 else None
    where = a_val = b_val = None
    if t.max_flat is not None:
        where = tuple(int(i) for i in np.unravel_index(t.max_flat, a.shape))
        a_val, b_val = float(a[where]), float(b[where])
    multi = t.channels > 1
    return Metrics(
        dtype=str(a.dtype),
        shape=tuple(a.shape),
        elements=n,
        differing=t.differing,
        channels=t.channels,
        channel_differing=t.channel_counts() if multi else None,
        pixels_differing=t.pixels if multi else None,
        max_abs=t.max_abs,
        max_index=where,
        a_at_max=a_val,
        b_at_max=b_val,
        mean_abs=mean_abs,
        rmse=math.sqrt(mse),
        psnr=psnr,
        peak=peak,
        nonfinite_mismatch=t.nonfinite_mismatch,
    )


# ---------------------------------------------------------------------------------------
# Runs

PairKey = tuple[str, int, int, str, int]   # kernel, occurrence, arg, phase, n-th such record


@dataclass
class PairResult:
    """One aligned pair of snapshots and how it compared."""

    key: PairKey
    a: Snapshot | None
    b: Snapshot | None
    # equal | differ | mismatch | only-a | only-b | error | uncaptured (on either side)
    status: str = "pending"
    metrics: Metrics | None = None
    reason: str | None = None
    digests: tuple[str, str] | None = None     # A's and B's, when compared by digest

    @property
    def different(self) -> bool:
        return self.status in ("differ", "mismatch", "only-a", "only-b")

    @property
    def launch_snapshot(self) -> Snapshot:
        snap = self.a or self.b
        assert snap is not None
        return snap


def _keys(snapshots: list[Snapshot]) -> dict[PairKey, Snapshot]:
    """Alignment keys: (kernel, occurrence, arg, phase) and, when several processes launched
    the same kernel, the n-th record with that key in (pid, launch) order."""
    seen: Counter[tuple[str, int, int, str]] = Counter()
    keyed: dict[PairKey, Snapshot] = {}
    for snap in in_launch_order(snapshots):
        r = snap.record
        base = (r.kernel, r.occurrence, r.arg, r.phase)
        keyed[base + (seen[base],)] = snap
        seen[base] += 1
    return keyed


def align(a: Run, b: Run, kernel: str | KernelPattern | None = None) -> list[PairResult]:
    """Pairs in A's launch order, then snapshots only B has, in B's launch order."""
    pattern = kernel_pattern(kernel)

    def keep(s: Snapshot) -> bool:
        return pattern is None or pattern.matches(s.record.kernel, s.record.mangled)

    ka = _keys([s for s in a.snapshots if keep(s)])
    kb = _keys([s for s in b.snapshots if keep(s)])
    pairs = [PairResult(k, sa, kb.get(k)) for k, sa in ka.items()]
    pairs += [PairResult(k, None, sb) for k, sb in kb.items() if k not in ka]
    for pair in pairs:
        if pair.b is None:
            pair.status = "only-a"
        elif pair.a is None:
            pair.status = "only-b"
    return pairs


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def same_failure(a: Snapshot, b: Snapshot) -> bool:
    """Both runs failed to capture this snapshot, for the same reason (addresses aside)."""
    if a.captured or b.captured:
        return False
    reason_a, reason_b = (_ADDRESS.sub("0x…", s.record.reason or "") for s in (a, b))
    return reason_a == reason_b


def _geometry(snap: Snapshot) -> str | None:
    """dtype[shape] as a record states it, None when it does not."""
    r = snap.record
    return None if r.dtype is None or r.shape is None else f"{r.dtype}{list(r.shape)}"


def _digest_mismatch(a: Snapshot, da: Digest, b: Snapshot, db: Digest) -> str | None:
    """Why two digested buffers are not the same kind of data, or None."""
    ga, gb = _geometry(a), _geometry(b)
    if ga is not None and gb is not None and ga != gb:
        return f"{ga} vs {gb}"
    if da.bytes != db.bytes:
        return f"{da.bytes} vs {db.bytes} bytes"
    if da.row_bytes != db.row_bytes:
        return f"rows of {da.row_bytes} vs {db.row_bytes} bytes"
    return None


def _digest_of_file(snap: Snapshot, like: Digest) -> Digest:
    """The digest of a snapshot file's bytes, taken as `like` was (rows of its row_bytes)."""
    if like.algorithm != digests.ALGORITHM:
        raise DiffTrouble(f"cannot digest a file the way '{like.algorithm}' does (cudump "
                          f"computes {digests.ALGORITHM})")
    array = snap.load()
    size = int(array.nbytes)
    if size != like.bytes or (like.row_bytes and size % like.row_bytes):
        return Digest("", size, like.row_bytes, None, like.algorithm)
    value = digests.digest_hex(digests.digest(array, like.row_bytes or None))
    return Digest(value, size, like.row_bytes, size // like.row_bytes if like.row_bytes
                  else 0, like.algorithm)


def compare_digests(pair: PairResult) -> PairResult:
    """A pair of which one side or both hold a digest only: by digest, never loading a digest
    side (a file side is digested the way the other side's digest was taken)."""
    a, b = pair.a, pair.b
    assert a is not None and b is not None
    da = a.digest if a.digest_only else None
    db = b.digest if b.digest_only else None
    if da is None and db is None:
        raise DiffTrouble("neither side holds a digest")
    if da is None:
        assert db is not None
        da = _digest_of_file(a, db)
    elif db is None:
        db = _digest_of_file(b, da)
    if da.algorithm != db.algorithm:
        raise DiffTrouble(f"digests by different algorithms: {da.algorithm} vs {db.algorithm}")
    mismatch = _digest_mismatch(a, da, b, db)
    if mismatch is not None:
        pair.status, pair.reason = "mismatch", mismatch
        return pair
    pair.digests = (da.value, db.value)
    pair.status = "equal" if da.value == db.value else "differ"
    pair.reason = None if pair.status == "equal" else "digest differs"
    return pair


def compare_pair(pair: PairResult, tol: Tolerance) -> PairResult:
    """Fill in a pair's status and metrics; problems become status "error" with a reason."""
    if pair.a is None or pair.b is None:
        return pair
    if same_failure(pair.a, pair.b):
        pair.status = "uncaptured"
        pair.reason = f"not captured on either side: {pair.a.record.reason or 'no reason given'}"
        return pair
    try:
        if pair.a.digest_only or pair.b.digest_only:
            return compare_digests(pair)
        arr_a, arr_b = pair.a.load(), pair.b.load()
        if arr_a.shape != arr_b.shape or arr_a.dtype != arr_b.dtype:
            pair.status = "mismatch"
            pair.reason = (f"{arr_a.dtype}{list(arr_a.shape)} vs "
                           f"{arr_b.dtype}{list(arr_b.shape)}")
            return pair
        pair.metrics = compare_arrays(arr_a, arr_b, tol)
        pair.status = "equal" if pair.metrics.equal else "differ"
    except CudumpError as err:
        pair.status = "error"
        pair.reason = str(err)
    except (OSError, ValueError, MemoryError) as err:   # a file changed under us, no memory
        pair.status = "error"
        pair.reason = f"{type(err).__name__}: {err}"
    return pair


# Pairs holding at least this many bytes (both sides) are compared in worker processes.
PROCESS_MIN_BYTES = 64 << 20


def _snapshot_bytes(snap: Snapshot | None) -> int:
    r = snap.record if snap is not None else None
    if r is None or r.dtype is None or r.shape is None or snap is None or snap.digest_only:
        return 0
    try:
        return int(np.dtype(r.dtype).itemsize * math.prod(r.shape))
    except (TypeError, ValueError):
        return 0


def parallel_kind(pairs: Sequence[PairResult], jobs: int) -> str:
    """How compare_pairs spreads `pairs` over `jobs`: "serial", "threads" or "processes".

    numpy releases the GIL in its loops, but a pair takes a few hundred of them, and threads
    handing the GIL to each other that often mostly wait: on 2 cores, 2 threads compared
    1920x1080 RGBA pairs no faster than 1 (4.6 against 4.5-4.8 ms a pair), 2 processes in
    2.5 ms. Worker processes are forked (nothing to import again), when there is enough to
    compare to repay starting them (about 10 ms) and only from a process running one thread
    (forking copies no other)."""
    todo = [p for p in pairs if p.a is not None and p.b is not None]
    if jobs == 1 or len(todo) <= 1:
        return "serial"
    size = sum(_snapshot_bytes(p.a) + _snapshot_bytes(p.b) for p in todo)
    if (size >= PROCESS_MIN_BYTES and sys.platform == "linux"
            and threading.active_count() == 1):
        return "processes"
    return "threads"


def _worker_start() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is for the parent to handle


_Outcome = tuple[str, Metrics | None, str | None, tuple[str, str] | None]


def _compare_in_worker(pair: PairResult, tol: Tolerance) -> _Outcome:
    done = compare_pair(pair, tol)
    return done.status, done.metrics, done.reason, done.digests


def _in_processes(pairs: Sequence[PairResult], tol: Tolerance,
                  jobs: int) -> tuple[Executor, Iterator[PairResult]] | None:
    """Pairs compared in worker processes, or None if they cannot be started."""
    pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork"),
                               initializer=_worker_start)
    batch = max(1, min(8, len(pairs) // (8 * jobs)))
    try:
        results = pool.map(_compare_in_worker, pairs, [tol] * len(pairs), chunksize=batch)
    except OSError:                 # no fork: out of memory or of processes
        pool.shutdown(wait=True, cancel_futures=True)
        return None

    def filled() -> Iterator[PairResult]:
        for pair, result in zip(pairs, results, strict=True):
            pair.status, pair.metrics, pair.reason, pair.digests = result
            yield pair

    return pool, filled()


def compare_pairs(
    pairs: Sequence[PairResult], tol: Tolerance, jobs: int | None = None
) -> Iterator[PairResult]:
    """Compare pairs `jobs` at a time (default: one per CPU); results come back in the order
    given, as they are ready."""
    if jobs is not None and jobs < 1:
        raise DiffTrouble(f"jobs must be 1 or more, not {jobs}")
    jobs = jobs or os.cpu_count() or 1
    kind = parallel_kind(pairs, jobs)
    if kind == "serial":
        for pair in pairs:
            yield compare_pair(pair, tol)
        return
    started = _in_processes(pairs, tol, jobs) if kind == "processes" else None
    if started is None:
        threads = ThreadPoolExecutor(max_workers=jobs)
        started = threads, threads.map(lambda p: compare_pair(p, tol), pairs)
    pool, results = started
    try:
        yield from results
    except BrokenProcessPool as err:
        raise DiffTrouble(f"a worker process comparing pairs died ({err}); "
                          "-j 1 compares in this process") from None
    finally:
        # Not waiting for pairs nobody will see (Ctrl-C, a closed pipe).
        pool.shutdown(wait=True, cancel_futures=True)


DIVERGED = ("differ", "mismatch")
MATCHED = ("equal", "uncaptured")


@dataclass(frozen=True)
class DivergentLaunch:
    """The first launch (in A's launch order) with a pair whose buffers differ."""

    pair: PairResult          # its first such pair (before ahead of after, then by argument)
    matched: int              # launches before it whose every pair was equal
    process: int              # its process's place among A's processes, from 1
    processes: int            # A's processes

    @property
    def snapshot(self) -> Snapshot:
        return self.pair.launch_snapshot


def _launches(pairs: Sequence[PairResult]) -> list[list[PairResult]]:
    """A's launches in order, each as its pairs in order (pairs only B has are left out)."""
    by_launch: dict[tuple[int, int, int, int], list[PairResult]] = {}
    for pair in sorted((p for p in pairs if p.a is not None),
                       key=lambda p: p.launch_snapshot.sort_key()):
        by_launch.setdefault(pair.launch_snapshot.launch_key(), []).append(pair)
    return list(by_launch.values())


def first_divergent_launch(pairs: Sequence[PairResult]) -> DivergentLaunch | None:
    processes = max((p.a.process for p in pairs if p.a is not None), default=0)
    matched = 0
    for launch in _launches(pairs):
        differing = [p for p in launch if p.status in DIVERGED]
        if differing:
            return DivergentLaunch(differing[0], matched, differing[0].launch_snapshot.process,
                                   processes)
        if all(p.status in MATCHED for p in launch) and any(p.status == "equal"
                                                            for p in launch):
            matched += 1
    return None


@dataclass
class RunDiff:
    """The outcome of comparing two runs."""

    pairs: list[PairResult]

    @property
    def compared(self) -> list[PairResult]:
        return [p for p in self.pairs if p.a is not None and p.b is not None]

    @property
    def only_a(self) -> list[PairResult]:
        return [p for p in self.pairs if p.status == "only-a"]

    @property
    def only_b(self) -> list[PairResult]:
        return [p for p in self.pairs if p.status == "only-b"]

    @property
    def errors(self) -> list[PairResult]:
        return [p for p in self.pairs if p.status == "error"]

    @property
    def uncaptured(self) -> list[PairResult]:
        """Pairs that neither run captured, for the same reason: not a difference."""
        return [p for p in self.pairs if p.status == "uncaptured"]

    @property
    def first_divergent(self) -> PairResult | None:
        """The earliest pair (in A's launch order) whose buffers differ."""
        launch = self.first_divergent_launch
        return launch.pair if launch is not None else None

    @property
    def first_divergent_launch(self) -> DivergentLaunch | None:
        """The first launch with a pair whose buffers differ, and how many matched before."""
        return first_divergent_launch(self.pairs)

    @property
    def exit_code(self) -> int:
        """0 equal within tolerance, 1 different, 2 some pair could not be compared."""
        if self.errors:
            return 2
        return 1 if any(p.different for p in self.pairs) else 0


def diff_runs(
    a: Run,
    b: Run,
    tol: Tolerance | None = None,
    *,
    kernel: str | KernelPattern | None = None,
    jobs: int | None = None,
    on_result: Callable[[PairResult], None] | None = None,
) -> RunDiff:
    """Align two runs and compare every pair; `on_result` sees each pair as it completes."""
    tol = tol or Tolerance()
    pairs = align(a, b, kernel)
    for pair in compare_pairs(pairs, tol, jobs):
        if on_result is not None:
            on_result(pair)
    return RunDiff(pairs)
