"""The static HTML report: per launch with a differing buffer, each phase's A, B and heatmap."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.runs import DivergentLaunch, RunDiff
from cudump.analysis.plot import line_plot, plottable
from cudump.analysis.report.formats import (
    fmt_count,
    fmt_num,
    fmt_psnr,
    fmt_share,
    fmt_tol,
    fmt_where,
)
from cudump.analysis.report.html_parts import (
    CSS,
    Figure,
    Phase,
    Plot,
    drawings,
    esc,
    metrics_rows,
)
from cudump.analysis.report.text import STATUS_TEXT, divergent_line
from cudump.analysis.spots import difference_spots
from cudump.rundir.imaging import save_png
from cudump.rundir.runs import short_kernel_name


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
            by_launch.setdefault((k[0], k[1], k[2], k[4], k[5]), []).append(pair)
        wanted = [g for g in by_launch.values()
                  if any(p.status in ("differ", "mismatch") for p in g)]
        for g in wanted:
            g.sort(key=lambda p: 0 if p.key[3] == "before" else 1)
        return wanted

    def _section(self, number: int, group: list[PairResult]) -> str:
        phases: list[Phase] = []
        for position, pair in enumerate(group):
            phase = pair.key[3]
            phases.append(self._draw(f"{number:05d}-{position}", phase, pair))
        first = self._first.pair if self._first is not None else None
        is_first = first is not None and any(p is first for p in group)
        head = group[0].launch_snapshot.record
        title = (f"launch {head.launch} · {short_kernel_name(head.kernel)} · occurrence "
                 f"{head.occurrence} · arg {head.arg}" + (f" ({head.type})" if head.type else ""))
        parts = [f'<section class="launch{" first" if is_first else ""}" id="l{number}">',
                 f"<h2>{esc(title)}"
                 + ('<span class="badge">first divergent</span>' if is_first else "")
                 + "</h2>"]
        for ph in phases:
            parts.append('<div class="phase">')
            if ph.plot is not None:
                parts.append(self._plot_html(ph.plot))
            for fig in ph.figures:
                parts.append("<figure>")
                parts.append(f"<figcaption>{esc(fig.caption)}</figcaption>")
                if fig.file:
                    shown = ' class="alpha"' if self.options.alpha else ""
                    parts.append(f'<img src="{esc(fig.file)}"{shown} '
                                 f'alt="{esc(fig.caption)}">')
                else:
                    parts.append(f'<div class="none">{esc(fig.missing)}</div>')
                parts.append("</figure>")
            rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>"
                           for k, v in metrics_rows(ph.pair))
            parts.append(f'<table class="metrics"><tr><td>phase</td><td><b>'
                         f"{esc(ph.phase)}</b></td></tr>{rows}</table>")
            parts.append("</div>")
        parts.append("</section>")
        return "\n".join(parts)

    def _draw(self, stem: str, phase: str, pair: PairResult) -> Phase:
        """Write the PNGs of one pair (or plot a 1-D pair); a side that cannot be drawn gets
        no image.

        File names come from the section's number and the position of the phase in it, never
        from manifest text, so no manifest can make the report write outside its directory.
        """
        if any(s is not None and s.digest_only for s in (pair.a, pair.b)):
            # A digest has no pixels: nothing to draw, for either side.
            return Phase(phase, pair, [
                Figure(f"A · {phase}", None, "digest only: no image"),
                Figure(f"B · {phase}", None, "digest only: no image"),
                Figure("|A − B| heatmap", None,
                        "digest differs" if pair.status == "differ" else "no image")])
        arrays: list[np.ndarray | None] = []
        for snap in (pair.a, pair.b):
            try:
                arrays.append(snap.load() if snap is not None else None)
            except Exception:  # noqa: BLE001 - an unreadable side is shown as missing
                arrays.append(None)
        plot = self._plot(phase, *arrays)
        if plot is not None:
            return Phase(phase, pair, [], plot)
        files: list[str | None] = [None, None, None]
        for i, (suffix, pic) in enumerate(zip(("a", "b", "diff"),
                                              drawings(*arrays, alpha=self.options.alpha),
                                              strict=True)):
            if pic is not None:
                name = f"{self.options.images}/{stem}-{suffix}.png"
                save_png(pic, self.out / name)
                files[i] = name
        return Phase(phase, pair, [
            Figure(f"A · {phase}", files[0]),
            Figure(f"B · {phase}", files[1]),
            Figure("|A − B| heatmap", files[2]),
        ])

    def _plot(self, phase: str, a: np.ndarray | None, b: np.ndarray | None) -> Plot | None:
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
        return Plot(f"A and B · {phase}", svg, spots)

    @staticmethod
    def _plot_html(plot: Plot) -> str:
        """The plot and, under it, the first elements that differ (as bisect lists them)."""
        parts = ['<figure class="plot">', f"<figcaption>{esc(plot.caption)}</figcaption>",
                 plot.svg]
        spots = plot.spots
        if spots is not None and spots.count:
            more = (f"the first {len(spots.first)} of {fmt_count(spots.count)}"
                    if spots.count > len(spots.first) else f"all {fmt_count(spots.count)}")
            box = ", ".join(f"{lo}:{hi}" for lo, hi in spots.box)
            rows = "".join(
                f"<tr><td>{esc(fmt_where(index))}</td><td>{esc(fmt_num(va))}</td>"
                f"<td>{esc(fmt_num(vb))}</td></tr>" for index, va, vb in spots.first)
            parts.append(f'<div class="elements-head">elements that differ: {more}, all of '
                         f"them within [{esc(box)}]</div>"
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
            launch = esc(p.launch_snapshot.record.launch)
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
                f"<td>{esc(cells[0])}</td><td class='n'>{esc(cells[1])}</td>"
                f"<td class='n'>{esc(cells[2])}</td><td>{esc(cells[3])}</td>"
                f"<td class='{cls}'>{esc(STATUS_TEXT.get(p.status, p.status))}</td>"
                + "".join(f"<td class='n'>{esc(x)}</td>" for x in numbers) + "</tr>"
            )
        compared = len(r.compared) - len(r.uncaptured)
        differ = sum(1 for p in r.compared if p.status in ("differ", "mismatch"))
        summary = (
            "<table class='summary'><tr><th>launch</th><th>kernel</th><th>occ</th><th>arg</th>"
            "<th>phase</th><th>status</th><th>differing</th><th>share</th><th>max</th>"
            "<th>PSNR</th></tr>" + "".join(rows) + "</table>"
        ) if rows else "<p class='same'>All snapshots are equal within tolerance.</p>"
        meta = (f"A: {esc(self.name_a)} &nbsp; B: {esc(self.name_b)} &nbsp; "
                f"{esc(fmt_tol(self.tol))} &nbsp; {compared} pairs compared, "
                f"{differ} differ, {len(r.only_a)} only in A, {len(r.only_b)} only in B")
        lines = list(self.options.notes)
        if self._first is not None and self.options.divergent:
            lines.append(divergent_line(self._first))
        notes = "".join(f"<div class='note'>{esc(n)}</div>" for n in lines)
        title = esc(self.options.title)
        return (
            "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{title}</title>"
            f"<style>{CSS}</style></head><body>"
            f"<h1>{title}</h1><div class='meta'>{meta}</div>{notes}"
            f"{summary}{''.join(sections)}</body></html>\n"
        )
