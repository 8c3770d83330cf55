"""A job's columnar index (cudump/rundir/index.py) and `cudump query`: two ranks on the
stand-in driver as two nodes of one job (tests/fakecuda/progs/collectives.c), and simulated
jobs (bench/job_index.py). The Parquet files are read back by a second engine (pyarrow's
dataset reader, with the Hive partitioning), not by DuckDB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudump.analysis.job_order import (
    first_divergent,
    job_order_lines,
    read_job,
    read_job_indexed,
)
from cudump.cli import main
from cudump.rundir.index import DATA_FILE, TABLES
from cudump.rundir.job import open_job

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from job_index import FIRST_NONFINITE, Plant, make_job  # noqa: E402

pa_dataset = pytest.importorskip("pyarrow.dataset")
pytest.importorskip("duckdb")


def _query(path: Path, sql: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str],
                                                                                str]:
    status = main(["query", str(path), sql])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


@pytest.fixture
def two_rank_job(cudump_run, fake, tmp_path: Path) -> Path:
    """Rank 0 on node n0; rank 1 on node n1 leaves NaN in layers.1 of step 1 and stops
    launching all-reduces after its fourth."""
    job = tmp_path / "job"
    open_job(job)
    for rank, node in ((0, "n0"), (1, "n1")):
        extra = ["1", "1"] if rank == 1 else []
        env = {"RANK": str(rank)} | ({"COLLECTIVES_HANG": "4"} if rank == 1 else {})
        ran = cudump_run([str(fake.programs["collectives"]), "2", "3", *extra],
                         "--check-nan", "--trace", run_dir=job / "nodes" / node,
                         env_extra=env)
        assert ran.returncode == 0, ran.stderr
    return job


def test_job_of_two_nodes(two_rank_job: Path, capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    job = two_rank_job
    # Each node wrote its partitions at its run's end: a file per table its rank has rows
    # of (rank 0 left no NaN: no records, no reports).
    written = {(p.parts[-5], p.parts[-3], p.parts[-2])
               for p in (job / "index").glob(f"*/job=job/node=*/rank=*/{DATA_FILE}")}
    assert written == {(table, f"node={node}", f"rank={rank}") for table in TABLES
                       for node, rank in (("n0", 0), ("n1", 1))} - {
        ("records", "node=n0", "rank=0"), ("reports", "node=n0", "rank=0")}
    status, lines, err = _query(job, FIRST_NONFINITE, capsys)
    assert status == 0, err
    head = lines[0].split()
    row = dict(zip(head, lines[1].split(), strict=False))
    assert (row["rank"], row["node"], row["step"], row["collective"], row["layer"]) == \
        ("1", "n1", "1", "4", "layers.1")
    assert lines[-1] == "1 row"
    # One row per launch, with its place among the collectives.
    status, lines, _ = _query(job, "SELECT rank, count(*), max(collective), count(op) "
                                   "FROM launches GROUP BY rank ORDER BY rank", capsys)
    assert [ln.split() for ln in lines[1:3]] == [["0", "12", "5", "6"],
                                                  ["1", "10", "4", "4"]]
    # cudump stats JOB: the first non-finite launch, and the rank that stopped.
    lines = job_order_lines(job)
    assert lines[1] == ("first non-finite: rank 1 (node n1), launch 9 of vecAdd in layers.1 "
                        "(forward, step 1, between all-reduce 4 and 5): 1 of 1024 elements "
                        "of arg 2 non-finite (produced)")
    assert lines[2].startswith("stopped: rank 1 (node n1) stopped launching collectives "
                               "after 4 while others reached 6; its last launch: launch 10 "
                               "of vecAdd")
    status = main(["stats", str(job)])
    assert status == 0 and "first non-finite: rank 1 (node n1)" in capsys.readouterr().out

    # Without DuckDB, stats reads the JSONL files themselves, and says the same.
    import cudump.rundir.index

    monkeypatch.setattr(cudump.rundir.index, "has_duckdb", lambda: False)
    assert job_order_lines(job) == lines


def test_index_says_what_the_jsonl_readers_say(two_rank_job: Path) -> None:
    """The index reads trace.jsonl with DuckDB; index_rows.run_rows reads it in Python (for
    stats without DuckDB): their launches and ranks agree, row for row."""
    from cudump.rundir.index import COLUMNS, opened
    from cudump.rundir.index_rows import row_json, run_rows

    with opened(two_rank_job) as con:
        for table in ("launches", "ranks", "reports"):
            names = list(COLUMNS[table])
            listed = ", ".join(f'"{n}"' for n in names)
            indexed = sorted(tuple(row) for row in con.execute(
                f"SELECT {listed} FROM {table}").fetchall())
            python = []
            for node in ("n0", "n1"):
                for row in run_rows(two_rank_job / "nodes" / node).table(table):
                    data = json.loads(row_json(row))
                    python.append(tuple(data[n] for n in names))
            assert indexed == sorted(python), table


def test_second_engine_reads_the_files(two_rank_job: Path) -> None:
    """pyarrow's dataset reader, given only the folder and the Hive layout."""
    launches = pa_dataset.dataset(two_rank_job / "index" / "launches", format="parquet",
                                  partitioning="hive").to_table()
    assert launches.num_rows == 22
    columns = set(launches.column_names)
    assert {"job", "node", "rank", "pid", "launch", "step", "collective", "kernel", "layer",
            "pass", "source"} <= columns
    ranks = sorted(set(launches.column("rank").to_pylist()))
    assert ranks == [0, 1]
    reports = pa_dataset.dataset(two_rank_job / "index" / "reports", format="parquet",
                                 partitioning="hive").to_table().to_pylist()
    assert [(r["node"], r["rank"], r["step"], r["collective"], r["layer"]) for r in reports] \
        == [("n1", 1, 1, 4, "layers.1")]


def test_query_rebuilds_what_is_stale_or_missing(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "sim", 8, steps=2, layers=2, plant=Plant(5, 1, 1))
    count = "SELECT count(*) AS n FROM launches"
    status, lines, err = _query(job, count, capsys)
    assert status == 0, err
    assert lines[1].strip() == str(8 * 2 * 2 * 2)
    # A node's JSONL grows (newer than its partitions): rewritten.
    trace = job / "nodes" / "node0" / "trace.jsonl"
    first = trace.read_text().splitlines()[0]
    record = json.loads(first) | {"launch": 999}
    with trace.open("a") as out:
        out.write(json.dumps(record) + "\n")
    stamp = os.stat(trace).st_mtime_ns + 10**9
    os.utime(trace, ns=(stamp, stamp))
    status, lines, _ = _query(job, count, capsys)
    assert lines[1].strip() == str(8 * 2 * 2 * 2 + 1)
    # A partition removed: written again.
    gone = job / "index" / "reports" / "job=sim" / "node=node0" / "rank=5" / DATA_FILE
    gone.unlink()
    status, lines, _ = _query(job, "SELECT rank FROM reports", capsys)
    assert gone.is_file() and lines[1].strip() == "5"


def test_a_node_that_had_nothing_is_read_again(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job"
    open_job(job)
    (job / "nodes" / "a").mkdir()
    trace = job / "nodes" / "a" / "trace.jsonl"
    trace.write_text("")
    assert _query(job, "SELECT count(*) AS n FROM launches", capsys)[1][1].strip() == "0"
    # Launches come (a line that is no record, and one cut short, left out).
    trace.write_text('{"event":"launch","launch":1,"pid":5,"kernel":"k"}\nnot json\n'
                     '{"event":"launch","launch":2,"pid":5,"kernel":"k"}\n{"event":"la')
    stamp = os.stat(trace).st_mtime_ns + 10**9
    os.utime(trace, ns=(stamp, stamp))
    status, lines, err = _query(job, "SELECT rank, launches, last_launch FROM ranks", capsys)
    assert status == 0, err
    assert lines[1].split() == ["-1", "2", "2"]


def test_bad_sql_and_bad_paths_are_one_line(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "sim", 2, steps=1, layers=1)
    status, lines, err = _query(job, "SELEC rank FROM launches", capsys)
    assert status == 2 and lines == []
    assert err.startswith("cudump: error: query: Parser Error: syntax error") and \
        err.count("\n") == 1, err
    status, _, err = _query(job, "SELECT * FROM nothing_here", capsys)
    assert status == 2 and err.count("\n") == 1 and "nothing_here" in err
    # A result longer than --max-rows is cut, and says so.
    assert main(["query", str(job), "SELECT launch FROM launches ORDER BY launch",
                 "--max-rows", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["launch", "     1", "1 row (the first 1; --max-rows)"]
    status, _, err = _query(tmp_path / "nowhere", "SELECT 1", capsys)
    assert status == 2 and err.strip() == (f"cudump: error: {tmp_path / 'nowhere'}: not a "
                                           "job or run directory")


def test_a_run_of_its_own_is_queried_too(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "sim", 1, steps=1, layers=2)
    run = job / "nodes" / "node0"
    status, lines, err = _query(run, "SELECT job, node, rank, count(*) FROM launches "
                                     "GROUP BY ALL", capsys)
    assert status == 0, err
    assert lines[1].split() == ["node0", "local", "0", "4"]
    # No record, no report anywhere: the views still have their columns, and no rows.
    status, lines, err = _query(run, "SELECT count(*) AS n, max(nonfinite) AS m FROM reports",
                                capsys)
    assert status == 0, err
    assert lines[1].split() == ["0", "-"]


def test_without_duckdb_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    job = make_job(tmp_path / "sim", 1, steps=1, layers=1)
    monkeypatch.setitem(sys.modules, "duckdb", None)       # import duckdb fails
    status, _, err = _query(job, "SELECT 1", capsys)
    assert status == 2
    assert err == "cudump: error: cudump query needs DuckDB: pip install 'cudump[job]'\n"


def test_default_path_imports_no_duckdb() -> None:
    code = ("import sys; import cudump.cli, cudump.controller.session, cudump.commands.run, "
            "cudump.commands.stats, cudump.commands.query; "
            "assert 'duckdb' not in sys.modules, 'duckdb imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert done.returncode == 0, done.stderr


def test_simulated_job_first_nonfinite_and_hang(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """16 ranks on two nodes: rank 11 goes non-finite first, rank 3 stops after its fifth
    all-reduce; the query, stats and the order all say so."""
    job = make_job(tmp_path / "sim", 16, steps=3, layers=4, plant=Plant(11, 2, 1),
                   hang=(3, 5))
    status, lines, err = _query(job, FIRST_NONFINITE, capsys)
    assert status == 0, err
    row = dict(zip(lines[0].split(), lines[1].split(), strict=False))
    assert (row["rank"], row["node"], row["step"], row["collective"]) == \
        ("11", "node1", "2", "9")
    for order in (read_job(job), read_job_indexed(job)):
        first = order.first_nonfinite()
        assert first is not None and first.report.rank == 11
        assert [(h.rank.rank, h.rank.collectives, h.most) for h in order.hangs()] == \
            [(3, 5, 12)]
    status, lines, _ = _query(job, "SELECT rank, collectives FROM ranks WHERE collectives < "
                                   "(SELECT max(collectives) FROM ranks)", capsys)
    assert [ln.split() for ln in lines[1:-1]] == [["3", "5"]]


def test_first_divergent_between_two_jobs(tmp_path: Path) -> None:
    same = make_job(tmp_path / "a", 8, steps=2, layers=3)
    again = make_job(tmp_path / "b", 8, steps=2, layers=3)
    assert first_divergent(same, again) is None
    hung = make_job(tmp_path / "c", 8, steps=2, layers=3, hang=(6, 4))
    divergence = first_divergent(same, hung)
    assert divergence is not None
    assert divergence.line() == ("first divergence: rank 6 (node node0) in step 1, between "
                                 "all-reduce 4 and 5: launch 10 of "
                                 "ncclDevKernel_AllReduce_Sum_f32_RING_LL in the first, launch "
                                 "10 of vecAdd in the second")


def test_hangs_leave_out_processes_that_are_no_rank() -> None:
    from cudump.analysis.job_order import JobOrder
    from cudump.rundir.index_rows import RankRow

    def proc(rank: int, pid: int, collectives: int) -> RankRow:
        return RankRow(rank, pid, 10, collectives, 10, "vecAdd", 1, collectives,
                       "all-reduce" if collectives else None, 0, None)

    order = JobOrder([], [("a", proc(0, 1, 6)), ("a", proc(1, 2, 0)), ("a", proc(-1, 3, 0)),
                          ("b", proc(-1, 4, 2))], {}, {})
    # Rank 1 launched none while rank 0 launched 6; of the processes without a rank, only
    # the one that launched some and stopped (pid 4) is named.
    assert [(h.node, h.rank.pid) for h in order.hangs()] == [("b", 4), ("a", 2)]
    # Nobody launched a collective: nobody stopped.
    assert JobOrder([], [("a", proc(0, 1, 0))], {}, {}).hangs() == []


def test_bench_prints_its_numbers(tmp_path: Path) -> None:
    """bench/job_index.py at a small size: a row per job size, the first non-finite rank
    found (two thirds of the way through the ranks), the disk per rank."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "job_index.py"), "--ranks",
                           "3,8", "--steps", "2", "--layers", "2", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert [(r[0], r[3]) for r in rows] == [("3", "2"), ("8", "5")]
    for row in rows:
        build_s, query_s, index_kib, jsonl_kib = map(float, (row[1], row[2], row[4], row[5]))
        assert build_s > 0 and query_s > 0 and index_kib > 0 and jsonl_kib > 0
    assert (tmp_path / "job8" / "index" / "reports").is_dir()


def test_first_divergent_digest_between_two_jobs(cudump_run, fake, tmp_path: Path) -> None:
    """Two jobs of two stand-in ranks with --digest; in the second, rank 1's layers.1 of
    step 1 reads an input the host changed: that launch's input digest is the first place
    they differ."""
    jobs = []
    for name, plant in (("a", []), ("b", ["1", "1"])):
        job = tmp_path / name
        open_job(job)
        for rank in (0, 1):
            ran = cudump_run([str(fake.programs["collectives"]), "2", "3",
                              *(plant if rank == 1 else [])], "--digest", "--trace",
                             run_dir=job / "nodes" / f"n{rank}", env_extra={"RANK": str(rank)})
            assert ran.returncode == 0, ran.stderr
        jobs.append(job)
    divergence = first_divergent(jobs[0], jobs[1])
    assert divergence is not None
    line = divergence.line()
    assert line.startswith("first divergence: rank 1 (node n1) in layers.1 (forward, step 1, "
                           "between all-reduce 4 and 5): launch 9 of vecAdd: arg 0 before "
                           "differs ("), line
    status = main(["stats", str(jobs[0]), "--against", str(jobs[1])])
    assert status == 0


def test_an_index_that_cannot_be_written_is_a_warning(cudump_run, fake,
                                                      tmp_path: Path) -> None:
    """The program's exit status and the run's files stand; the warning says why."""
    job = tmp_path / "job"
    open_job(job)
    (job / "index").write_text("not a folder")
    ran = cudump_run([str(fake.programs["collectives"]), "1", "2"], "--trace",
                     run_dir=job / "nodes" / "n0")
    assert ran.returncode == 0, ran.stderr
    warning = [ln for ln in ran.stderr.splitlines() if "index was not written" in ln]
    assert len(warning) == 1 and "cannot write the index in" in warning[0], ran.stderr
    assert (job / "nodes" / "n0" / "trace.jsonl").is_file()


@pytest.mark.parametrize("graph", [False, True], ids=["launches", "graph-replays"])
def test_index_numbers_launches_as_the_jsonl_reader_does(cudump_run, fake, tmp_path: Path,
                                                          graph: bool) -> None:
    """A launch's step, collective and `within` are numbered twice: in SQL where DuckDB
    reads trace.jsonl (index._launches_from_trace), in Python where it is not installed
    (index_rows._number_within). Both, on one job of two ranks whose second keeps
    launching after its collectives stop, and on graph replays whose kernel nodes are
    collectives, give every launch the same numbers."""
    job = tmp_path / "job"
    open_job(job)
    for rank in (0, 1):
        env = {"RANK": str(rank), "COLLECTIVES_HANG": "3" if rank else "99"}
        if graph:
            env["COLLECTIVES_GRAPH"] = "1"
        ran = cudump_run([str(fake.programs["collectives"]), "3", "2"], "--trace",
                         run_dir=job / "nodes" / f"n{rank}", env_extra=env)
        assert ran.returncode == 0, ran.stderr
    python = sorted((ln.rank, ln.launch, ln.graph_node, ln.step, ln.collective, ln.within)
                    for launches in read_job(job, with_launches=True).launches.values()
                    for ln in launches)
    from cudump.rundir.index import opened
    with opened(job) as con:
        sql = sorted(tuple(row) for row in con.execute(
            "SELECT rank, launch, graph_node, step, collective, within FROM launches"
        ).fetchall())
    assert len(python) >= 12 and python == sql
    assert any(w for *_, w in python)                 # not every launch the first of its run
    if graph:
        assert any(node is not None for _, _, node, *_ in python)
