#!/usr/bin/env python3
"""Draws a trace-event JSON file (what `cudump --timeline FILE` writes) as a PNG picture.

usage: timeline_png.py TRACE.json OUT.png [--width PX] [--linear] [--max-tracks N]

One row per track, grouped by process: the host threads that launched, then the streams,
in the order the file's sort indexes give. Each slice ("X" event) is a box coloured by its
name (the kernel) with the name written beside it where there is room; each instant ("i"
event: a snapshot, a digest, a NaN/Inf report, a stop at the prompt) is a marker coloured by
its kind, with a legend at the bottom. A global instant ("s": "g") is a line across every
track.

cudump's timestamps are when cudump received each event and its slices all last 1 us (see
the file's otherData.clock), so a run is mostly idle time between bursts of launches. Unless
--linear, idle gaps are cut out of the time axis: each cut is a narrow band labelled with
the time left out, and every stretch between cuts is drawn to its own scale, with its start
time written on the axis. Needs only Python and Pillow (a dependency of cudump).
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f",
           "#e15759", "#ff9da7", "#86bcb6"]
INSTANT_COLOURS = {"snapshot": "#1f5fbf", "digest": "#6b6b6b", "NaN/Inf": "#d62728",
                   "stop": "#ff7f0e", "snapshot failed": "#8c1c13"}
OTHER_INSTANT = "#7b3fa0"
BACKGROUND, GRID, TEXT, FAINT = "#ffffff", "#e3e6ea", "#1d2430", "#6b7280"
TRACK_H, PROCESS_H, LABEL_W, MARGIN = 24, 26, 300, 12
GAP_W = 34                       # the band that stands for a cut-out idle gap, in pixels
MIN_STRETCH_W = 60               # the narrowest a stretch between cuts is drawn
MAX_EVENTS = 2_000_000           # a bigger file is refused rather than drawn for minutes


@dataclass
class Track:
    pid: int
    tid: int
    name: str
    sort: int = 0
    slices: list[tuple[float, float, str]] = field(default_factory=list)   # ts, dur, name
    instants: list[tuple[float, str]] = field(default_factory=list)         # ts, name


@dataclass
class Process:
    pid: int
    name: str
    sort: int = 0
    tracks: dict[int, Track] = field(default_factory=dict)


class TraceError(Exception):
    """The file is not a trace-event JSON file this script can draw."""


def _font(size: int, bold: bool = False) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    names = (["DejaVuSans-Bold.ttf", "LiberationSans-Bold.ttf"] if bold else
             ["DejaVuSans.ttf", "LiberationSans-Regular.ttf"])
    for name in names:
        for folder in ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation",
                       "/usr/share/fonts/dejavu", "/usr/share/fonts/TTF", ""):
            try:
                return ImageFont.truetype(f"{folder}/{name}" if folder else name, size)
            except OSError:
                continue
    try:
        return ImageFont.load_default(size=size)
    except TypeError:                       # Pillow < 10.1: the bitmap font, one size
        return ImageFont.load_default()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_trace(path: Path) -> tuple[dict[int, Process], list[tuple[float, str]], dict[str, Any]]:
    """Processes with their tracks and events, the global instants, and otherData."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TraceError(f"{path}: {err}") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list")
    if len(events) > MAX_EVENTS:
        raise TraceError(f"{path}: {len(events):,} events, more than this script draws "
                         f"({MAX_EVENTS:,})")
    processes: dict[int, Process] = {}
    global_marks: list[tuple[float, str]] = []

    def process(pid: int) -> Process:
        if pid not in processes:
            processes[pid] = Process(pid, f"pid {pid}")
        return processes[pid]

    def track(pid: int, tid: int) -> Track:
        proc = process(pid)
        if tid not in proc.tracks:
            proc.tracks[tid] = Track(pid, tid, f"thread {tid}")
        return proc.tracks[tid]

    for event in events:
        if not isinstance(event, dict):
            continue
        ph, name = event.get("ph"), event.get("name")
        pid, tid = event.get("pid"), event.get("tid")
        if not isinstance(pid, int) or not isinstance(tid, int) or not isinstance(name, str):
            continue
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if ph == "M":
            if name == "process_name" and isinstance(args.get("name"), str):
                process(pid).name = args["name"]
            elif name == "process_sort_index" and isinstance(args.get("sort_index"), int):
                process(pid).sort = args["sort_index"]
            elif name == "thread_name" and isinstance(args.get("name"), str):
                track(pid, tid).name = args["name"]
            elif name == "thread_sort_index" and isinstance(args.get("sort_index"), int):
                track(pid, tid).sort = args["sort_index"]
            continue
        ts = event.get("ts")
        if not _number(ts):
            continue
        if ph == "X":
            dur = event.get("dur") if _number(event.get("dur")) else 0.0
            track(pid, tid).slices.append((float(ts), float(dur), name))
        elif ph in ("i", "I"):
            if event.get("s") == "g":
                global_marks.append((float(ts), name))
            else:
                track(pid, tid).instants.append((float(ts), name))
    other = doc.get("otherData") if isinstance(doc, dict) else None
    return processes, global_marks, other if isinstance(other, dict) else {}


class TimeAxis:
    """Time to x: stretches of activity, each to its own scale, with cut-out gaps between."""

    def __init__(self, times: list[float], x0: float, width: float, linear: bool) -> None:
        times = sorted(times) or [0.0]
        self.x0, self.width = x0, width
        if linear:
            self.stretches = [(times[0], max(times[-1], times[0] + 1.0))]
        else:
            span = max(times[-1] - times[0], 1.0)
            steps = sorted(b - a for a, b in zip(times, times[1:], strict=False) if b > a)
            typical = steps[len(steps) // 2] if steps else 1.0
            # A gap is cut when it is long against both the run and the usual spacing.
            cut = max(20 * typical, span / 50, 50.0)
            self.stretches = []
            start = prev = times[0]
            for t in times[1:]:
                if t - prev > cut:
                    self.stretches.append((start, prev))
                    start = t
                prev = t
            self.stretches.append((start, prev))
        gaps = len(self.stretches) - 1
        room = max(width - gaps * GAP_W, MIN_STRETCH_W * len(self.stretches))
        lengths = [max(b - a, 1.0) for a, b in self.stretches]
        total = sum(lengths)
        widths = [max(MIN_STRETCH_W, room * n / total) for n in lengths]
        scale = room / sum(widths)
        self.spans: list[tuple[float, float, float, float]] = []    # t0, t1, xa, xb
        x = x0
        for (a, b), w in zip(self.stretches, widths, strict=True):
            w *= scale
            pad = min(6.0, w / 8)
            self.spans.append((a, b, x + pad, x + w - pad))
            x += w + GAP_W
        self.gaps = [(self.spans[i][3] + 6, self.spans[i + 1][2] - 6,
                      self.spans[i + 1][0] - self.spans[i][1]) for i in range(gaps)]

    def x(self, t: float) -> float:
        for a, b, xa, xb in self.spans:
            if t <= b:
                if t <= a:
                    return xa
                return xa + (xb - xa) * (t - a) / max(b - a, 1e-9)
        return self.spans[-1][3]


def _duration(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1e3:
        return f"{us / 1e3:.3g} ms"
    return f"{us:.3g} us"


def _colour(name: str) -> str:
    return PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def _instant_kind(name: str) -> str:
    return name.split(":", 1)[0].strip() if ":" in name else name


def _label(name: str) -> str:
    return name[5:] if name.startswith("void ") else name


def _fit(draw: ImageDraw.ImageDraw, text: str, font: Any, room: float, least: int = 1) -> str:
    """text, or as much of it as fits in `room` pixels with an ellipsis (at least `least`
    characters of it; else nothing)."""
    if room <= 8:
        return ""
    if draw.textlength(text, font=font) <= room:
        return text
    while text and draw.textlength(text + "…", font=font) > room:
        text = text[:-1]
    return text + "…" if len(text) >= least else ""


def render(path: Path, out: Path, width: int = 1400, linear: bool = False,
           max_tracks: int = 48) -> str:
    """Writes the picture; returns a one-line description of what it shows."""
    processes, global_marks, other = read_trace(path)
    shown = [p for p in processes.values() if any(t.slices or t.instants
                                                  for t in p.tracks.values())]
    shown.sort(key=lambda p: (p.sort, p.pid))
    rows: list[tuple[str, Any]] = []
    left_out = 0
    for proc in shown:
        tracks = sorted((t for t in proc.tracks.values() if t.slices or t.instants),
                        key=lambda t: (t.sort, t.tid))
        rows.append(("process", proc))
        for t in tracks:
            if sum(1 for kind, _ in rows if kind == "track") >= max_tracks:
                left_out += 1
            else:
                rows.append(("track", t))
    tracks = [t for kind, t in rows if kind == "track"]
    times = [ts for t in tracks for ts, _, _ in t.slices]
    times += [ts + dur for t in tracks for ts, dur, _ in t.slices]
    times += [ts for t in tracks for ts, _ in t.instants] + [ts for ts, _ in global_marks]

    font, small, bold = _font(13), _font(11), _font(13, bold=True)
    title = f"{path.name}: " + (" ".join(str(a) for a in other.get("program", [])) or "a run")
    header_h, axis_h = 30, 28
    kinds = sorted({_instant_kind(n) for t in tracks for _, n in t.instants}
                   | ({_instant_kind(n) for _, n in global_marks}))
    legend_h = 26 if kinds else 0
    note_h = 34
    body_h = sum(PROCESS_H if kind == "process" else TRACK_H for kind, _ in rows)
    height = MARGIN + header_h + axis_h + body_h + (TRACK_H if left_out else 0) + legend_h \
        + note_h + MARGIN
    image = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(image)
    draw.text((MARGIN, MARGIN), _fit(draw, title, bold, width - 2 * MARGIN), fill=TEXT,
              font=bold)
    plot_x0 = MARGIN + LABEL_W
    plot_w = width - plot_x0 - MARGIN
    axis = TimeAxis(times, plot_x0, plot_w, linear)
    top = MARGIN + header_h
    body_top = top + axis_h

    # The axis: each stretch's start time (where it does not run into the one before); each
    # cut-out gap as a hatched band, its length on the line above.
    free_x = 0.0
    for a, _b, xa, _xb in axis.spans:
        text = _duration(a)
        draw.line([(xa, top + axis_h - 4), (xa, top + axis_h)], fill=FAINT)
        if xa + 2 >= free_x:
            draw.text((xa + 2, top + 8), text, fill=FAINT, font=small)
            free_x = xa + 2 + draw.textlength(text, font=small) + 8
    body_bottom = body_top + body_h
    free_x = 0.0
    for ga, gb, length in axis.gaps:
        for x in range(int(ga), int(gb) + 1, 4):
            draw.line([(x, body_top), (x, body_bottom)], fill=GRID)
        text = "+" + _duration(length)
        tw = draw.textlength(text, font=small)
        x = max((ga + gb - tw) / 2, free_x)
        draw.text((x, top - 6), text, fill=FAINT, font=small)
        free_x = x + tw + 8

    y = body_top
    for kind, item in rows:
        if kind == "process":
            draw.rectangle([MARGIN, y, width - MARGIN, y + PROCESS_H - 1], fill="#f1f3f6")
            draw.text((MARGIN + 4, y + 5), _fit(draw, item.name, bold, width - 2 * MARGIN),
                      fill=TEXT, font=bold)
            y += PROCESS_H
            continue
        track: Track = item
        draw.line([(MARGIN, y + TRACK_H - 1), (width - MARGIN, y + TRACK_H - 1)], fill=GRID)
        draw.text((MARGIN + 14, y + 5), _fit(draw, track.name, font, LABEL_W - 20), fill=TEXT,
                  font=font)
        slices = sorted(track.slices)
        for i, (ts, dur, name) in enumerate(slices):
            xa = axis.x(ts)
            xb = max(axis.x(ts + dur), xa + 3)
            draw.rectangle([xa, y + 4, xb, y + TRACK_H - 5], fill=_colour(name))
            nxt = axis.x(slices[i + 1][0]) if i + 1 < len(slices) else plot_x0 + plot_w
            text = _fit(draw, _label(name), small, nxt - xb - 6, least=4)
            if text:
                draw.text((xb + 3, y + 6), text, fill=TEXT, font=small)
        for ts, name in track.instants:
            x = axis.x(ts)
            colour = INSTANT_COLOURS.get(_instant_kind(name), OTHER_INSTANT)
            draw.polygon([(x - 5, y + 2), (x + 5, y + 2), (x, y + 11)], fill=colour)
            draw.line([(x, y + 11), (x, y + TRACK_H - 3)], fill=colour, width=1)
        y += TRACK_H
    if left_out:
        draw.text((MARGIN + 14, y + 5), f"… {left_out} more tracks not drawn", fill=FAINT,
                  font=font)
        y += TRACK_H
    for ts, name in global_marks:
        x = axis.x(ts)
        colour = INSTANT_COLOURS.get(_instant_kind(name), OTHER_INSTANT)
        draw.line([(x, body_top), (x, body_bottom)], fill=colour, width=2)

    if kinds:
        lx = MARGIN
        ly = y + 8
        for kind in kinds:
            colour = INSTANT_COLOURS.get(kind, OTHER_INSTANT)
            draw.polygon([(lx, ly + 2), (lx + 10, ly + 2), (lx + 5, ly + 11)], fill=colour)
            draw.text((lx + 14, ly), kind, fill=TEXT, font=small)
            lx += 14 + int(draw.textlength(kind, font=small)) + 20
        y += legend_h
    note = ("Time: when cudump received each event (launch slices are drawn 1 us long: kernel "
            "run times are not measured)" if "clock" in other else "Time: the file's ts")
    if axis.gaps:
        note += "; idle gaps are cut out (hatched, with their length)"
    draw.text((MARGIN, y + 10), _fit(draw, note + ".", small, width - 2 * MARGIN), fill=FAINT,
              font=small)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, optimize=True)
    slices_n = sum(len(t.slices) for t in tracks)
    instants_n = sum(len(t.instants) for t in tracks) + len(global_marks)
    return (f"wrote {out}: {len(shown)} process{'es' if len(shown) != 1 else ''}, "
            f"{len(tracks)} tracks, {slices_n} slices, {instants_n} instants"
            + (f" ({left_out} tracks left out)" if left_out else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="timeline_png.py",
        description="Draw a trace-event JSON file (cudump --timeline) as a PNG picture.")
    parser.add_argument("trace", type=Path, help="the trace-event JSON file")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1400, help="picture width in pixels")
    parser.add_argument("--linear", action="store_true",
                        help="one time scale for the whole run (idle gaps not cut out)")
    parser.add_argument("--max-tracks", type=int, default=48, metavar="N",
                        help="draw at most N tracks (default 48)")
    args = parser.parse_args(argv)
    if args.width < 600 or args.max_tracks < 1:
        parser.error("--width must be at least 600 and --max-tracks at least 1")
    try:
        print(render(args.trace, args.out, args.width, args.linear, args.max_tracks))
    except TraceError as err:
        print(f"timeline_png.py: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
