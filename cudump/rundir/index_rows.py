"""A run directory's launches, records, NaN/Inf reports and ranks as the rows of the columnar
index (index.py), read from its JSONL files, which stay the source of truth.

Every row names its process's rank (-1 for a process without one). A launch's place among
its process's collectives is its `collective` (launches/collectives.py) and `within`: how
many launches of its process came after that collective before it, so that a job's launches
order across ranks by (step, collective, within) (analysis/job_order.py).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cudump.launches.collectives import collective_op
from cudump.launches.scopes import Where
from cudump.rundir import reading
from cudump.rundir.layout import MANIFEST_FILE, TRACE_FILE
from cudump.rundir.manifest import SnapshotRecord, read_manifest
from cudump.rundir.runs import HostSource
from cudump.rundir.wheres import record_where

NO_RANK = -1      # a process without a rank, in the index


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass
class LaunchRow:
    """One launch (trace.jsonl's launch record; a manifest's launches where there is no
    trace)."""

    rank: int
    pid: int
    launch: int
    kernel: str
    op: str | None              # the launch's own collective operation, if it is one
    event: str                  # "launch" | "graph-kernel" | "record" (from the manifest)
    step: int | None
    collective: int | None
    collective_op: str | None
    within: int | None          # launches of its process since its collective
    layer: str | None
    pass_: str | None
    source: str | None
    scope: str | None           # the open scopes, outermost first, joined by " / "
    device: int | None
    graph_node: int | None = None   # a graph launch's kernel node: its node in the replay


@dataclass
class RecordRow:
    """One manifest record: a snapshot, digest or scan of one argument of one launch."""

    rank: int
    pid: int
    launch: int
    kernel: str
    arg: int
    phase: str
    status: str
    file: str | None
    dtype: str | None
    digest: str | None
    nonfinite: int | None
    step: int | None
    collective: int | None
    collective_op: str | None
    layer: str | None
    pass_: str | None
    source: str | None
    record: str                 # the whole record, as JSON


@dataclass
class ReportRow:
    """A NaN/Inf report: a buffer a launch left non-finite where it was not before. Where
    what it read came from a write of the program's from the host (a host-to-device copy or
    a memset, with no launch cudump scanned after it), that write produced it: `from_host`
    ("copy" | "memset"), its bytes and the launch it came before, and `from_arg`, the
    argument that read it."""

    rank: int
    pid: int
    launch: int
    kernel: str
    arg: int
    nonfinite: int
    elements: int | None
    origin: str | None          # "produced" | "propagated"
    step: int | None
    collective: int | None
    collective_op: str | None
    within: int | None
    layer: str | None
    pass_: str | None
    source: str | None
    from_arg: int | None = None
    from_host: str | None = None       # "copy" | "memset": the host wrote what it read
    from_host_bytes: int | None = None
    from_host_launch: int | None = None     # the launch the host's write came before
    graph_node: int | None = None   # a graph launch's kernel node: its node in the replay

    @property
    def produced(self) -> bool:
        """Whether NaN/Inf begins here: the launch made it from finite inputs, or read it
        from a write of the host's (which is then its producer)."""
        return self.origin == "produced" or self.from_host is not None


@dataclass
class RankRow:
    """One process: how far it went, and its last launch (a rank that stopped launching
    collectives while the others went on is named by it)."""

    rank: int
    pid: int
    launches: int
    collectives: int            # collectives it launched
    last_launch: int | None
    last_kernel: str | None
    last_step: int | None
    last_collective: int | None
    last_collective_op: str | None
    reports: int
    first_report_launch: int | None


@dataclass
class RunRows:
    launches: list[LaunchRow] = field(default_factory=list)
    records: list[RecordRow] = field(default_factory=list)
    reports: list[ReportRow] = field(default_factory=list)
    ranks: list[RankRow] = field(default_factory=list)

    def table(self, name: str) -> list[Any]:
        return getattr(self, name)  # type: ignore[no-any-return]


def row_json(row: Any) -> str:
    """A row as the JSON object its table's columns read ("pass_" is "pass")."""
    data = asdict(row)
    if "pass_" in data:
        data["pass"] = data.pop("pass_")
    return json.dumps(data, separators=(",", ":"))


def _where_parts(where: Where) -> dict[str, Any]:
    return {"step": where.step, "collective": where.collective,
            "collective_op": where.collective_op, "layer": where.layer,
            "pass_": where.pass_, "source": where.source}


def _trace_launches(path: Path) -> Iterator[LaunchRow]:
    for line in reading.json_lines(path, torn_last=True, what="a trace record"):
        data = line.data
        if not isinstance(data, dict) or data.get("event") not in ("launch", "graph-kernel") \
                or data.get("captured") is True:    # captured into a graph: it did not run
            continue
        pid, launch, kernel = _int(data.get("pid")), _int(data.get("launch")), \
            _str(data.get("kernel"))
        if pid is None or launch is None or kernel is None:
            raise reading.line_error(path, line.number, "a launch record without its pid, "
                                     "launch or kernel")
        rank = _int(data.get("rank"))
        where = record_where(data)
        yield LaunchRow(rank=NO_RANK if rank is None else rank, pid=pid, launch=launch,
                        kernel=kernel, op=collective_op(kernel), event=data["event"],
                        within=None,
                        scope=" / ".join(where.scopes) or None,
                        device=_int(data.get("device")), **_where_parts(where),
                        graph_node=_int(data.get("node")) if data["event"] == "graph-kernel"
                        else None)


def _graph_node(extra: dict[str, Any]) -> int | None:
    """A manifest record's kernel node, where its launch ran as one of a graph launch."""
    return _int(extra.get("node")) if "graph" in extra else None


def _number_within(launches: list[LaunchRow]) -> None:
    """Each launch's place after its process's last collective (from 0), in launch order."""
    by_pid: dict[int, list[LaunchRow]] = defaultdict(list)
    for row in launches:
        by_pid[row.pid].append(row)
    for rows in by_pid.values():
        rows.sort(key=lambda r: (r.launch, r.graph_node or 0))
        current: int | None = -1
        within = 0
        for row in rows:
            if row.collective != current:
                current, within = row.collective, 0
            row.within = within
            within += 1


def _record_rows(records: list[SnapshotRecord]) -> list[RecordRow]:
    out = []
    for r in records:
        where = record_where(r.extra)
        out.append(RecordRow(
            rank=NO_RANK if r.rank is None else r.rank, pid=r.pid, launch=r.launch,
            kernel=r.kernel, arg=r.arg, phase=r.phase, status=r.status, file=r.file,
            dtype=r.dtype, digest=_str(r.extra.get("digest")),
            nonfinite=_int(r.extra.get("nonfinite")), record=r.to_json(),
            **_where_parts(where)))
    return out


def _report_rows(records: list[SnapshotRecord],
                 within: dict[tuple[int, int, int | None], int | None]) -> list[ReportRow]:
    out = []
    for r in records:
        count = _int(r.extra.get("nonfinite"))
        if count is None or count <= 0:
            continue
        origin = r.extra.get("origin")
        where = record_where(r.extra)
        host = (HostSource.from_field(r.extra.get("from_host")) if origin == "propagated"
                else None)
        out.append(ReportRow(
            rank=NO_RANK if r.rank is None else r.rank, pid=r.pid, launch=r.launch,
            kernel=r.kernel, arg=r.arg, nonfinite=count,
            elements=_int(r.extra.get("elements")),
            origin=origin if origin in ("produced", "propagated") else None,
            within=within.get((r.pid, r.launch, _graph_node(r.extra))), **_where_parts(where),
            from_arg=_int(r.extra.get("from_arg")) if origin == "propagated" else None,
            from_host=host.kind if host is not None else None,
            from_host_bytes=host.nbytes if host is not None else None,
            from_host_launch=host.before if host is not None else None,
            graph_node=_graph_node(r.extra)))
    return out


def _rank_rows(launches: list[LaunchRow], reports: list[ReportRow]) -> list[RankRow]:
    procs: dict[int, RankRow] = {}
    for row in sorted(launches, key=lambda r: (r.pid, r.launch)):
        rank = procs.get(row.pid)
        if rank is None:
            rank = procs[row.pid] = RankRow(row.rank, row.pid, 0, 0, None, None, None, None,
                                            None, 0, None)
        rank.launches += 1
        # The most any launch says were launched up to it (itself too, where it is one): all
        # of them where the trace has every launch.
        rank.collectives = max(rank.collectives,
                               (row.collective or 0) + (row.op is not None))
        rank.last_launch, rank.last_kernel, rank.last_step = row.launch, row.kernel, row.step
        rank.last_collective, rank.last_collective_op = row.collective, row.collective_op
    for report in sorted(reports, key=lambda r: (r.pid, r.launch)):
        rank = procs.get(report.pid)
        if rank is None:
            rank = procs[report.pid] = RankRow(report.rank, report.pid, 0, 0, None, None,
                                               None, None, None, 0, None)
        rank.reports += 1
        if rank.first_report_launch is None:
            rank.first_report_launch = report.launch
    return list(procs.values())


def run_rows(run: Path, read_trace: bool = True) -> RunRows:
    """A run directory's rows. Its launches come from trace.jsonl; without one (or without
    `read_trace`: the index reads the trace with DuckDB), each launch the manifest records
    is one (and its `within` is unknown). RunFileError or SnapshotError for a file that
    cannot be read."""
    rows = RunRows()
    trace = run / TRACE_FILE
    if read_trace and reading.present(trace):
        rows.launches = list(_trace_launches(trace))
        _number_within(rows.launches)
    records: list[SnapshotRecord] = []
    if reading.present(run / MANIFEST_FILE):
        records = read_manifest(run)
    if not rows.launches and records:
        seen: dict[tuple[int, int, int | None], LaunchRow] = {}
        for r in records:
            key = (r.pid, r.launch, _graph_node(r.extra))
            if key not in seen:
                where = record_where(r.extra)
                seen[key] = LaunchRow(
                    rank=NO_RANK if r.rank is None else r.rank, pid=r.pid, launch=r.launch,
                    kernel=r.kernel, op=collective_op(r.kernel), event="record", within=None,
                    scope=" / ".join(where.scopes) or None, device=r.device,
                    **_where_parts(where), graph_node=key[2])
        rows.launches = list(seen.values())
    within = {(r.pid, r.launch, r.graph_node): r.within for r in rows.launches}
    rows.records = _record_rows(records)
    rows.reports = _report_rows(records, within)
    rows.ranks = _rank_rows(rows.launches, rows.reports)
    return rows
