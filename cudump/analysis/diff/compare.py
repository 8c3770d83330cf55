"""One aligned pair compared: by digest, as arrays, or as not captured on either side."""

from __future__ import annotations

import re

import numpy as np

from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.arrays import compare_arrays
from cudump.analysis.diff.by_digest import compare_digests
from cudump.analysis.diff.metrics import Tolerance
from cudump.errors import CudumpError
from cudump.rundir.runs import Snapshot

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def same_failure(a: Snapshot, b: Snapshot) -> bool:
    """Both runs failed to capture this snapshot, for the same reason (addresses aside)."""
    if a.captured or b.captured:
        return False
    reason_a, reason_b = (_ADDRESS.sub("0x…", s.record.reason or "") for s in (a, b))
    return reason_a == reason_b


def _viewed(array: np.ndarray, view: str | None) -> np.ndarray:
    """One-byte elements as `view` (a float type another launch gave the same memory), where
    they make whole elements of it."""
    if view is None or array.dtype.itemsize != 1 or array.nbytes % np.dtype(view).itemsize:
        return array
    return np.ascontiguousarray(array).reshape(-1).view(view)


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
            return compare_digests(pair, tol)
        arr_a, arr_b = (_viewed(s.load(), pair.view_as) for s in (pair.a, pair.b))
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
