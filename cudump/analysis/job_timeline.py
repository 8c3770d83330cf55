"""`cudump show RUN|JOB --timeline FILE`: a run's, or a whole job's, launches as one
trace-event JSON (Perfetto, chrome://tracing), from the trace.jsonl of each run (--trace).

The nodes of a job have clocks of their own, and the shim's events carry no timestamp: the
time axis here is each process's launch number (launch N at N µs), so the ranks of a
data-parallel job, which launch the same kernels in the same order, line up launch by
launch whichever node ran them. A process is a track group named by its node, rank and
pid; each stream a track in it; each launch a slice; each NaN/Inf report of the run's
manifest an instant at its launch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudump.analysis.job_runs import node_runs
from cudump.errors import SnapshotError
from cudump.rundir import files as runfiles
from cudump.rundir import reading
from cudump.rundir.job import is_job
from cudump.rundir.layout import MANIFEST_FILE, TRACE_FILE
from cudump.rundir.manifest import read_manifest
from cudump.rundir.runs import short_kernel_name

NOTE = ("ts: the launch number in its process (launch N at N us), not a time: the ranks' "
        "launches line up by their order, whichever node ran them")
SLICE_US = 0.8


@dataclass
class _Track:
    """One process of one node, as the timeline draws it."""

    pid: int                      # the timeline's own, unique across nodes
    streams: dict[str, int]       # stream -> tid


@dataclass(frozen=True)
class TimelineWritten:
    path: Path
    processes: int
    launches: int
    reports: int


def _runs(path: Path) -> list[tuple[str | None, Path]]:
    if is_job(path):
        return [(n.name, n.run) for n in node_runs(path)]
    return [(None, path)]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def timeline_events(path: Path) -> tuple[list[dict[str, Any]], int, int, int]:
    """The events, and how many processes, launches and NaN/Inf reports they hold;
    SnapshotError where no run has a trace."""
    events: list[dict[str, Any]] = []
    tracks: dict[tuple[str | None, int], _Track] = {}
    launches = reports = 0
    runs = _runs(path)
    traced = [(node, run) for node, run in runs if reading.present(run / TRACE_FILE)]
    if not traced:
        raise SnapshotError(f"{reading.shown(path)}: no {TRACE_FILE} in "
                            f"{'any node' if len(runs) > 1 else 'the run'}: the timeline "
                            "needs a run made with --trace")

    def track(node: str | None, pid: int, rank: Any) -> _Track:
        found = tracks.get((node, pid))
        if found is None:
            found = tracks[(node, pid)] = _Track(len(tracks) + 1, {})
            who = [f"node {node}"] if node is not None else []
            if _whole(rank):
                who.append(f"rank {rank}")
            name = ", ".join(who + [f"pid {pid}"])
            events.append({"ph": "M", "name": "process_name", "pid": found.pid,
                           "args": {"name": name}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": found.pid,
                           "args": {"sort_index": found.pid}})
        return found

    for node, run in traced:
        for line in reading.json_lines(run / TRACE_FILE, torn_last=True, what="a trace record"):
            data = line.data
            if not isinstance(data, dict) or data.get("event") not in ("launch", "graph-kernel"):
                continue
            pid, launch, kernel = data.get("pid"), data.get("launch"), data.get("kernel")
            if not (_whole(pid) and _whole(launch) and isinstance(kernel, str)) \
                    or data.get("captured") is True:
                continue
            t = track(node, pid, data.get("rank"))
            stream = str(data.get("stream", "0x0"))
            tid = t.streams.get(stream)
            if tid is None:
                tid = t.streams[stream] = len(t.streams) + 1
                events.append({"ph": "M", "name": "thread_name", "pid": t.pid, "tid": tid,
                               "args": {"name": f"stream {stream}"}})
            events.append({"ph": "X", "name": short_kernel_name(kernel), "cat": "launch",
                           "pid": t.pid, "tid": tid, "ts": launch, "dur": SLICE_US,
                           "args": {"kernel": kernel, "launch": launch, "pid": pid,
                                    "node": node, "rank": data.get("rank")}})
            launches += 1
        if not reading.present(run / MANIFEST_FILE):
            continue
        for r in read_manifest(run):
            if "nonfinite" not in r.extra or (node, r.pid) not in tracks:
                continue
            t = tracks[(node, r.pid)]
            events.append({"ph": "i", "s": "p", "name": "NaN/Inf", "cat": "nan",
                           "pid": t.pid, "ts": r.launch,
                           "args": {"kernel": r.kernel, "launch": r.launch, "arg": r.arg,
                                    "nonfinite": r.extra.get("nonfinite"), "node": node,
                                    "rank": r.rank}})
            reports += 1
    return events, len(tracks), launches, reports


def write_timeline(path: Path, out: Path) -> TimelineWritten:
    """The run's or job's timeline, written whole to `out`."""
    events, processes, launches, reports = timeline_events(path)
    text = json.dumps({"traceEvents": events, "displayTimeUnit": "ns",
                       "otherData": {"note": NOTE}}, separators=(",", ":")) + "\n"
    runfiles.write_whole(out, lambda f: f.write(text.encode("utf-8")))
    return TimelineWritten(out, processes, launches, reports)
