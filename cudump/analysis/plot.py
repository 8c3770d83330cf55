"""1-D buffers as line plots: inline SVG for the HTML report (no plotting library).

A buffer of N elements drawn as an image is one row of N pixels, which a page shows as a
hairline. Here A and B are drawn as two lines over the element index (A a wide pale band,
B a narrow line on it, so that both show where they agree), with the elements that differ
marked under them and |A - B| in a panel of its own.

Bounded whatever N is: a line has at most MAX_POINTS points. Longer data is cut into
MAX_POINTS / 2 buckets of consecutive elements and each bucket gives its smallest and its
largest finite element, in index order, so a single spike stays visible. NaN and Inf break
a line and are marked in magenta above the plot; elements that differ (as
cudump.analysis.diff counts them) are marked in red under it (at most one mark per pixel
column of the plot).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cudump.analysis.diff.metrics import Tolerance

MAX_POINTS = 2000
WIDTH = 960                     # the SVG's own coordinates; the page scales it
LEFT, RIGHT = 64, 8             # room for the value labels
MAIN_TOP, MAIN_HEIGHT = 22, 190
DIFF_TOP, DIFF_HEIGHT = 246, 80
HEIGHT = DIFF_TOP + DIFF_HEIGHT + 20
COLOUR_A, COLOUR_B, COLOUR_DIFF = "#1f6fd0", "#e07000", "#c02020"
COLOUR_NONFINITE = "#ff00ff"


def plottable(array: np.ndarray | None) -> bool:
    """One-dimensional numeric data (what a line plot shows better than an image)."""
    return (array is not None and array.ndim == 1 and array.size > 0
            and array.dtype.kind in "uifb")


def decimate(values: np.ndarray, limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(indexes, values) of at most `limit` points that keep the data's extremes: every
    element when there are few enough, else per bucket its finite minimum and maximum."""
    n = values.size
    if n <= limit:
        return np.arange(n), values
    buckets = max(1, limit // 2)
    width = -(-n // buckets)
    buckets = -(-n // width)
    padded = np.full(buckets * width, np.nan)
    padded[:n] = values
    rows = padded.reshape(buckets, width)
    finite = np.isfinite(rows)
    low = np.where(finite, rows, np.inf).argmin(axis=1)
    high = np.where(finite, rows, -np.inf).argmax(axis=1)
    base = np.arange(buckets) * width
    picked = np.unique(np.concatenate([low + base, high + base]))
    picked = picked[picked < n]
    return picked, values[picked]


def marked(mask: np.ndarray, columns: int) -> np.ndarray:
    """Indexes of true elements, at most one per `columns`-th of the buffer: where there
    are more elements than columns, the middle of each stretch that holds any."""
    n = mask.size
    if n <= columns:
        return np.flatnonzero(mask)
    width = -(-n // columns)
    padded = np.zeros(width * (-(-n // width)), dtype=bool)
    padded[:n] = mask
    stretches = np.flatnonzero(padded.reshape(-1, width).any(axis=1))
    return np.minimum(stretches * width + width // 2, n - 1)


@dataclass(frozen=True)
class _Scale:
    """Element index and value to SVG coordinates inside one panel."""

    count: int
    low: float
    high: float
    top: float
    height: float

    def x(self, index: np.ndarray) -> np.ndarray:
        span = max(self.count - 1, 1)
        return LEFT + index * ((WIDTH - LEFT - RIGHT) / span)

    def y(self, value: np.ndarray) -> np.ndarray:
        span = self.high - self.low
        return self.top + self.height - (value - self.low) * (self.height / span)


def _value_range(*arrays: np.ndarray) -> tuple[float, float]:
    finite = [a[np.isfinite(a)] for a in arrays]
    finite = [f for f in finite if f.size]
    if not finite:
        return 0.0, 1.0
    low = min(float(f.min()) for f in finite)
    high = max(float(f.max()) for f in finite)
    if high == low:
        return low - 1.0, high + 1.0
    return low, high


def _polyline(values: np.ndarray, scale: _Scale, colour: str, label: str,
              width: float = 1.2, opacity: float = 1.0) -> str:
    """The line of one series, broken where the data is NaN or Inf."""
    index, picked = decimate(values)
    good = np.isfinite(picked)
    xs, ys = scale.x(index.astype(np.float64)), scale.y(np.where(good, picked, scale.low))
    parts = []
    runs = np.split(np.arange(index.size), np.flatnonzero(np.diff(good.astype(np.int8))) + 1)
    for run in runs:
        if not run.size or not good[run[0]]:
            continue
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs[run], ys[run], strict=True))
        if run.size == 1:                      # a lone point: a dot, not an empty line
            parts.append(f'<circle cx="{xs[run[0]]:.1f}" cy="{ys[run[0]]:.1f}" '
                         f'r="{width + 0.5:.1f}" fill="{colour}"/>')
        else:
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                         f'stroke-width="{width}" stroke-opacity="{opacity}" '
                         'stroke-linejoin="round"/>')
    return f'<g class="series" data-series="{label}">' + "".join(parts) + "</g>"


def _ticks(indexes: np.ndarray, scale: _Scale, y: float, length: float, colour: str,
           cls: str) -> str:
    """Short vertical marks at these elements."""
    if not indexes.size:
        return ""
    xs = scale.x(indexes.astype(np.float64))
    path = "".join(f"M{x:.1f} {y:.1f}v{length:.0f}" for x in xs)
    return f'<path class="{cls}" d="{path}" stroke="{colour}" stroke-width="1"/>'


def _frame(top: float, height: float, low: float, high: float) -> str:
    return (f'<rect x="{LEFT}" y="{top}" width="{WIDTH - LEFT - RIGHT}" height="{height}" '
            f'fill="#fff" stroke="#bbb"/>'
            f'<text x="{LEFT - 4}" y="{top + 10}" text-anchor="end">{_label(high)}</text>'
            f'<text x="{LEFT - 4}" y="{top + height}" text-anchor="end">{_label(low)}</text>')


def _label(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:.4g}"


def line_plot(a: np.ndarray | None, b: np.ndarray | None,
              tol: Tolerance | None = None) -> str:
    """An <svg> of A and B over the element index (either may be missing); with both of
    one length, the elements that differ marked and |A - B| below."""
    tol = tol or Tolerance()
    sides = [(np.asarray(x, dtype=np.float64) if x is not None else None) for x in (a, b)]
    present = [s for s in sides if s is not None]
    if not present:
        raise ValueError("nothing to plot")
    count = max(s.size for s in present)
    low, high = _value_range(*present)
    main = _Scale(count, low, high, MAIN_TOP, MAIN_HEIGHT)
    columns = int(WIDTH - LEFT - RIGHT)
    body = [_frame(MAIN_TOP, MAIN_HEIGHT, low, high)]
    # A as a wide pale band under B's narrow line: where they agree both still show.
    for values, colour, label, width, opacity in ((sides[0], COLOUR_A, "A", 5.0, 0.45),
                                                  (sides[1], COLOUR_B, "B", 1.5, 1.0)):
        if values is not None:
            body.append(_polyline(values, main, colour, label, width, opacity))
            bad = ~np.isfinite(values)
            if bad.any():
                body.append(_ticks(marked(bad, columns), main, MAIN_TOP - 8, 6,
                                   COLOUR_NONFINITE, "nonfinite"))
    fa, fb = sides
    height = MAIN_TOP + MAIN_HEIGHT + 30
    if fa is not None and fb is not None and fa.shape == fb.shape:
        with np.errstate(invalid="ignore", over="ignore"):
            differ = ~np.isclose(fa, fb, atol=tol.atol, rtol=tol.rtol, equal_nan=True)
            gap = np.abs(fa - fb)
        gap[~differ] = 0.0
        body.append(_ticks(marked(differ, columns), main, MAIN_TOP + MAIN_HEIGHT + 3, 8,
                           COLOUR_DIFF, "differ"))
        finite_gap = gap[np.isfinite(gap)]
        top = float(finite_gap.max()) if finite_gap.size else 0.0
        diff_scale = _Scale(count, 0.0, top if top > 0 else 1.0, DIFF_TOP, DIFF_HEIGHT)
        body.append(_frame(DIFF_TOP, DIFF_HEIGHT, 0.0, diff_scale.high))
        body.append(_polyline(gap, diff_scale, COLOUR_DIFF, "|A-B|"))
        body.append(f'<text x="{LEFT + 4}" y="{DIFF_TOP - 4}" fill="{COLOUR_DIFF}">'
                    "|A − B|</text>")
        height = HEIGHT
    legend = (f'<text x="{LEFT + 4}" y="14" fill="{COLOUR_A}">A</text>'
              f'<text x="{LEFT + 24}" y="14" fill="{COLOUR_B}">B</text>'
              f'<text x="{LEFT + 44}" y="14" fill="#555">element 0 … {count - 1:,}'
              f"{' (every element)' if count <= MAX_POINTS else ', min and max per bucket'}"
              "</text>")
    return (f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} '
            f'{height}" width="100%" font-family="ui-monospace, monospace" font-size="11" '
            f'role="img">{legend}{"".join(body)}</svg>')
