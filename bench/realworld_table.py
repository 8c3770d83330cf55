"""The pure part of bench/realworld.py: reading what the programs print, the goals, the derived
snapshot figures and the markdown table. No GPU, no subprocess: tests/test_bench_realworld.py
checks it on the CPU.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

WORKLOADS = ("resnet18", "bert", "snapshots")
MIB = 1 << 20


class BenchError(Exception):
    """A sub-run that failed or printed what the benchmark did not expect."""


def parse_only(text: str) -> tuple[str, ...]:
    """`--only resnet18,snapshots`: the workloads named, in the benchmark's order."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise ValueError(f"unknown workload '{unknown[0] if unknown else text}': "
                         f"choose from {', '.join(WORKLOADS)}")
    return tuple(w for w in WORKLOADS if w in names)


def only_line(text: str, key: str, shape: str, where: str) -> str:
    """What follows KEY on the one `KEY <shape>` line of a program's output; BenchError unless
    there is exactly one such line."""
    found = re.findall(rf"^{re.escape(key)} (\S+)$", text, re.MULTILINE)
    if len(found) != 1:
        raise BenchError(f"{where}: expected one `{key} {shape}` line, found {len(found)} in:\n"
                         f"{text[-1500:]}")
    return str(found[0])


def read_values(text: str, keys: Sequence[str], where: str) -> dict[str, float]:
    """The `KEY NUMBER` lines of a program's output, each key exactly once, each number finite
    and not negative; BenchError naming what is missing or wrong otherwise."""
    values: dict[str, float] = {}
    for key in keys:
        word = only_line(text, key, "N", where)
        try:
            value = float(word)
        except ValueError:
            raise BenchError(f"{where}: `{key}` is not a number: {word!r}") from None
        if not math.isfinite(value) or value < 0:
            raise BenchError(f"{where}: `{key}` is {word}")
        values[key] = value
    return values


def read_list(text: str, key: str, count: int, where: str) -> list[float]:
    """The `KEY A,B,...` line of a program's output: exactly one, of `count` finite numbers
    above zero (times, which other figures are divided by); BenchError otherwise."""
    word = only_line(text, key, "A,B,...", where)
    try:
        values = [float(item) for item in word.split(",")]
    except ValueError:
        raise BenchError(f"{where}: `{key}` is not a list of numbers: {word!r}") from None
    if len(values) != count or not all(math.isfinite(v) and v > 0 for v in values):
        raise BenchError(f"{where}: `{key}` should be {count} numbers, not {word!r}")
    return values


def launch_times(text: str, launches: int, where: str) -> list[float]:
    """samples/big_buffer's `launch K ms T` times of launches 2..K (the first warms up),
    checking that every launch 1..`launches` printed its line, once and in order."""
    found = re.findall(r"^launch (\d+) ms ([\d.]+)$", text, re.MULTILINE)
    numbers = [int(k) for k, _ in found]
    if numbers != list(range(1, launches + 1)):
        raise BenchError(f"{where}: expected `launch K ms T` for K = 1..{launches}, got "
                         f"{numbers} in:\n{text[-1500:]}")
    return [float(ms) for k, ms in found if int(k) > 1]


def cupti_launches(stderr: str, where: str) -> int:
    """The count bench/cupti_count.c prints at exit: proof that the subscriber was loaded."""
    found = re.findall(r"^cupti_count: (\d+) launches$", stderr, re.MULTILINE)
    if len(found) != 1:
        raise BenchError(f"{where}: the CUPTI subscriber printed no count (not loaded?):\n"
                         f"{stderr[-1500:]}")
    return int(found[0])


@dataclass(frozen=True)
class Goal:
    """The ratio a row must stay under: at most `limit`, or below it when `strict`."""

    limit: float
    strict: bool = False

    @property
    def text(self) -> str:
        return f"{'<' if self.strict else '<='} {self.limit:.2f}x"

    def met(self, ratio: float) -> bool:
        return ratio < self.limit if self.strict else ratio <= self.limit


@dataclass
class Row:
    """One line of the table. `tool_ms` is what the mode took (cudump's, or the other tool's
    where the mode says so); `met` is None where the row has no goal."""

    workload: str
    mode: str
    bare_ms: float | None
    tool_ms: float | None
    goal: str = "-"
    met: bool | None = None
    failed: str = ""                   # why the row has no figure
    # the ratio at bare's speed of the moment (level_ratio), where chunks of forwards had one
    matched: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.bare_ms is None or self.tool_ms is None or self.bare_ms <= 0:
            return None
        return self.tool_ms / self.bare_ms

    def cells(self) -> list[str]:
        ratio = self.ratio
        met = "-" if self.met is None else ("yes" if self.met else "**NO**")
        if self.failed:
            met = "**FAILED**"
        return [self.workload, self.mode, ms_text(self.bare_ms), ms_text(self.tool_ms),
                "-" if ratio is None else f"{ratio:.3f}x",
                "-" if self.matched is None else f"{self.matched:.3f}x", self.goal, met]


def ms_text(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.3f}"


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def ratio_row(workload: str, mode: str, bare: Sequence[float], tool: Sequence[float],
              goal: Goal | None = None, failed: str = "", matched: float | None = None) -> Row:
    """A row of medians; the goal judged on the ratio at bare's speed of the moment where
    there is one (`matched`, level_ratio), else on the ratio of the medians."""
    row = Row(workload, mode, median(bare), median(tool), failed=failed, matched=matched)
    if goal is not None:
        row.goal = goal.text
        ratio = row.ratio if matched is None or row.ratio is None else matched
        row.met = None if ratio is None else goal.met(ratio)
    if (row.bare_ms is None or row.tool_ms is None) and not row.failed:
        row.failed = "no figure"
    return row


NOISE = 0.10     # how far a figure may move before a workload's ratios are called uncertain


def noise_notes(workload: str, bare: Sequence[float], subscriber: float | None) -> list[str]:
    """Notes that say when a workload's ratios are less sure than their digits: the bare time
    moved between repetitions by more than NOISE, or the CUPTI subscriber (which adds next
    to nothing) measured further than NOISE from the bare time (`subscriber`: its ratio)."""
    notes = []
    mid = median(bare)
    if len(bare) > 1 and mid and (max(bare) - min(bare)) / mid > NOISE:
        notes.append(f"{workload}: the bare time moved by {(max(bare) - min(bare)) / mid:.0%} "
                     f"between repetitions ({min(bare):.3f} to {max(bare):.3f} ms): its ratios "
                     "are uncertain by about as much")
    if subscriber is not None and abs(subscriber - 1) > NOISE:
        notes.append(f"{workload}: the CUPTI subscriber, which adds next to nothing, measured "
                     f"{subscriber:.2f}x: this host's noise, which the other ratios carry too")
    return notes


def speed_notes(workload: str, probes: dict[str, Sequence[float]]) -> list[str]:
    """What the programs' CPU probe (`host_probe_us`: µs for one small PyTorch op, timed in
    each process before its forwards) read, by mode, as the median of its repetitions; and
    each mode whose median was further than NOISE from bare's: its processes ran on a CPU of
    another speed than bare's, and its ratio carries that. `probes` is keyed by the mode's
    label, bare's as "bare"."""
    if not probes:
        return []
    mids = {mode: median(values) for mode, values in probes.items() if values}
    notes = [f"{workload}: the CPU probe, µs an op (median): " +
             ", ".join(f"{mode} {mid:.2f}" for mode, mid in mids.items())]
    base = mids.get("bare")
    for mode, mid in mids.items():
        if base and mode != "bare" and abs(mid / base - 1) > NOISE:
            notes.append(f"{workload}, {mode}: its processes' CPU probe read {mid / base:.2f}x "
                         "bare's: they ran on a CPU of another speed, and its ratio carries that")
    return notes


def matched_notes(workload: str, runs: Sequence[dict[str, tuple[float, float]]]
                  ) -> list[str]:
    """The ratios of runs that ran on a CPU of bare's speed: for each mode, the repetitions
    whose run's CPU probe was within NOISE of the same repetition's bare run, and the median
    of their ratios to that bare run. `runs` has a dict per repetition, mode label -> (ms a
    forward, probe µs), bare's as "bare"."""
    notes = []
    modes = [mode for run in runs for mode in run if mode != "bare"]
    for mode in dict.fromkeys(modes):
        pairs = [(run[mode], run["bare"]) for run in runs if mode in run and "bare" in run]
        ratios = [ms / bare_ms for (ms, probe), (bare_ms, bare_probe) in pairs
                  if abs(probe / bare_probe - 1) <= NOISE]
        if not pairs:
            continue
        found = (f"median ratio {median(ratios):.3f}x ({', '.join(f'{r:.3f}' for r in ratios)})"
                 if ratios else "no ratio")
        notes.append(f"{workload}, {mode}: {len(ratios)} of {len(pairs)} repetitions ran on a "
                     f"CPU of bare's speed (probe within {NOISE:.0%} of the same repetition's "
                     f"bare run): {found}")
    return notes


LEVEL = 0.05     # how close two chunks' CPU probes are for the host to count as equally fast


def spread(ratios: Sequence[float]) -> str:
    """A note's words for some ratios (at least one): their median and range."""
    return (f"median ratio {statistics.median(ratios):.3f}x, from {min(ratios):.3f}x to "
            f"{max(ratios):.3f}x")


def level_ratios(own: Sequence[tuple[float, float]], bare: Sequence[tuple[float, float]]
                 ) -> list[float]:
    """Each chunk of `own` (ms a forward, CPU probe µs) against the median of bare's chunks
    whose probe was within LEVEL of its own; chunks with no such bare chunk are left out."""
    ratios = []
    for ms, probe in own:
        like = [b_ms for b_ms, b_probe in bare if abs(b_probe - probe) <= LEVEL * probe]
        if like:
            ratios.append(ms / statistics.median(like))
    return ratios


def level_ratio(own: Sequence[tuple[float, float]], bare: Sequence[tuple[float, float]]
                ) -> float | None:
    """The median of level_ratios, where at least half of `own`'s chunks had bare chunks of
    their speed (fewer say too little to judge a goal on); else None."""
    ratios = level_ratios(own, bare)
    return statistics.median(ratios) if own and 2 * len(ratios) >= len(own) else None


def level_notes(workload: str, chunks: dict[str, Sequence[tuple[float, float]]]) -> list[str]:
    """Ratios at the host's speed of the moment. `chunks`: mode label -> (ms a forward, CPU
    probe µs) of every chunk of forwards of its runs, bare's as "bare". Each chunk of a mode is
    set against the median of bare's chunks whose probe was within LEVEL of its own; the note
    gives the median of those ratios and how many chunks found such bare chunks. The same
    host ran ResNet-18's bare forward at 1.5, 2.0 and 2.5 ms in stretches of a second or more
    within one process, so a process's own probe, taken once, can be of another speed than
    most of its forwards."""
    bare = chunks.get("bare", [])
    notes = []
    for mode, own in chunks.items():
        if mode == "bare" or not own or not bare:
            continue
        ratios = level_ratios(own, bare)
        found = spread(ratios) if ratios else "no ratio"
        notes.append(f"{workload}, {mode}: at the host's speed of the moment (each chunk of "
                     f"forwards against bare's chunks whose CPU probe was within {LEVEL:.0%} of "
                     f"its own): {found}; {len(ratios)} of {len(own)} chunks had such bare "
                     "chunks")
    return notes


Chunk = tuple[float, float]      # a chunk of forwards: (ms a forward, CPU probe µs before it)
# Rounds of one CPU speed a goal is judged on, at least: on an H200 host, 3 repetitions of 10
# chunks had 10-20 such rounds of 30, and 5 repetitions 11-22 of 50.
ALIKE_ROUNDS = 8


def round_ratios(rounds: Sequence[dict[str, Sequence[Chunk]]], mode: str,
                 within: float | None = None) -> list[float]:
    """Modes that took turns (bench/turns.py): each chunk of `mode` against bare's chunk of the
    same round of the same repetition; with `within`, only the rounds whose two chunks' CPU
    probes were that close (a share of bare's). `rounds`: one dict a repetition, mode label ->
    its chunks in turn order, bare's as "bare"; a repetition without both gives none."""
    ratios = []
    for rep in rounds:
        own, bare = rep.get(mode, []), rep.get("bare", [])
        if len(own) != len(bare):
            continue
        for (ms, probe), (b_ms, b_probe) in zip(own, bare, strict=True):
            if b_ms > 0 and (within is None or abs(probe - b_probe) <= within * b_probe):
                ratios.append(ms / b_ms)
    return ratios


def round_ratio(rounds: Sequence[dict[str, Sequence[Chunk]]], mode: str) -> float | None:
    """The figure a goal is judged on when the modes took turns: the median ratio of the
    rounds whose chunks ran on CPUs of one speed (probes within NOISE), where at least
    ALIKE_ROUNDS did; else the median of every round; None where there are none. Taking turns
    puts a chunk within a fraction of a second of bare's, but the same host runs one
    process's chunks on CPUs of two speeds (probes of 3 and 5.5 µs), and a round whose chunks
    ran on CPUs of different speeds says more of the CPUs than of cudump."""
    every = round_ratios(rounds, mode)
    alike = round_ratios(rounds, mode, NOISE)
    if len(alike) >= ALIKE_ROUNDS:
        return statistics.median(alike)
    return statistics.median(every) if every else None


def round_notes(workload: str, rounds: Sequence[dict[str, Sequence[Chunk]]]) -> list[str]:
    """What the modes that took turns measured, round by round: every round, and the rounds
    whose two chunks ran on CPUs of one speed."""
    notes = []
    modes = dict.fromkeys(mode for rep in rounds for mode in rep if mode != "bare")
    for mode in modes:
        every = round_ratios(rounds, mode)
        if not every:
            found = "no round had both"
        else:
            alike = round_ratios(rounds, mode, NOISE)
            found = (f"{spread(every)} over {len(every)} rounds; the {len(alike)} rounds whose "
                     f"chunks' CPU probes were within {NOISE:.0%} of each other: "
                     + (spread(alike) if alike else "none"))
        notes.append(f"{workload}, {mode}: taking turns with bare (each chunk of forwards "
                     f"against bare's chunk of the same round): {found}")
    return notes


HEADER = ["workload", "mode", "bare ms", "cudump ms", "ratio", "at bare's speed", "goal", "met"]


def markdown(rows: Sequence[Row]) -> str:
    """The table, columns padded so that it also reads as plain text."""
    lines = [HEADER, *[row.cells() for row in rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    right = {2, 3, 4, 5}

    def fmt(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if i in right else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))
                                 ) + " |"

    rule = ["-" * (w - 1) + ":" if i in right else "-" * w for i, w in enumerate(widths)]
    return "\n".join([fmt(HEADER), fmt(rule), *[fmt(cells) for cells in lines[1:]]])


@dataclass
class SnapshotSetting:
    """One cudump setting of the snapshot workload, over the repetitions."""

    launch_ms: list[float] = field(default_factory=list)   # median per run, launches 2..K
    held_ms: list[float] = field(default_factory=list)     # minus the same rep's bare run
    d2h_ms: list[float] = field(default_factory=list)      # one pinned copy, same process
    landed: list[int] = field(default_factory=list)        # snapshots on disk per run
    # from the first launch's start to the last snapshot's manifest line, per run
    end_ms: list[float] = field(default_factory=list)
    failed: str = ""


SNAPSHOT_GOAL = Goal(1.25)             # held <= 1.25x two copies; >= 80% of the lesser rate


def snapshot_rows(label: str, mib: int, launches: int, bare_ms: Sequence[float],
                  settings: dict[str, SnapshotSetting], write_gbs: Sequence[float]
                  ) -> tuple[list[Row], list[str]]:
    """Per setting: per-launch time bare against cudump (goal: every snapshot on disk); the
    time a launch is held (cudump minus bare) against two pinned device-to-host copies of the
    buffer measured in the same process; and the time from the first launch's start until
    the last snapshot is on disk against the time all of them take at the lesser of the
    pinned copy's and the file write's rate (<= 1.25x is >= 80% of that rate). Also notes
    with the rates."""
    rows: list[Row] = []
    notes: list[str] = []
    want = 2 * launches
    nbytes = mib * MIB
    write = median(write_gbs)
    for name, s in settings.items():
        per = ratio_row(label, f"{name}: per launch, back to back", bare_ms, s.launch_ms,
                        failed=s.failed)
        per.goal = f"{want}/{want} on disk"
        if s.landed:
            per.met = min(s.landed) == want
            if not per.met:
                per.goal += f" (got {min(s.landed)})"
        rows.append(per)
        copies = [2 * ms for ms in s.d2h_ms]
        rows.append(ratio_row(label, f"{name}: held vs two pinned D2H copies", copies,
                              s.held_ms, SNAPSHOT_GOAL, failed=s.failed))
        d2h = median(s.d2h_ms)
        total = 2 * launches * nbytes
        what = f"{name}: end to end vs {2 * launches}x{mib} MiB at the lesser rate"
        if d2h is None or write is None or not d2h > 0:
            rows.append(ratio_row(label, what, [], s.end_ms, SNAPSHOT_GOAL,
                                  failed=s.failed or "no rate"))
            continue
        d2h_gbs = nbytes / (d2h / 1e3) / 1e9
        lesser = min(d2h_gbs, write)
        ideal_ms = total / (lesser * 1e9) * 1e3
        rows.append(ratio_row(label, what, [ideal_ms], s.end_ms, SNAPSHOT_GOAL,
                              failed=s.failed))
        end = median(s.end_ms)
        rate = "-"
        if end is not None and end > 0:
            gbs = total / (end / 1e3) / 1e9
            rate = f"{gbs:.2f} GB/s ({gbs / lesser:.0%} of the lesser)"
        notes.append(f"{label}, {name}: pinned D2H {d2h_gbs:.1f} GB/s, file write "
                     f"{write:.2f} GB/s, snapshots end to end (first launch to last file) "
                     f"{rate}")
    return rows, notes
