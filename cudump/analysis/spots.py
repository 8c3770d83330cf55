"""Where two arrays differ: the first few differing elements and the box holding them all.

Shown under a differing buffer by `cudump bisect` and in the HTML report of `cudump diff`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cudump.analysis.diff.metrics import Tolerance

SHOWN_ELEMENTS = 10          # differing elements listed per buffer


@dataclass(frozen=True)
class Spots:
    """Where two arrays differ: the first few elements and the box holding all of them."""

    count: int
    first: list[tuple[tuple[int, ...], float, float]]
    box: list[tuple[int, int]]          # per axis: [start, stop)

    def lines(self) -> list[str]:
        if not self.count:
            return []
        shown = "; ".join(f"({','.join(map(str, i))}) A={_num(a)} B={_num(b)}"
                          for i, a, b in self.first)
        more = f" (first {len(self.first)} of {self.count:,})" if self.count > len(self.first) \
            else ""
        box = ", ".join(f"{lo}:{hi}" for lo, hi in self.box)
        return [f"elements that differ: {shown}{more}", f"all of them within [{box}]"]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:.6g}"


def difference_spots(a: np.ndarray, b: np.ndarray, tol: Tolerance,
                     limit: int = SHOWN_ELEMENTS) -> Spots:
    """The elements of B that differ from A as cudump.analysis.diff counts them.

    Never more than a mask of the arrays' size: the first few are looked for chunk by
    chunk and the box axis by axis (a buffer of a billion differing elements has no list
    of their indexes made)."""
    fa, fb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        differ = ~np.isclose(fa, fb, atol=tol.atol, rtol=tol.rtol, equal_nan=True)
    count = int(np.count_nonzero(differ))
    if not count:
        return Spots(0, [], [])
    flat = differ.reshape(-1)
    found: list[int] = []
    step = max(4096, limit)
    for start in range(0, flat.size, step):
        found += (np.flatnonzero(flat[start:start + step]) + start).tolist()[:limit - len(found)]
        if len(found) >= limit:
            break
    first = []
    for at in found:
        index = tuple(int(i) for i in np.unravel_index(at, differ.shape))
        first.append((index, float(fa[index]), float(fb[index])))
    box = []
    for axis in range(differ.ndim):
        others = tuple(k for k in range(differ.ndim) if k != axis)
        along = np.flatnonzero(differ.any(axis=others) if others else differ)
        box.append((int(along[0]), int(along[-1]) + 1))
    return Spots(count, first, box)
