"""How comparisons and snapshot lists are shown: terminal text and the static HTML report."""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.metrics import Metrics, Tolerance
from cudump.analysis.diff.runs import DivergentLaunch, RunDiff
from cudump.analysis.plot import line_plot, plottable
from cudump.analysis.spots import Spots, difference_spots
from cudump.console import printable
from cudump.errors import CudumpError
from cudump.rundir.imaging import Rendered, as_image_array, render, render_pair, save_png
from cudump.rundir.runs import Snapshot, short_kernel_name

# ---------------------------------------------------------------------------------------
# Numbers


def fmt_count(n: int) -> str:
    return f"{n:,}"


def _ratio(part: int, whole: int) -> float:
    """part / whole, 0 for an empty whole (an empty array has nothing that differs)."""
    return part / whole if whole else 0.0


def fmt_share(share: float) -> str:
    if share == 0:
        return "0%"
    if share == 1:
        return "100%"
    return f"{share * 100:.3g}%"


def fmt_num(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if math.isnan(x):
        return "nan"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}"


def fmt_psnr(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else f"{x:.2f}"


def fmt_where(index: tuple[int, ...] | None) -> str:
    return "-" if index is None else "(" + ",".join(str(i) for i in index) + ")"


def fmt_tol(tol: Tolerance) -> str:
    return f"atol {fmt_num(tol.atol)}, rtol {fmt_num(tol.rtol)}"


# ---------------------------------------------------------------------------------------
# Tables


@dataclass
class Column:
    header: str
    width: int
    right: bool = False     # numbers are right-aligned

    def cell(self, text: str) -> str:
        return text.rjust(self.width) if self.right else text.ljust(self.width)


def fit(text: str, width: int) -> str:
    """Shorten long text from the middle so both ends (namespace, template args) stay."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2:]


def render_line(columns: Sequence[Column], values: Sequence[str]) -> str:
    return "  ".join(c.cell(v) for c, v in zip(columns, values, strict=True)).rstrip()


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                 right: Sequence[bool]) -> list[str]:
    """Aligned columns sized to their contents (control characters escaped first)."""
    rows = [[printable(cell) for cell in row] for row in rows]
    columns = [
        Column(h, max([len(h)] + [len(r[i]) for r in rows]), right[i])
        for i, h in enumerate(headers)
    ]
    return [render_line(columns, headers)] + [render_line(columns, r) for r in rows]


# ---------------------------------------------------------------------------------------
# cudump diff FILE FILE


def file_report(path_a: str, path_b: str, m: Metrics, tol: Tolerance) -> list[str]:
    lines = [
        f"A: {path_a}",
        f"B: {path_b}",
        f"data: {m.dtype} {list(m.shape)}, {fmt_count(m.elements)} elements",
        f"differing elements: {fmt_count(m.differing)} of {fmt_count(m.elements)} "
        f"({fmt_share(m.share)})  [{fmt_tol(tol)}]",
    ]
    if m.channel_differing is not None:
        names = "rgba" if m.channels <= 4 else ""
        pixels = m.elements // m.channels
        for ch, count in enumerate(m.channel_differing):
            label = f"{ch} ({names[ch]})" if names else str(ch)
            lines.append(f"  channel {label}: {fmt_count(count)} "
                         f"({fmt_share(_ratio(count, pixels))})")
        assert m.pixels_differing is not None
        lines.append(f"differing pixels: {fmt_count(m.pixels_differing)} of "
                     f"{fmt_count(pixels)} ({fmt_share(_ratio(m.pixels_differing, pixels))})")
    if m.nonfinite_mismatch:
        lines.append(f"NaN/Inf disagreeing: {fmt_count(m.nonfinite_mismatch)} elements")
    if m.max_index is None:
        lines.append("largest difference: 0")
    else:
        lines.append(f"largest difference: {fmt_num(m.max_abs)} at {fmt_where(m.max_index)} "
                     f"(A={fmt_num(m.a_at_max)}, B={fmt_num(m.b_at_max)})")
    lines.append(f"mean absolute difference: {fmt_num(m.mean_abs)}")
    lines.append(f"RMSE: {fmt_num(m.rmse)}")
    peak = f" (peak {fmt_num(m.peak)})" if m.peak is not None else ""
    psnr = fmt_psnr(m.psnr)
    lines.append(f"PSNR: {psnr} dB{peak}" if psnr not in ("inf", "-") else f"PSNR: {psnr}")
    lines.append("equal within tolerance" if m.equal else "different")
    return lines


# ---------------------------------------------------------------------------------------
# cudump diff RUN RUN

STATUS_TEXT = {
    "equal": "same",
    "differ": "DIFF",
    "mismatch": "SHAPE",
    "error": "ERROR",
    "only-a": "only A",
    "only-b": "only B",
    "uncaptured": "none",
}


class PairTable:
    """One line per pair, aligned before any result is known so lines can stream."""

    def __init__(self, pairs: Sequence[PairResult], kernel_width: int = 48) -> None:
        names = [short_kernel_name(p.launch_snapshot.record.kernel) for p in pairs]
        launches = [str(p.launch_snapshot.record.launch) for p in pairs]
        width = min(max([6] + [len(n) for n in names]), kernel_width)
        self.columns = [
            Column("launch", max([6] + [len(x) for x in launches]), True),
            Column("kernel", width),
            Column("occ", 3, True),
            Column("arg", 3, True),
            Column("phase", 6),
            Column("status", 6),
            Column("differing", 11, True),
            Column("share", 8, True),
            Column("max", 9, True),
            Column("at", 16),
            Column("mean", 9, True),
            Column("rmse", 9, True),
            Column("psnr", 7, True),
        ]

    def header(self) -> str:
        return render_line(self.columns, [c.header for c in self.columns])

    def line(self, pair: PairResult) -> str:
        r = pair.launch_snapshot.record
        head = [str(r.launch), fit(short_kernel_name(r.kernel), self.columns[1].width),
                str(r.occurrence), str(r.arg), r.phase, STATUS_TEXT.get(pair.status, pair.status)]
        m = pair.metrics
        if m is not None:
            tail = [fmt_count(m.differing), fmt_share(m.share), fmt_num(m.max_abs),
                    fmt_where(m.max_index), fmt_num(m.mean_abs), fmt_num(m.rmse),
                    fmt_psnr(m.psnr)]
            return render_line(self.columns, head + tail)
        # No metrics: the reason takes the place of the numbers.
        text = render_line(self.columns[:6], head)
        reason = digest_text(pair) or pair.reason or ""
        if pair.status == "only-a":
            reason = "no such snapshot in B"
        elif pair.status == "only-b":
            reason = "no such snapshot in A"
        return f"{text.ljust(sum(c.width + 2 for c in self.columns[:6]))}{reason}"


def digest_text(pair: PairResult) -> str | None:
    """How a pair compared by digest, in a few words; None when it was not."""
    if pair.digests is None:
        return None
    a, b = pair.digests
    return f"digest {a}" if a == b else f"digest differs: A {a}, B {b}"


def describe_pair(pair: PairResult) -> str:
    r = pair.launch_snapshot.record
    return (f"launch {r.launch} {short_kernel_name(r.kernel)} occurrence {r.occurrence} "
            f"arg {r.arg} {r.phase}")


def _graph_place(snap: Snapshot) -> str:
    extra = snap.record.extra
    if snap.node < 0:
        return ""
    return f" (graph {extra.get('graph', '?')} replay {extra.get('replay', '?')} node {snap.node})"


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def divergent_line(first: DivergentLaunch) -> str:
    """The first divergent launch in one line: `first divergent: launch 17 of void
    k(float*, int) (occurrence 3, process 2 of 2), arg 0 after; 16 launches matched before
    it`."""
    snap = first.snapshot
    r = snap.record
    where = f"occurrence {r.occurrence}"
    if first.processes > 1:
        where += f", process {first.process} of {first.processes} (pid {r.pid})"
    matched = plural(first.matched, "launch", "launches")
    return (f"first divergent: launch {r.launch}{_graph_place(snap)} of {r.kernel} ({where}), "
            f"arg {r.arg} {r.phase}; {matched} matched before it")


def pair_detail(pair: PairResult) -> str | None:
    """How a differing pair differs, in one line; None when there is nothing to add."""
    if pair.metrics is not None:
        m = pair.metrics
        return (f"{fmt_count(m.differing)} elements ({fmt_share(m.share)}) differ, "
                f"largest {fmt_num(m.max_abs)} at {fmt_where(m.max_index)}")
    return digest_text(pair) or pair.reason


def run_summary(result: RunDiff) -> list[str]:
    lines: list[str] = []
    first = result.first_divergent_launch
    if first is not None:
        lines.append(divergent_line(first))
        detail = pair_detail(first.pair)
        if detail:
            lines.append(f"  {detail}")
    for title, group in (("only in A", result.only_a), ("only in B", result.only_b),
                         ("not captured on either side", result.uncaptured)):
        if group:
            lines.append(f"{title} ({len(group)}):")
            lines += [f"  {describe_pair(p)}" for p in group]
    uncaptured = len(result.uncaptured)
    compared = len(result.compared) - uncaptured
    differ = sum(1 for p in result.compared if p.status in ("differ", "mismatch"))
    neither = f", {uncaptured} not captured on either side" if uncaptured else ""
    lines.append(
        f"{compared} pairs compared, {differ} differ, {len(result.errors)} could not be "
        f"compared, {len(result.only_a)} only in A, {len(result.only_b)} only in B{neither}"
    )
    return lines


# ---------------------------------------------------------------------------------------
# cudump ls


def snapshot_rows(snapshots: Sequence[Snapshot], full_names: bool = False) -> list[list[str]]:
    rows = []
    for s in snapshots:
        r = s.record
        name = r.kernel if full_names else fit(short_kernel_name(r.kernel), 48)
        shape = "x".join(str(n) for n in r.shape) if r.shape else "-"
        if s.ok and r.file:
            where = r.file
        elif s.ok and s.digest is not None:
            where = f"digest {s.digest.value}"
        elif s.ok and s.nan_report is not None:
            where = s.nan_report.describe()
        else:
            where = f"error: {s.problem or 'not captured'}"
        rows.append([str(s.index), str(r.pid), str(r.launch), name, str(r.occurrence),
                     str(r.arg), r.type or "-", r.phase, r.dtype or "-", shape, where])
    return rows


LS_HEADERS = ["#", "pid", "launch", "kernel", "occ", "arg", "type", "phase", "dtype", "shape",
              "file"]
LS_RIGHT = [True, True, True, False, True, True, False, False, False, False, False]


# ---------------------------------------------------------------------------------------
# HTML report

_CSS = """
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


def _metrics_rows(pair: PairResult | None) -> list[tuple[str, str]]:
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
class _Figure:
    caption: str
    file: str | None      # relative to the report directory
    missing: str = "no image"   # what is shown instead when there is no file


@dataclass
class _Plot:
    """A 1-D pair: both sides as lines (an <svg>), and where they differ."""

    caption: str
    svg: str
    spots: Spots | None


@dataclass
class _Phase:
    phase: str
    pair: PairResult | None
    figures: list[_Figure]
    plot: _Plot | None = None


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


def _drawings(a: np.ndarray | None, b: np.ndarray | None, alpha: bool = False
              ) -> tuple[Rendered | None, Rendered | None, Rendered | None]:
    """A, B and their heatmap as images, each None where it cannot be drawn."""
    if a is not None and b is not None and a.shape == b.shape and a.dtype == b.dtype:
        try:
            return render_pair(a, b, alpha=alpha)
        except (CudumpError, ValueError, MemoryError):
            pass
    return _drawable(a, alpha), _drawable(b, alpha), None


def _esc(value: object) -> str:
    """Text (from a manifest, a path, a number) for HTML content or a quoted attribute."""
    return html.escape(str(value), quote=True)


@dataclass
class PageOptions:
    """Where a report goes and what it says besides the comparison."""

    index: str = "index.html"      # the page's file name in the report directory
    images: str = "img"            # the directory of its images, beside the page
    title: str = "cudump diff"
    notes: tuple[str, ...] = ()    # lines shown under the title
    divergent: bool = True         # name the first divergent launch under them
    alpha: bool = False            # RGBA panels with their alpha, over a checkerboard


class HtmlReport:
    """A static page: per launch with a differing buffer, each phase's A, B and heatmap."""

    def __init__(self, out_dir: Path, result: RunDiff, name_a: str, name_b: str,
                 tol: Tolerance, jobs: int | None = None,
                 page: PageOptions | None = None) -> None:
        self.out = Path(out_dir)
        self.result = result
        self.name_a, self.name_b = name_a, name_b
        self.tol = tol
        self.jobs = jobs or os.cpu_count() or 1
        self.options = page or PageOptions()
        self._anchor: dict[int, int] = {}      # id(pair) -> its section number
        self._first: DivergentLaunch | None = None

    def write(self, progress: Callable[[int, int], None] | None = None) -> Path:
        """Writes the page and its images; `progress` hears (sections done, sections)."""
        (self.out / self.options.images).mkdir(parents=True, exist_ok=True)
        self._first = self.result.first_divergent_launch
        groups = self._groups()
        self._anchor = {id(p): n for n, g in enumerate(groups) for p in g}
        sections: list[str] = []
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            for section in pool.map(lambda item: self._section(*item), enumerate(groups)):
                sections.append(section)
                if progress is not None:
                    progress(len(sections), len(groups))
        page = self._page(sections)
        index = self.out / self.options.index
        index.write_text(page, encoding="utf-8")
        return index

    def _groups(self) -> list[list[PairResult]]:
        """Pairs of one launch and argument (both phases), kept when any phase differs."""
        by_launch: dict[tuple, list[PairResult]] = {}
        for pair in self.result.pairs:
            k = pair.key
            by_launch.setdefault((k[0], k[1], k[2], k[4]), []).append(pair)
        wanted = [g for g in by_launch.values()
                  if any(p.status in ("differ", "mismatch") for p in g)]
        for g in wanted:
            g.sort(key=lambda p: 0 if p.key[3] == "before" else 1)
        return wanted

    def _section(self, number: int, group: list[PairResult]) -> str:
        phases: list[_Phase] = []
        for position, pair in enumerate(group):
            phase = pair.key[3]
            phases.append(self._draw(f"{number:05d}-{position}", phase, pair))
        first = self._first.pair if self._first is not None else None
        is_first = first is not None and any(p is first for p in group)
        head = group[0].launch_snapshot.record
        title = (f"launch {head.launch} · {short_kernel_name(head.kernel)} · occurrence "
                 f"{head.occurrence} · arg {head.arg}" + (f" ({head.type})" if head.type else ""))
        parts = [f'<section class="launch{" first" if is_first else ""}" id="l{number}">',
                 f"<h2>{_esc(title)}"
                 + ('<span class="badge">first divergent</span>' if is_first else "")
                 + "</h2>"]
        for ph in phases:
            parts.append('<div class="phase">')
            if ph.plot is not None:
                parts.append(self._plot_html(ph.plot))
            for fig in ph.figures:
                parts.append("<figure>")
                parts.append(f"<figcaption>{_esc(fig.caption)}</figcaption>")
                if fig.file:
                    shown = ' class="alpha"' if self.options.alpha else ""
                    parts.append(f'<img src="{_esc(fig.file)}"{shown} '
                                 f'alt="{_esc(fig.caption)}">')
                else:
                    parts.append(f'<div class="none">{_esc(fig.missing)}</div>')
                parts.append("</figure>")
            rows = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>"
                           for k, v in _metrics_rows(ph.pair))
            parts.append(f'<table class="metrics"><tr><td>phase</td><td><b>'
                         f"{_esc(ph.phase)}</b></td></tr>{rows}</table>")
            parts.append("</div>")
        parts.append("</section>")
        return "\n".join(parts)

    def _draw(self, stem: str, phase: str, pair: PairResult) -> _Phase:
        """Write the PNGs of one pair (or plot a 1-D pair); a side that cannot be drawn gets
        no image.

        File names come from the section's number and the position of the phase in it, never
        from manifest text, so no manifest can make the report write outside its directory.
        """
        if any(s is not None and s.digest_only for s in (pair.a, pair.b)):
            # A digest has no pixels: nothing to draw, for either side.
            return _Phase(phase, pair, [
                _Figure(f"A · {phase}", None, "digest only: no image"),
                _Figure(f"B · {phase}", None, "digest only: no image"),
                _Figure("|A − B| heatmap", None,
                        "digest differs" if pair.status == "differ" else "no image")])
        arrays: list[np.ndarray | None] = []
        for snap in (pair.a, pair.b):
            try:
                arrays.append(snap.load() if snap is not None else None)
            except Exception:  # noqa: BLE001 - an unreadable side is shown as missing
                arrays.append(None)
        plot = self._plot(phase, *arrays)
        if plot is not None:
            return _Phase(phase, pair, [], plot)
        files: list[str | None] = [None, None, None]
        for i, (suffix, pic) in enumerate(zip(("a", "b", "diff"),
                                              _drawings(*arrays, alpha=self.options.alpha),
                                              strict=True)):
            if pic is not None:
                name = f"{self.options.images}/{stem}-{suffix}.png"
                save_png(pic, self.out / name)
                files[i] = name
        return _Phase(phase, pair, [
            _Figure(f"A · {phase}", files[0]),
            _Figure(f"B · {phase}", files[1]),
            _Figure("|A − B| heatmap", files[2]),
        ])

    def _plot(self, phase: str, a: np.ndarray | None, b: np.ndarray | None) -> _Plot | None:
        """1-D data (on every side that could be read) as lines, None for anything else."""
        present = [x for x in (a, b) if x is not None]
        if not present or not all(plottable(x) for x in present):
            return None
        try:
            svg = line_plot(a, b, self.tol)
            spots = (difference_spots(a, b, self.tol)
                     if a is not None and b is not None and a.shape == b.shape else None)
        except (ValueError, MemoryError):
            return None
        return _Plot(f"A and B · {phase}", svg, spots)

    @staticmethod
    def _plot_html(plot: _Plot) -> str:
        """The plot and, under it, the first elements that differ (as bisect lists them)."""
        parts = ['<figure class="plot">', f"<figcaption>{_esc(plot.caption)}</figcaption>",
                 plot.svg]
        spots = plot.spots
        if spots is not None and spots.count:
            more = (f"the first {len(spots.first)} of {fmt_count(spots.count)}"
                    if spots.count > len(spots.first) else f"all {fmt_count(spots.count)}")
            box = ", ".join(f"{lo}:{hi}" for lo, hi in spots.box)
            rows = "".join(
                f"<tr><td>{_esc(fmt_where(index))}</td><td>{_esc(fmt_num(va))}</td>"
                f"<td>{_esc(fmt_num(vb))}</td></tr>" for index, va, vb in spots.first)
            parts.append(f'<div class="elements-head">elements that differ: {more}, all of '
                         f"them within [{_esc(box)}]</div>"
                         f'<table class="elements"><tr><th>index</th><th>A</th><th>B</th></tr>'
                         f"{rows}</table>")
        parts.append("</figure>")
        return "\n".join(parts)

    def _page(self, sections: list[str]) -> str:
        r = self.result
        rows = []
        for p in r.pairs:
            if p.status == "equal":
                continue
            m = p.metrics
            cls = "diff" if p.different or p.status == "error" else "same"
            launch = _esc(p.launch_snapshot.record.launch)
            if id(p) in self._anchor:
                launch = f"<a href='#l{self._anchor[id(p)]}'>{launch}</a>"
            cells = [short_kernel_name(p.key[0]), p.key[1], p.key[2], p.key[3]]
            if m is not None:
                numbers = [fmt_count(m.differing), fmt_share(m.share), fmt_num(m.max_abs),
                           fmt_psnr(m.psnr)]
            elif p.status == "differ" and p.digests is not None:
                numbers = ["digest differs", "-", "-", "-"]
            else:
                numbers = ["-"] * 4
            rows.append(
                f"<tr><td class='n'>{launch}</td>"
                f"<td>{_esc(cells[0])}</td><td class='n'>{_esc(cells[1])}</td>"
                f"<td class='n'>{_esc(cells[2])}</td><td>{_esc(cells[3])}</td>"
                f"<td class='{cls}'>{_esc(STATUS_TEXT.get(p.status, p.status))}</td>"
                + "".join(f"<td class='n'>{_esc(x)}</td>" for x in numbers) + "</tr>"
            )
        compared = len(r.compared) - len(r.uncaptured)
        differ = sum(1 for p in r.compared if p.status in ("differ", "mismatch"))
        summary = (
            "<table class='summary'><tr><th>launch</th><th>kernel</th><th>occ</th><th>arg</th>"
            "<th>phase</th><th>status</th><th>differing</th><th>share</th><th>max</th>"
            "<th>PSNR</th></tr>" + "".join(rows) + "</table>"
        ) if rows else "<p class='same'>All snapshots are equal within tolerance.</p>"
        meta = (f"A: {_esc(self.name_a)} &nbsp; B: {_esc(self.name_b)} &nbsp; "
                f"{_esc(fmt_tol(self.tol))} &nbsp; {compared} pairs compared, "
                f"{differ} differ, {len(r.only_a)} only in A, {len(r.only_b)} only in B")
        lines = list(self.options.notes)
        if self._first is not None and self.options.divergent:
            lines.append(divergent_line(self._first))
        notes = "".join(f"<div class='note'>{_esc(n)}</div>" for n in lines)
        title = _esc(self.options.title)
        return (
            "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{title}</title>"
            f"<style>{_CSS}</style></head><body>"
            f"<h1>{title}</h1><div class='meta'>{meta}</div>{notes}"
            f"{summary}{''.join(sections)}</body></html>\n"
        )
