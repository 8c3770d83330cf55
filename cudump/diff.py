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

Work is done in chunks of about a million elements so temporaries stay in cache; a chunk
whose bytes are identical costs one comparison. Pairs of a run are compared on a thread pool:
numpy releases the GIL in all the loops used here.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from cudump.errors import CudumpError, DiffTrouble
from cudump.pattern import KernelPattern
from cudump.runs import Run, Snapshot, in_launch_order, kernel_pattern

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


@dataclass
class _Totals:
    """Running sums over the chunks of one comparison."""

    channels: int
    differing: int = 0
    per_channel: list[int] = field(default_factory=list)
    pixels: int = 0
    sum_abs: float = 0.0
    sum_sq: float = 0.0
    invalid: int = 0            # elements whose |a - b| is not finite
    nonfinite_mismatch: int = 0
    max_abs: float = 0.0
    max_flat: int | None = None

    def __post_init__(self) -> None:
        self.per_channel = [0] * self.channels


def _abs_difference(ac: np.ndarray, bc: np.ndarray) -> np.ndarray:
    kind, size = ac.dtype.kind, ac.dtype.itemsize
    if ac.dtype == np.uint8:
        d = np.maximum(ac, bc)
        d -= np.minimum(ac, bc)          # never wraps: max >= min
        return d
    if kind in "ui" and size <= 2:
        d = ac.astype(np.int32)
        d -= bc
        np.abs(d, out=d)
        return d
    d = ac.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d -= bc
    np.abs(d, out=d)
    return d


def _chunk(ac: np.ndarray, bc: np.ndarray, start: int, tol: Tolerance, t: _Totals) -> None:
    d = _abs_difference(ac, bc)
    top = d.max()
    bad: np.ndarray | None = None
    mismatch: np.ndarray | None = None
    if d.dtype.kind == "f" and not math.isfinite(top):
        bad = ~np.isfinite(d)
        fa, fb = ac[bad].astype(np.float64), bc[bad].astype(np.float64)
        same = (np.isnan(fa) & np.isnan(fb)) | (fa == fb)
        mismatch = np.zeros(d.shape, dtype=bool)
        mismatch[np.flatnonzero(bad)[~same]] = True
        t.invalid += int(bad.sum())
        t.nonfinite_mismatch += int((~same).sum())
        d[bad] = 0.0
        top = d.max()
    if top == 0 and mismatch is None:
        return
    if tol.rtol == 0:
        if d.dtype.kind == "f":
            mask = d > tol.atol
        else:
            # Integer differences: d > atol  <=>  d > floor(atol), compared in d's own type.
            limit = math.floor(min(tol.atol, 2.0**62))
            mask = d > limit if limit < np.iinfo(d.dtype).max else np.zeros(d.shape, bool)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            allowed = np.abs(bc.astype(np.float64))
            allowed *= tol.rtol
            allowed += tol.atol
        mask = d > allowed
    if mismatch is not None:
        mask |= mismatch
    count = int(np.count_nonzero(mask))
    t.differing += count
    if count and t.channels > 1:
        c = t.channels
        for ch in range(c):
            t.per_channel[ch] += int(np.count_nonzero(mask[ch::c]))
        if c in (2, 4):   # one flag byte per channel: a pixel differs if its word is non-zero
            t.pixels += int(np.count_nonzero(mask.view(np.uint16 if c == 2 else np.uint32)))
        else:
            t.pixels += int(np.count_nonzero(mask[0::3] | mask[1::3] | mask[2::3]))
    elif count:
        t.per_channel[0] += count
    if d.dtype == np.uint8:
        t.sum_abs += int(d.sum(dtype=np.uint64))
        t.sum_sq += int(np.square(d, dtype=np.uint16).sum(dtype=np.uint64))
    elif d.dtype == np.int32:
        t.sum_abs += int(d.sum(dtype=np.int64))
        t.sum_sq += int(np.square(d, dtype=np.int64).sum())
    else:
        t.sum_abs += float(d.sum())
        t.sum_sq += float(np.dot(d, d))
    if top > t.max_abs:
        t.max_abs = float(top)
        t.max_flat = start + int(np.argmax(d))


def _bytes_equal(ac: np.ndarray, bc: np.ndarray) -> bool:
    wide = np.uint64 if ac.nbytes % 8 == 0 else np.uint8
    return bool(np.array_equal(ac.view(wide), bc.view(wide)))


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
    # Whole pixels and whole 8-byte words per chunk, so channel strides and word views line up.
    step = max(CHUNK_ELEMENTS // (8 * channels), 1) * 8 * channels
    for start in range(0, fa.size, step):
        ac, bc = fa[start:start + step], fb[start:start + step]
        if not _bytes_equal(ac, bc):
            _chunk(ac, bc, start, tol, totals)
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
            from cudump.imaging import finite_range

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
        channel_differing=list(t.per_channel) if multi else None,
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


def compare_pair(pair: PairResult, tol: Tolerance) -> PairResult:
    """Fill in a pair's status and metrics; problems become status "error" with a reason."""
    if pair.a is None or pair.b is None:
        return pair
    if same_failure(pair.a, pair.b):
        pair.status = "uncaptured"
        pair.reason = f"not captured on either side: {pair.a.record.reason or 'no reason given'}"
        return pair
    try:
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


def compare_pairs(
    pairs: Sequence[PairResult], tol: Tolerance, jobs: int | None = None
) -> Iterator[PairResult]:
    """Compare pairs on a thread pool; results come back in the order given."""
    if jobs is not None and jobs < 1:
        raise DiffTrouble(f"jobs must be 1 or more, not {jobs}")
    jobs = jobs or os.cpu_count() or 1
    todo = [p for p in pairs if p.a is not None and p.b is not None]
    if jobs == 1 or len(todo) <= 1:
        for pair in pairs:
            yield compare_pair(pair, tol)
        return
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        yield from pool.map(lambda p: compare_pair(p, tol), pairs)


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
        for pair in self.compared:
            if pair.status in ("differ", "mismatch"):
                return pair
        return None

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
