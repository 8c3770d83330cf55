"""Pieces of the HTML report: its style sheet, a pair's metrics rows, the panels of a phase
and how its arrays are drawn."""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from cudump.analysis.diff.align import PairResult
from cudump.analysis.report.formats import fmt_count, fmt_num, fmt_psnr, fmt_share, fmt_where
from cudump.analysis.report.text import STATUS_TEXT
from cudump.analysis.spots import Spots
from cudump.errors import CudumpError
from cudump.rundir.imaging import Rendered, as_image_array, render, render_pair

CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; background: #f4f5f7; color: #1d2430; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 0 0 10px; font-family: ui-monospace, monospace; }
.meta { color: #555; margin-bottom: 18px; font-size: 14px; }
.summary { border-collapse: collapse; font-size: 13px; margin-bottom: 24px; background: #fff; }
.summary td, .summary th { padding: 4px 10px; border-bottom: 1px solid #dde; text-align: left; }
.summary td.n { text-align: right; font-variant-numeric: tabular-nums; }
.launch { background: #fff; border: 1px solid #d5d9e0; border-radius: 8px; padding: 14px 16px;
          margin-bottom: 22px; }
.first { border: 2px solid #d03030; }
.badge { background: #d03030; color: #fff; border-radius: 4px; padding: 1px 6px; font-size: 12px;
         margin-left: 8px; font-family: system-ui, sans-serif; }
.phase { display: grid; grid-template-columns: 1fr 1fr 1fr 260px; gap: 12px;
         align-items: start; margin-top: 10px; }
figure { margin: 0; }
figure img { width: 100%; image-rendering: pixelated; background: #222; display: block;
             border: 1px solid #bbb; }
figure img.alpha { background: repeating-conic-gradient(#bbb 0 25%, #eee 0 50%) 0 0 / 16px 16px; }
figure.plot { grid-column: span 3; }
svg.plot { display: block; background: #fafafa; border: 1px solid #bbb; }
.elements-head { font-size: 12px; color: #444; margin-top: 8px; }
.elements { font-size: 12px; font-family: ui-monospace, monospace; border-collapse: collapse; }
.elements th, .elements td { padding: 1px 8px; text-align: right; }
figcaption { font-size: 12px; color: #444; margin-bottom: 4px; }
.metrics { font-size: 12px; font-family: ui-monospace, monospace; border-collapse: collapse; }
.metrics td { padding: 1px 6px; vertical-align: top; }
.metrics td:first-child { color: #666; width: 84px; }
.same { color: #2a7a2a; } .diff { color: #c02020; font-weight: 600; }
.none { font-size: 12px; color: #888; padding: 20px 0; }
ul.side { font-family: ui-monospace, monospace; font-size: 13px; }
.note { margin: -12px 0 18px; font-size: 14px; font-family: ui-monospace, monospace; }
"""


def metrics_rows(pair: PairResult | None) -> list[tuple[str, str]]:
    if pair is None:
        return [("status", "not captured")]
    status = STATUS_TEXT.get(pair.status, pair.status)
    rows = [("status", status)]
    m = pair.metrics
    if m is None:
        if pair.digests is not None:
            rows += [("digest A", pair.digests[0]), ("digest B", pair.digests[1])]
            if pair.status == "differ":
                rows.append(("compared", "by digest: the bytes differ"))
        elif pair.reason:
            rows.append(("reason", pair.reason))
        return rows
    rows += [
        ("data", f"{m.dtype} {'x'.join(str(n) for n in m.shape)}"),
        ("differing", f"{fmt_count(m.differing)} ({fmt_share(m.share)})"),
    ]
    if m.channel_differing is not None:
        rows.append(("per channel", " / ".join(fmt_count(c) for c in m.channel_differing)))
        rows.append(("pixels", fmt_count(m.pixels_differing or 0)))
    if m.nonfinite_mismatch:
        rows.append(("NaN/Inf", fmt_count(m.nonfinite_mismatch)))
    rows += [
        ("largest", f"{fmt_num(m.max_abs)} at {fmt_where(m.max_index)}"),
        ("mean |A-B|", fmt_num(m.mean_abs)),
        ("RMSE", fmt_num(m.rmse)),
        ("PSNR", f"{fmt_psnr(m.psnr)} dB" if m.psnr is not None else "-"),
    ]
    return rows


@dataclass
class Figure:
    caption: str
    file: str | None      # relative to the report directory
    missing: str = "no image"   # what is shown instead when there is no file


@dataclass
class Plot:
    """A 1-D pair: both sides as lines (an <svg>), and where they differ."""

    caption: str
    svg: str
    spots: Spots | None


@dataclass
class Phase:
    phase: str
    pair: PairResult | None
    figures: list[Figure]
    plot: Plot | None = None


def _colours_only(array: np.ndarray, alpha: bool) -> tuple[int, ...] | None:
    """The channels to draw: RGBA data shows its colour channels, opaque, unless the alpha
    channel is asked for (then transparent pixels show the page's checkerboard)."""
    if alpha:
        return None
    arr, _, _ = as_image_array(array)
    return (0, 1, 2) if arr.shape[2] == 4 else None


def _drawable(array: np.ndarray | None, alpha: bool = False) -> Rendered | None:
    if array is None:
        return None
    try:
        return render(array, channels=_colours_only(array, alpha))
    except (CudumpError, ValueError, MemoryError):   # empty, too many channels, too large
        return None


def drawings(a: np.ndarray | None, b: np.ndarray | None, alpha: bool = False
              ) -> tuple[Rendered | None, Rendered | None, Rendered | None]:
    """A, B and their heatmap as images, each None where it cannot be drawn."""
    if a is not None and b is not None and a.shape == b.shape and a.dtype == b.dtype:
        try:
            return render_pair(a, b, alpha=alpha)
        except (CudumpError, ValueError, MemoryError):
            pass
    return _drawable(a, alpha), _drawable(b, alpha), None


def esc(value: object) -> str:
    """Text (from a manifest, a path, a number) for HTML content or a quoted attribute."""
    return html.escape(str(value), quote=True)

