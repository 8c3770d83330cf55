"""Aligned text tables, and the rows of `cudump ls`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cudump.console import printable
from cudump.rundir.blobs import BLOB_FIELD
from cudump.rundir.runs import Snapshot, short_kernel_name
from cudump.rundir.wheres import record_where


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
# cudump ls


def snapshot_rows(snapshots: Sequence[Snapshot], full_names: bool = False) -> list[list[str]]:
    rows = []
    for s in snapshots:
        r = s.record
        name = r.kernel if full_names else fit(short_kernel_name(r.kernel), 48)
        shape = "x".join(str(n) for n in r.shape) if r.shape else "-"
        if s.ok and BLOB_FIELD in r.extra:
            where = str(r.extra[BLOB_FIELD])       # a job's: bytes stored once (rundir.blobs)
        elif s.ok and r.file:
            where = r.file
        elif s.ok and s.digest is not None:
            where = f"digest {s.digest.value}"
        elif s.ok and s.nan_report is not None:
            origin = s.nan_report.origin_short()
            where = s.nan_report.describe() + (f", {origin}" if origin else "")
        else:
            where = f"error: {s.problem or 'not captured'}"
        rows.append([str(s.index), str(r.pid), str(r.launch), name, str(r.occurrence),
                     str(r.arg), r.type or "-", r.phase, r.dtype or "-", shape, where])
    return rows


def with_rank_column(snapshots: Sequence[Snapshot], headers: list[str], right: list[bool],
                     rows: list[list[str]]) -> tuple[list[str], list[bool], list[list[str]]]:
    """The table with a `rank` column after `pid` (ranks of processes started by torchrun,
    mpirun, srun; '-' for a process without one)."""
    at = headers.index("pid") + 1
    ranks = ["-" if s.record.rank is None else str(s.record.rank) for s in snapshots]
    return (headers[:at] + ["rank"] + headers[at:], right[:at] + [True] + right[at:],
            [row[:at] + [rank] + row[at:] for row, rank in zip(rows, ranks, strict=True)])


def with_node_column(snapshots: Sequence[Snapshot], headers: list[str], right: list[bool],
                     rows: list[list[str]]) -> tuple[list[str], list[bool], list[list[str]]]:
    """A job's table with a `node` column after `rank` where there is one, else after
    `pid` (pids of two nodes may be equal)."""
    at = headers.index("rank" if "rank" in headers else "pid") + 1
    nodes = [s.job_node or "-" for s in snapshots]
    return (headers[:at] + ["node"] + headers[at:], right[:at] + [False] + right[at:],
            [row[:at] + [node] + row[at:] for row, node in zip(rows, nodes, strict=True)])


def with_where_column(snapshots: Sequence[Snapshot], headers: list[str], right: list[bool],
                      rows: list[list[str]]) -> tuple[list[str], list[bool], list[list[str]]]:
    """The table with a last `where` column: where each record's launch was made, in the
    program's terms (`in layer3.0.conv1 (forward, step 2) at train.py:57`; '-' unknown)."""
    wheres = [record_where(s.record.extra).text() or "-" for s in snapshots]
    return (headers + ["where"], right + [False],
            [row + [where] for row, where in zip(rows, wheres, strict=True)])


LS_HEADERS = ["#", "pid", "launch", "kernel", "occ", "arg", "type", "phase", "dtype", "shape",
              "file"]
LS_RIGHT = [True, True, True, False, True, True, False, False, False, False, False]
