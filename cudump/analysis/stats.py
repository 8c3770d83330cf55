"""Per-kernel statistics of a run (`cudump stats RUN`, in the spirit of `nsys stats`).

Any run directory has them, from whichever of its files exist:

- summary.json (every run that ended): launches per kernel, graph kernel-node runs among them;
- trace.jsonl (--trace): launches per kernel and their grid and block shapes;
- manifest.jsonl (rules, --digest, --check-nan): snapshots, failed ones, digests, NaN/Inf
  reports.

summary.json's counts are the run's (a trace whose ring overflowed misses launches); the
trace's stand in where there is no summary (the run was killed). Lines of a run's files are
read as strictly as `cudump ls` reads a manifest: a line that is not a record is an error
naming the file and the line, except a last line cut short (a run killed while writing it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudump.errors import SnapshotError
from cudump.kernels.pattern import KernelPattern
from cudump.launches.scopes import NOWHERE, Where
from cudump.rundir import reading
from cudump.rundir.layout import MANIFEST_FILE, STATS_FILES, SUMMARY_FILE, TRACE_FILE
from cudump.rundir.manifest import SnapshotRecord, read_manifest
from cudump.rundir.summary import read_summary_counts
from cudump.rundir.wheres import record_where

RUN_FILES = STATS_FILES

Shape = tuple[tuple[int, ...], tuple[int, ...]]    # (grid, block)


@dataclass
class KernelStats:
    """One kernel (by demangled name) of a run."""

    kernel: str
    mangled: str = ""
    launches: int = 0             # ran: direct launches and kernel-node runs of graph launches
    graph: int = 0                # of which kernel-node runs of graph launches
    shapes: Counter[Shape] = field(default_factory=Counter)   # (grid, block) -> launches
    snapshots: int = 0            # snapshot files written
    failed: int = 0               # snapshots (digests, scans) not taken, with a reason
    digests: int = 0
    nan_reports: int = 0          # buffers a launch left NaN/Inf in (--check-nan)
    nan_produced: int = 0         # of which from finite inputs (origin: produced)
    nan_propagated: int = 0       # of which from an input already non-finite
    ranks: set[int] = field(default_factory=set)   # ranks of its processes' records

    def common_shape(self) -> tuple[Shape, int] | None:
        """The most common (grid, block) and how many launches had it; None without a trace."""
        if not self.shapes:
            return None
        return self.shapes.most_common(1)[0]


@dataclass
class RunStats:
    path: Path
    kernels: dict[str, KernelStats]
    sources: list[str]            # the files the figures come from
    launches_from: str | None     # SUMMARY_FILE or TRACE_FILE: where launch counts came from

    def select(self, pattern: KernelPattern | None) -> list[KernelStats]:
        """The kernels matching `pattern` (all: None), most launched first."""
        kept = [k for k in self.kernels.values()
                if pattern is None or pattern.matches(k.kernel, k.mangled)]
        return sorted(kept, key=lambda k: (-k.launches, -k.snapshots, k.kernel))


# What a manifest record is, in the words every count uses (ls, stats, the summary line
# and summary.json): a snapshot is a file of data, a digest stands for one, a NaN/Inf report
# is what a scan found, and a failed one was not taken (with its reason).
SNAPSHOT, DIGEST, REPORT, FAILED = "snapshot", "digest", "NaN/Inf report", "failed"


def record_kind(record: SnapshotRecord) -> str | None:
    """The kind a manifest record is counted as; None for one that is none of them."""
    if record.status != "ok":
        return FAILED
    if "digest" in record.extra:
        return DIGEST
    if "nonfinite" in record.extra:
        return REPORT
    if record.file is not None:
        return SNAPSHOT
    return None


def is_any_run(path: Path) -> bool:
    """A directory holding at least one of a run's files."""
    return reading.is_folder(path) and any(reading.present(path / name) for name in RUN_FILES)


def not_a_run(path: Path) -> str:
    """What every subcommand says of a path holding none of a run's files."""
    return (f"{reading.shown(path)} is not a cudump run directory (none of "
            f"{', '.join(RUN_FILES)})")


def no_snapshots(path: Path) -> str:
    """What every subcommand that reads snapshots says of a run without a manifest."""
    return (f"{reading.shown(path)} holds no snapshots (no {MANIFEST_FILE}: no rule took any); "
            f"`cudump stats {reading.shown(path)}` shows its kernels")


def run_stats(path: str | Path, pattern: KernelPattern | None = None) -> RunStats:
    """The statistics of a run directory; SnapshotError when it is none, or a file of it is
    not what a run writes. With a `scope:` pattern, only the launches and records made
    inside a matching scope count: summary.json, which counts launches by kernel alone, is
    left out."""
    path = Path(path)
    scope = pattern if pattern is not None and pattern.scope is not None else None
    if not is_any_run(path):
        raise SnapshotError(not_a_run(path))
    kernels: dict[str, KernelStats] = {}

    def of(name: str) -> KernelStats:
        found = kernels.get(name)
        if found is None:
            found = kernels[name] = KernelStats(name)
        return found

    sources: list[str] = []
    launches_from = None
    if reading.present(path / SUMMARY_FILE) and scope is None:
        sources.append(SUMMARY_FILE)
        launches_from = SUMMARY_FILE
        counts, graph = read_summary_counts(path)
        for name, n in counts.items():
            of(name).launches = n
        for name, n in graph.items():
            of(name).graph = n
    if reading.present(path / TRACE_FILE):
        sources.append(TRACE_FILE)
        traced: Counter[str] = Counter()
        in_graphs: Counter[str] = Counter()
        for record in _trace_records(path / TRACE_FILE):
            if scope is not None and not scope.matches_where(record.where):
                continue
            k = of(record.kernel)
            k.mangled = k.mangled or record.mangled
            if record.captured:
                continue           # recorded into a graph, not run: its replays count
            k.shapes[record.shape] += 1
            traced[record.kernel] += 1
            if record.graph:
                in_graphs[record.kernel] += 1
        if launches_from is None:
            launches_from = TRACE_FILE
            for name, n in traced.items():
                of(name).launches = n
                of(name).graph = in_graphs[name]
    if reading.present(path / MANIFEST_FILE):
        sources.append(MANIFEST_FILE)
        for r in read_manifest(path):
            if scope is not None and not scope.matches_where(record_where(r.extra)):
                continue
            k = of(r.kernel)
            k.mangled = k.mangled or r.mangled
            if r.rank is not None:
                k.ranks.add(r.rank)
            kind = record_kind(r)
            if kind == FAILED:
                k.failed += 1
            elif kind == DIGEST:
                k.digests += 1
            elif kind == REPORT:
                k.nan_reports += 1
                origin = r.extra.get("origin")
                k.nan_produced += origin == "produced"
                k.nan_propagated += origin == "propagated"
            elif kind == SNAPSHOT:
                k.snapshots += 1
    return RunStats(path, kernels, sources, launches_from)


@dataclass(frozen=True)
class TraceLaunch:
    """A kernel launch of trace.jsonl (a `launch` or a `graph-kernel` record)."""

    kernel: str
    mangled: str
    shape: Shape
    captured: bool
    graph: bool
    pid: int = 0
    launch: int = 0
    where: Where = NOWHERE        # its scopes, step and source line, where recorded


def _trace_records(path: Path) -> Iterator[TraceLaunch]:
    """The file's launch records, read as every run file is (rundir.reading): a last line
    cut short (a run killed while writing it) is skipped."""
    for line in reading.json_lines(path, torn_last=True, what="a trace record"):
        record = _trace_record(path, line.number, line.data)
        if record is not None:
            yield record


def _trace_record(path: Path, number: int, data: Any) -> TraceLaunch | None:
    if not isinstance(data, dict):
        raise reading.line_error(path, number, "not a trace record (not a JSON object)")
    event = data.get("event")
    if event not in ("launch", "graph-kernel"):
        return None                # a graph launch: its kernels have records of their own
    kernel, mangled = data.get("kernel"), data.get("mangled", "")
    grid, block = data.get("grid"), data.get("block")
    if not isinstance(kernel, str) or not isinstance(mangled, str) or not _dims(grid) \
            or not _dims(block):
        raise reading.line_error(path, number, "a launch record needs 'kernel', 'grid' and "
                                 "'block' (3 whole numbers from 0 to 2^32-1 each)")
    pid, launch = data.get("pid"), data.get("launch")
    return TraceLaunch(kernel, mangled, (tuple(grid), tuple(block)),
                       data.get("captured") is True, event == "graph-kernel",
                       pid if _whole(pid) else 0, launch if _whole(launch) else 0,
                       record_where(data))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dims(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 3 and all(
        isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 32 for n in value)


def format_shape(shape: Shape) -> str:
    grid, block = shape
    return f"({','.join(map(str, grid))}) / ({','.join(map(str, block))})"


# -- by layer -----------------------------------------------------------------------------


@dataclass
class LayerStats:
    """One layer of a run (`cudump stats --by layer`): the launches made inside one
    module (its innermost scope, for a range or an operation) in one pass."""

    layer: str | None             # None: launches made outside every scope
    pass_: str | None
    first: tuple[int, int]        # (launch, pid) of the first of its launches seen
    launches: int = 0
    kernels: Counter[str] = field(default_factory=Counter)
    steps: set[int] = field(default_factory=set)
    nan_produced: int = 0         # NaN/Inf reports of buffers its launches made non-finite
    nan_propagated: int = 0       # ... and of those they carried on from an input

    @property
    def verdict(self) -> str:
        """`produced` (some of its launches made NaN/Inf from finite inputs), `propagated`
        (they only carried it on), or '' (none reported)."""
        if self.nan_produced:
            return "produced"
        return "propagated" if self.nan_propagated else ""


@dataclass
class LayerRun:
    layers: list[LayerStats]      # in the order of their first launches
    launches_from: str | None     # TRACE_FILE, or MANIFEST_FILE (launches with records)
    scoped: bool                  # whether any launch or record of the run names a scope


def layer_stats(path: str | Path, pattern: KernelPattern | None = None) -> LayerRun:
    """The run's launches and NaN/Inf reports grouped by layer and pass (the where fields
    of trace.jsonl and manifest.jsonl): launches are counted from the trace where the run
    has one, else from the manifest (a launch with records counts once). `pattern` (a
    kernel or a scope pattern) narrows both."""
    path = Path(path)
    if not is_any_run(path):
        raise SnapshotError(not_a_run(path))
    layers: dict[tuple[str | None, str | None], LayerStats] = {}

    def of(where: Where, pid: int, launch: int) -> LayerStats:
        key = (where.layer, where.pass_)
        found = layers.get(key)
        if found is None:
            found = layers[key] = LayerStats(where.layer, where.pass_, (launch, pid))
        found.first = min(found.first, (launch, pid))
        if where.step is not None:
            found.steps.add(where.step)
        return found

    def wanted(kernel: str, mangled: str, where: Where) -> bool:
        return pattern is None or pattern.matches_launch(kernel, mangled, where)

    scoped = False
    launches_from = None
    if reading.present(path / TRACE_FILE):
        launches_from = TRACE_FILE
        for t in _trace_records(path / TRACE_FILE):
            scoped = scoped or bool(t.where)
            if t.captured or not wanted(t.kernel, t.mangled, t.where):
                continue
            layer = of(t.where, t.pid, t.launch)
            layer.launches += 1
            layer.kernels[t.kernel] += 1
    if reading.present(path / MANIFEST_FILE):
        seen: set[tuple[int, int]] = set()
        for r in read_manifest(path):
            where = record_where(r.extra)
            scoped = scoped or bool(where)
            if not wanted(r.kernel, r.mangled, where):
                continue
            layer = of(where, r.pid, r.launch)
            if launches_from is None and (r.pid, r.launch) not in seen:
                seen.add((r.pid, r.launch))
                layer.launches += 1
                layer.kernels[r.kernel] += 1
            if record_kind(r) == REPORT:
                origin = r.extra.get("origin")
                layer.nan_produced += origin == "produced"
                layer.nan_propagated += origin == "propagated"
        if launches_from is None:
            launches_from = MANIFEST_FILE
    ordered = sorted(layers.values(), key=lambda x: x.first)
    return LayerRun(ordered, launches_from, scoped)
