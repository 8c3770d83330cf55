"""Comparing two arrays: compare_arrays walks them chunk by chunk and gives their Metrics."""

from __future__ import annotations

import math

import numpy as np

from cudump.analysis.diff.chunks import (
    Totals,
    bytes_equal,
    float_chunk,
    scratch_buffer,
    small_int_chunk,
)
from cudump.analysis.diff.metrics import Metrics, Tolerance, channel_count, check_comparable
from cudump.errors import DiffTrouble

CHUNK_ELEMENTS = 1 << 20


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
    totals = Totals(channels)
    # Unless most of the last chunk differed, the next stretch (a probe) is first checked for
    # identical bytes, one cheap pass, and skipped if so; a chunk is compared from where a
    # probe found a difference, and after a chunk mostly different the next one is compared
    # right away (such differences go on). Floats: a probe is a whole chunk, so chunks start
    # at fixed places and float sums do not depend on where the differences are.
    step = _step(channels, CHUNK_ELEMENTS)
    if fa.dtype.kind in "ui" and fa.dtype.itemsize <= 2:
        chunk, probe = small_int_chunk, _step(channels, CHUNK_ELEMENTS // 4)
    else:
        chunk, probe = float_chunk, step
    check = True
    skipped: list[np.ndarray] = []
    pos, n = 0, fa.size
    while pos < n:
        if check:
            end = min(pos + probe, n)
            if bytes_equal(fa[pos:end], fb[pos:end]):
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
            finite = np.isfinite(same, out=scratch_buffer("finite", same.size, bool))
            totals.invalid += same.size - int(np.count_nonzero(finite))
    return _metrics(a, b, totals)


def _metrics(a: np.ndarray, b: np.ndarray, t: Totals) -> Metrics:
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
