"""The columnar index: a job's (or a run's) launches, records, NaN/Inf reports and ranks as
Parquet, one dataset per rank, that any engine reads (DuckDB here; Spark, Trino, pyarrow):

    JOB/index/TABLE/job=J/node=N/rank=R/data.parquet     TABLE: launches, records, reports,
                                                          ranks (index_rows.py's rows)

A rank has a file of a table where it has rows of it (most ranks have no NaN/Inf report, and
so no reports file); a table no rank has rows of reads as its columns and no rows.

The partition columns (job, node, rank) are in the paths only, in the Hive style every
engine reads. A run directory of its own is indexed the same way in RUN/index/, as job RUN's
node "local". JSONL stays the source of truth: a node's partitions are written at its run's
end, and rewritten (by `cudump query`) where any is missing or older than its node's files.

DuckDB (`pip install 'cudump[job]'`) writes and reads them; it is imported only here, inside
the functions that need it, never on a run's default path.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudump.errors import QueryError
from cudump.rundir import reading
from cudump.rundir.job import INDEX_DIR, NODES_DIR, JobError, is_job, job_name, node_runs
from cudump.rundir.layout import MANIFEST_FILE, SUMMARY_FILE, TRACE_FILE

if TYPE_CHECKING:
    from cudump.rundir.index_rows import RunRows

TABLES = ("launches", "records", "reports", "ranks")
DATA_FILE = "data.parquet"
BUILT_DIR = "_built"          # one file per node: the ranks of each table it wrote
NEEDS_DUCKDB = "cudump query needs DuckDB: pip install 'cudump[job]'"

# Each table's columns and their types (the files hold all but the partition columns).
_WHERE = {"step": "INTEGER", "collective": "INTEGER", "collective_op": "VARCHAR"}
_PLACE = {"layer": "VARCHAR", "pass": "VARCHAR", "source": "VARCHAR"}
COLUMNS: dict[str, dict[str, str]] = {
    "launches": {"rank": "INTEGER", "pid": "BIGINT", "launch": "BIGINT", "kernel": "VARCHAR",
                 "op": "VARCHAR", "event": "VARCHAR", **_WHERE, "within": "BIGINT",
                 **_PLACE, "scope": "VARCHAR", "device": "INTEGER", "graph_node": "BIGINT"},
    "records": {"rank": "INTEGER", "pid": "BIGINT", "launch": "BIGINT", "kernel": "VARCHAR",
                "arg": "INTEGER", "phase": "VARCHAR", "status": "VARCHAR", "file": "VARCHAR",
                "dtype": "VARCHAR", "digest": "VARCHAR", "nonfinite": "BIGINT", **_WHERE,
                **_PLACE, "record": "VARCHAR"},
    "reports": {"rank": "INTEGER", "pid": "BIGINT", "launch": "BIGINT", "kernel": "VARCHAR",
                "arg": "INTEGER", "nonfinite": "BIGINT", "elements": "BIGINT",
                "origin": "VARCHAR", **_WHERE, "within": "BIGINT", **_PLACE,
                "from_arg": "INTEGER", "from_host": "VARCHAR", "from_host_bytes": "BIGINT",
                "from_host_launch": "BIGINT", "graph_node": "BIGINT"},
    "ranks": {"rank": "INTEGER", "pid": "BIGINT", "launches": "BIGINT",
              "collectives": "BIGINT", "last_launch": "BIGINT", "last_kernel": "VARCHAR",
              "last_step": "INTEGER", "last_collective": "INTEGER",
              "last_collective_op": "VARCHAR", "reports": "BIGINT",
              "first_report_launch": "BIGINT"},
}
PARTITIONS = {"job": "VARCHAR", "node": "VARCHAR", "rank": "INTEGER"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def duckdb_module() -> Any:
    """DuckDB, or QueryError with the line that says how to install it."""
    try:
        import duckdb
    except ImportError:
        raise QueryError(NEEDS_DUCKDB) from None
    return duckdb


def has_duckdb() -> bool:
    return importlib.util.find_spec("duckdb") is not None


@dataclass(frozen=True)
class IndexedRun:
    """One run directory of what is indexed: a job's node, or a run of its own."""

    job: str
    node: str
    run: Path


@dataclass(frozen=True)
class Indexed:
    """What `cudump query PATH` reads: its runs and where their index lies."""

    root: Path              # PATH/index
    runs: list[IndexedRun]


def partition_value(text: str) -> str:
    """A job's or node's name as one safe path component (`job=NAME`)."""
    return _UNSAFE.sub("_", text) or "_"


def indexed(path: Path) -> Indexed:
    """A job directory's node runs, or a run directory as a job of one node."""
    try:
        nodes = node_runs(path)
    except JobError as err:
        raise QueryError(str(err)) from None
    job = partition_value(job_name(path) if is_job(path) else path.resolve().name)
    return Indexed(path / INDEX_DIR, [IndexedRun(job, n.name, n.run) for n in nodes])


def partition(root: Path, table: str, run: IndexedRun, rank: int) -> Path:
    return root / table / f"job={run.job}" / f"node={run.node}" / f"rank={rank}" / DATA_FILE


def _sources_mtime(run: Path) -> int:
    """The newest of the node's JSONL files (and summary), in ns."""
    newest = 0
    for name in (TRACE_FILE, MANIFEST_FILE, SUMMARY_FILE):
        with contextlib.suppress(OSError):
            newest = max(newest, (run / name).stat().st_mtime_ns)
    return newest


def _built_file(root: Path, run: IndexedRun) -> Path:
    return root / BUILT_DIR / f"{run.job}.{run.node}.json"


def _built(root: Path, run: IndexedRun) -> dict[str, list[int]] | None:
    """The ranks of each table the node's last build wrote, or None where it has none."""
    try:
        data = json.loads(_built_file(root, run).read_text())
    except (OSError, ValueError):
        return None
    tables = data.get("tables") if isinstance(data, dict) else None
    if not isinstance(tables, dict):
        return None
    # Written with other columns (an older cudump's): written again, whole.
    if data.get("columns") != _column_names():
        return None
    out: dict[str, list[int]] = {}
    for table in TABLES:
        ranks = tables.get(table)
        if not isinstance(ranks, list) or not all(isinstance(r, int) for r in ranks):
            return None
        out[table] = ranks
    return out


def _column_names() -> dict[str, list[str]]:
    """Each table's columns, as a node's build file records them."""
    return {table: list(columns) for table, columns in COLUMNS.items()}


def up_to_date(root: Path, run: IndexedRun) -> bool:
    """Every partition of the node is there and no older than its JSONL files."""
    built = _built(root, run)
    if built is None:
        return False
    newest = _sources_mtime(run.run)
    try:    # written after its partitions: a node with none is judged by it
        if _built_file(root, run).stat().st_mtime_ns < newest:
            return False
    except OSError:
        return False
    for table, ranks in built.items():
        for rank in ranks:
            try:
                if partition(root, table, run, rank).stat().st_mtime_ns < newest:
                    return False
            except OSError:
                return False
    return True


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _columns_sql(columns: dict[str, str]) -> str:
    return "{" + ", ".join(f"{_sql_text(name)}: {_sql_text(kind)}"
                           for name, kind in columns.items()) + "}"


# trace.jsonl's fields a launch row takes (what policy/trace.py writes).
_TRACE_FIELDS = {"event": "VARCHAR", "launch": "BIGINT", "pid": "BIGINT", "rank": "INTEGER",
                 "kernel": "VARCHAR", "step": "INTEGER", "collective": "INTEGER",
                 "collective_op": "VARCHAR", "layer": "VARCHAR", "pass": "VARCHAR",
                 "source": "VARCHAR", "scope": "VARCHAR[]", "device": "INTEGER",
                 "node": "BIGINT", "captured": "BOOLEAN"}


def _load(con: Any, table: str, rows: list[Any], work: Path) -> None:
    """Python rows (index_rows.py) as the temporary table cudump_TABLE."""
    from cudump.rundir.index_rows import row_json

    source = work / f"{table}.jsonl"
    with source.open("w", encoding="utf-8") as out:
        out.writelines(row_json(row) + "\n" for row in rows)
    con.execute(f"CREATE OR REPLACE TEMP TABLE cudump_{table} AS SELECT * FROM read_json("
                f"{_sql_text(str(source))}, format='newline_delimited', "
                f"columns={_columns_sql(COLUMNS[table])})")


def _launches_from_trace(con: Any, trace: Path) -> int:
    """trace.jsonl's launches as cudump_launches, read by DuckDB itself (a node's millions
    of launches in seconds, where reading them in Python took minutes); how many. A line
    that is not a launch record (a graph launch, a line cut short), or a launch captured
    into a graph (which did not run), is left out."""
    from cudump.launches.collectives import collective_op

    con.execute(f"CREATE OR REPLACE TEMP TABLE cudump_trace AS SELECT * FROM read_json("
                f"{_sql_text(str(trace))}, format='newline_delimited', ignore_errors=true, "
                f"columns={_columns_sql(_TRACE_FIELDS)}) WHERE event IN ('launch', "
                "'graph-kernel') AND pid IS NOT NULL AND launch IS NOT NULL AND kernel IS NOT "
                "NULL AND captured IS NOT TRUE")
    # Each kernel's own collective operation, named in Python (collectives.py) once a kernel.
    kernels = [row[0] for row in con.execute("SELECT DISTINCT kernel FROM cudump_trace")
               .fetchall()]
    con.execute("CREATE OR REPLACE TEMP TABLE cudump_ops (kernel VARCHAR, op VARCHAR)")
    ops = [(k, op) for k in kernels if (op := collective_op(k)) is not None]
    if ops:
        con.executemany("INSERT INTO cudump_ops VALUES (?, ?)", ops)
    # A launch's within: its place after its process's last collective (collective only
    # grows with the launch number, and a graph launch's kernel nodes with their node, so a
    # process's launches of one collective are one run).
    con.execute(
        "CREATE OR REPLACE TEMP TABLE cudump_launches AS SELECT coalesce(t.rank, -1) AS rank, "
        "t.pid, t.launch, t.kernel, o.op, t.event, CASE WHEN t.step >= 0 THEN t.step END AS "
        "step, CASE WHEN t.collective >= 0 THEN t.collective END AS collective, CASE WHEN "
        "t.collective >= 0 THEN t.collective_op END AS collective_op, row_number() OVER "
        "(PARTITION BY t.pid, t.collective ORDER BY t.launch, coalesce(t.node, 0)) - 1 AS "
        "within, t.layer, "
        "t.\"pass\", CASE WHEN t.source LIKE '%:%' THEN t.source END AS source, "
        "nullif(array_to_string(t.scope, ' / '), '') AS scope, t.device, CASE WHEN t.event = "
        "'graph-kernel' THEN t.node END AS graph_node FROM cudump_trace t "
        "LEFT JOIN cudump_ops o USING (kernel)")
    con.execute("DROP TABLE cudump_trace")
    return int(con.execute("SELECT count(*) FROM cudump_launches").fetchone()[0])


# A process's row of `ranks`, from its launches and reports (index_rows._rank_rows says the
# same in Python: collectives is the most any launch says were launched up to it).
_RANKS_SQL = """
CREATE OR REPLACE TEMP TABLE cudump_ranks AS
WITH l AS (
  SELECT rank, pid, count(*) AS launches,
         max(coalesce(collective, 0) + CASE WHEN op IS NULL THEN 0 ELSE 1 END) AS collectives,
         max(launch) AS last_launch, arg_max_null(kernel, launch) AS last_kernel,
         arg_max_null(step, launch) AS last_step,
         arg_max_null(collective, launch) AS last_collective,
         arg_max_null(collective_op, launch) AS last_collective_op
  FROM cudump_launches GROUP BY rank, pid),
r AS (SELECT rank, pid, count(*) AS reports, min(launch) AS first_report_launch
      FROM cudump_reports GROUP BY rank, pid)
SELECT coalesce(l.rank, r.rank) AS rank, coalesce(l.pid, r.pid) AS pid,
       coalesce(l.launches, 0) AS launches, coalesce(l.collectives, 0) AS collectives,
       l.last_launch, l.last_kernel, l.last_step, l.last_collective, l.last_collective_op,
       coalesce(r.reports, 0) AS reports, r.first_report_launch
FROM l FULL OUTER JOIN r ON l.rank = r.rank AND l.pid = r.pid
"""


def write_node(con: Any, root: Path, run: IndexedRun, rows: RunRows, trace: Path | None
               ) -> None:
    """The node's partitions: a file per table and rank that has rows of it (a rank without
    NaN/Inf reports has no reports file, so a query of the reports reads only the ranks that
    have some), each written under a temporary name and renamed. `rows`: the manifest's
    (index_rows.run_rows without the trace); `trace`: the node's trace.jsonl, if any."""
    written: dict[str, list[int]] = {}
    before = _built(root, run) or {}
    work = Path(tempfile.mkdtemp(prefix=".cudump-index-", dir=root))
    try:
        _load(con, "records", rows.records, work)
        _load(con, "reports", rows.reports, work)
        if trace is None or not _launches_from_trace(con, trace):
            _load(con, "launches", rows.launches, work)     # the manifest's launches
        else:
            con.execute("UPDATE cudump_reports SET within = l.within FROM cudump_launches l "
                        "WHERE l.pid = cudump_reports.pid AND l.launch = cudump_reports.launch "
                        "AND l.graph_node IS NOT DISTINCT FROM cudump_reports.graph_node")
        con.execute(_RANKS_SQL)
        for table in TABLES:
            columns = COLUMNS[table]
            ranks = written[table] = [row[0] for row in con.execute(
                f"SELECT DISTINCT rank FROM cudump_{table} ORDER BY rank").fetchall()]
            # Ranks whose rows of this table the node no longer has: their files go.
            for old in set(before.get(table, ())) - set(ranks):
                shutil.rmtree(partition(root, table, run, old).parent, ignore_errors=True)
            kept = ", ".join(f'"{c}"' for c in columns if c != "rank")
            order = "pid, launch" if "launch" in columns else "pid"
            for rank in ranks:
                target = partition(root, table, run, rank)
                target.parent.mkdir(parents=True, exist_ok=True)
                temporary = target.with_name(f".{DATA_FILE}.{os.getpid()}")
                con.execute(f"COPY (SELECT {kept} FROM cudump_{table} WHERE rank = {int(rank)} "
                            f"ORDER BY {order}) TO {_sql_text(str(temporary))} "
                            "(FORMAT parquet)")
                os.replace(temporary, target)
        for table in TABLES:
            con.execute(f"DROP TABLE IF EXISTS cudump_{table}")
        built = _built_file(root, run)
        built.parent.mkdir(parents=True, exist_ok=True)
        built.write_text(json.dumps({"tables": written, "columns": _column_names()}) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build(con: Any, target: Indexed, root: Path | None = None, force: bool = False) -> int:
    """Writes the partitions of every node that lacks them or whose files are newer, under
    `root` (target.root unless given); how many nodes were written."""
    root = root or target.root
    written = 0
    for run in target.runs:
        if not force and up_to_date(root, run):
            continue
        # Read only where a node is written (a query on an index up to date imports no numpy).
        from cudump.rundir.index_rows import run_rows

        duckdb = duckdb_module()
        try:
            root.mkdir(parents=True, exist_ok=True)
            trace = run.run / TRACE_FILE
            present = reading.present(trace)
            write_node(con, root, run, run_rows(run.run, read_trace=not present),
                       trace if present else None)
        except OSError as err:
            raise QueryError(f"cannot write the index in {reading.shown(root)}: "
                             f"{err.strerror or err}") from None
        except duckdb.Error as err:
            raise QueryError(f"cannot write the index of {reading.shown(run.run)}: "
                             f"{first_line(err)}") from None
        written += 1
    return written


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _glob(root: Path, table: str) -> str:
    return str(root / table / "job=*" / "node=*" / "rank=*" / DATA_FILE)


def create_views(con: Any, root: Path) -> None:
    """The views launches, records, reports and ranks over the Parquet under `root`."""
    hive = "{" + ", ".join(f"'{k}': '{v}'" for k, v in PARTITIONS.items()) + "}"
    for table in TABLES:
        pattern = _glob(root, table)
        if any((root / table).glob(f"job=*/node=*/rank=*/{DATA_FILE}")):
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT job, node, rank, * EXCLUDE "
                        f"(job, node, rank) FROM read_parquet({_sql_text(pattern)}, "
                        f"hive_partitioning=true, hive_types={hive})")
        else:   # nothing indexed yet: the table's columns, no rows
            cols = {"job": "VARCHAR", "node": "VARCHAR", **COLUMNS[table]}
            listed = ", ".join(f'CAST(NULL AS {kind}) AS "{name}"' for name, kind in cols.items())
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT {listed} LIMIT 0")


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Any]:
    """A DuckDB connection whose views read PATH's index, brought up to date first. Where
    the index cannot be written beside the runs (a read-only job), it is built in a
    temporary folder for this connection only."""
    duckdb = duckdb_module()
    target = indexed(path)
    con = duckdb.connect(":memory:")
    scratch: Path | None = None
    try:
        try:
            build(con, target)
            root = target.root
        except QueryError:
            if os.access(target.root if target.root.exists() else path, os.W_OK):
                raise
            scratch = Path(tempfile.mkdtemp(prefix="cudump-index-"))
            build(con, target, scratch, force=True)
            root = scratch
        create_views(con, root)
        yield con
    finally:
        con.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def index_at_end(run_dir: Path) -> Path | None:
    """At a run's end: a job's node writes its partitions, where DuckDB is installed (a run
    of its own is indexed when first queried). The index's folder, or None."""
    nodes = run_dir.parent
    if nodes.name != NODES_DIR or not is_job(nodes.parent) or not has_duckdb():
        return None
    target = indexed(nodes.parent)
    mine = [r for r in target.runs if r.run.resolve() == run_dir.resolve()]
    if not mine:
        return None
    duckdb = duckdb_module()
    con = duckdb.connect(":memory:")
    try:
        build(con, Indexed(target.root, mine), force=True)
    finally:
        con.close()
    return target.root
