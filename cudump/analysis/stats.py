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

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudump.errors import SnapshotError
from cudump.kernels.pattern import KernelPattern
from cudump.rundir.layout import MANIFEST_FILE, STATS_FILES, SUMMARY_FILE, TRACE_FILE
from cudump.rundir.manifest import read_manifest

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


def is_any_run(path: Path) -> bool:
    """A directory holding at least one of a run's files."""
    return path.is_dir() and any((path / name).is_file() for name in RUN_FILES)


def run_stats(path: str | Path) -> RunStats:
    """The statistics of a run directory; SnapshotError when it is none, or a file of it is
    not what a run writes."""
    path = Path(path)
    if not is_any_run(path):
        raise SnapshotError(f"{path} is not a cudump run directory (none of "
                            f"{', '.join(RUN_FILES)})")
    kernels: dict[str, KernelStats] = {}

    def of(name: str) -> KernelStats:
        found = kernels.get(name)
        if found is None:
            found = kernels[name] = KernelStats(name)
        return found

    sources: list[str] = []
    launches_from = None
    if (path / SUMMARY_FILE).is_file():
        sources.append(SUMMARY_FILE)
        launches_from = SUMMARY_FILE
        counts, graph = _summary_counts(path / SUMMARY_FILE)
        for name, n in counts.items():
            of(name).launches = n
        for name, n in graph.items():
            of(name).graph = n
    if (path / TRACE_FILE).is_file():
        sources.append(TRACE_FILE)
        traced: Counter[str] = Counter()
        in_graphs: Counter[str] = Counter()
        for record in _trace_records(path / TRACE_FILE):
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
    if (path / MANIFEST_FILE).is_file():
        sources.append(MANIFEST_FILE)
        for r in read_manifest(path):
            k = of(r.kernel)
            k.mangled = k.mangled or r.mangled
            if r.rank is not None:
                k.ranks.add(r.rank)
            if r.status != "ok":
                k.failed += 1
            elif "digest" in r.extra:
                k.digests += 1
            elif "nonfinite" in r.extra:
                k.nan_reports += 1
                origin = r.extra.get("origin")
                k.nan_produced += origin == "produced"
                k.nan_propagated += origin == "propagated"
            elif r.file is not None:
                k.snapshots += 1
    return RunStats(path, kernels, sources, launches_from)


def _summary_counts(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    try:
        data = json.loads(path.read_bytes())
    except OSError as err:
        raise SnapshotError(f"{path}: cannot read: {err.strerror or err}") from None
    except (ValueError, RecursionError) as err:
        raise SnapshotError(f"{path}: not a cudump summary ({err})") from None
    if not isinstance(data, dict):
        raise SnapshotError(f"{path}: not a cudump summary (not a JSON object)")
    return _counts(path, data, "kernels"), _counts(path, data, "graph_kernels")


def _counts(path: Path, data: dict[str, Any], key: str) -> dict[str, int]:
    value = data.get(key, {})
    if not isinstance(value, dict) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value.values()):
        raise SnapshotError(f"{path}: '{key}' should map kernel names to launch counts")
    return value


@dataclass(frozen=True)
class TraceLaunch:
    """A kernel launch of trace.jsonl (a `launch` or a `graph-kernel` record)."""

    kernel: str
    mangled: str
    shape: Shape
    captured: bool
    graph: bool


def _trace_records(path: Path) -> Iterator[TraceLaunch]:
    try:
        with path.open("rb") as f:
            lines = iter(f)
            number = 0
            line = next(lines, None)
            while line is not None:
                number += 1
                following = next(lines, None)
                record = _trace_record(path, number, line, last=following is None)
                if record is not None:
                    yield record
                line = following
    except OSError as err:
        raise SnapshotError(f"{path}: cannot read: {err.strerror or err}") from None


def _trace_record(path: Path, number: int, line: bytes, last: bool) -> TraceLaunch | None:
    if not line.strip():
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as err:
        if last and not line.endswith(b"\n"):
            return None            # cut short: the run was killed while writing it
        raise SnapshotError(f"{path}:{number}: not a trace record ({err})") from None
    if not isinstance(data, dict):
        raise SnapshotError(f"{path}:{number}: not a trace record (not a JSON object)")
    event = data.get("event")
    if event not in ("launch", "graph-kernel"):
        return None                # a graph launch: its kernels have records of their own
    kernel, mangled = data.get("kernel"), data.get("mangled", "")
    grid, block = data.get("grid"), data.get("block")
    if not isinstance(kernel, str) or not isinstance(mangled, str) or not _dims(grid) \
            or not _dims(block):
        raise SnapshotError(f"{path}:{number}: a launch record needs 'kernel', 'grid' and "
                            "'block'")
    return TraceLaunch(kernel, mangled, (tuple(grid), tuple(block)),
                       data.get("captured") is True, event == "graph-kernel")


def _dims(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 3 and all(
        isinstance(n, int) and not isinstance(n, bool) for n in value)


def format_shape(shape: Shape) -> str:
    grid, block = shape
    return f"({','.join(map(str, grid))}) / ({','.join(map(str, block))})"
