"""A NaN the host copied into device memory, in a job's order (`cudump stats JOB`'s first
non-finite): the report of the launch that read it is the host copy's, its producer, not a
launch that only carried NaN on. Two ranks on the stand-in driver as two nodes of one job
(tests/fakecuda/progs/collectives.c), each planting its NaN at the same place (step 1,
layers.1, after the fourth all-reduce): rank 0's comes from a host-to-device copy, rank 1's
vecAdd makes it from finite inputs. Both are producers at one place: the lower rank is
first."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudump.analysis.job_order import job_order_lines
from cudump.rundir.job import open_job

FIRST = ("first non-finite: rank 0 (node n0), a host-to-device copy of 4 bytes before launch "
         "9, read as arg 0 by launch 9 of vecAdd in layers.1 (forward, step 1, between "
         "all-reduce 4 and 5): 1 of 1024 elements of arg 2 non-finite (produced by the host "
         "copy)")


@pytest.fixture
def host_nan_job(cudump_run, fake, tmp_path: Path) -> Path:
    job = tmp_path / "job"
    open_job(job)
    for rank, node in ((0, "n0"), (1, "n1")):
        env = {"RANK": str(rank)} | ({"COLLECTIVES_HOST_NAN": "1"} if rank == 0 else {})
        ran = cudump_run([str(fake.programs["collectives"]), "2", "3", "1", "1"],
                         "--check-nan", "--trace", run_dir=job / "nodes" / node,
                         env_extra=env)
        assert ran.returncode == 0, ran.stderr
        said = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf:")]
        assert len(said) == 1, ran.stderr
        assert "in layers.1 (forward, step 1, between all-reduce 4 and 5)" in said[0]
        if rank == 0:       # the single run's report: carried on from the copy
            assert said[0].endswith("propagated: arg 0 was already non-finite (from a "
                                    "host-to-device copy of 4 bytes (cuMemcpyHtoD) before "
                                    "launch 9)"), said[0]
        else:
            assert said[0].endswith("its inputs were finite"), said[0]
    return job


def test_a_host_copys_nan_is_its_own_producer_in_the_jobs_order(
        host_nan_job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cudump.rundir.index

    # From the JSONL files, and from the columnar index where DuckDB is installed: the same.
    monkeypatch.setattr(cudump.rundir.index, "has_duckdb", lambda: False)
    lines = job_order_lines(host_nan_job)
    assert lines[:2] == ["job: 2 nodes, 2 ranks", FIRST]
    monkeypatch.undo()
    if cudump.rundir.index.has_duckdb():
        assert job_order_lines(host_nan_job)[:2] == lines[:2]


def test_an_index_of_older_columns_is_written_again(host_nan_job: Path) -> None:
    """A node's partitions written with other columns (by an older cudump, whose reports
    had no from_host) are rewritten before they are read, not read beside the new ones."""
    duckdb = pytest.importorskip("duckdb")
    import json
    import os

    from cudump.rundir.index import BUILT_DIR, DATA_FILE, opened

    new = ["from_arg", "from_host", "from_host_bytes", "from_host_launch"]
    for data_file in (host_nan_job / "index" / "reports").glob(f"*/*/*/{DATA_FILE}"):
        older = data_file.with_name("older.parquet")
        duckdb.connect().execute(
            f"COPY (SELECT * EXCLUDE ({', '.join(new)}) FROM read_parquet('{data_file}')) "
            f"TO '{older}' (FORMAT parquet)")
        os.replace(older, data_file)
    for built in (host_nan_job / "index" / BUILT_DIR).glob("*.json"):
        data = json.loads(built.read_text())
        data["columns"]["reports"] = [c for c in data["columns"]["reports"] if c not in new]
        built.write_text(json.dumps(data))
    with opened(host_nan_job) as con:
        rows = con.execute("SELECT rank, from_host, from_host_bytes, from_host_launch, "
                           "from_arg FROM reports ORDER BY rank").fetchall()
    assert rows == [(0, "copy", 4, 9, 0), (1, None, None, None, None)]


def test_a_memsets_report_and_the_order_of_producers_at_one_place() -> None:
    """A memset's NaN is the memset's; at one place, a host's write and a launch that made
    NaN/Inf itself are both producers (the lower rank first), and either comes before a
    launch that only carried NaN/Inf on."""
    from cudump.analysis.job_order import JobOrder, NodeReport
    from cudump.rundir.index_rows import ReportRow

    def report(rank: int, origin: str, host: str | None = None) -> ReportRow:
        return ReportRow(rank=rank, pid=100 + rank, launch=3, kernel="k(float*)", arg=1,
                         nonfinite=4, elements=16, origin=origin, step=2, collective=5,
                         collective_op="all-reduce", within=1, layer=None, pass_=None,
                         source=None, from_arg=0 if host else None, from_host=host,
                         from_host_bytes=64 if host else None,
                         from_host_launch=3 if host else None)

    memset = NodeReport("a", report(2, "propagated", "memset"))
    assert memset.text() == ("rank 2 (node a), a memset of 64 bytes before launch 3, read as "
                             "arg 0 by launch 3 of k in step 2, between all-reduce 5 and 6: "
                             "4 of 16 elements of arg 1 non-finite (produced by the memset)")
    carried = NodeReport("a", report(0, "propagated"))
    made = NodeReport("b", report(3, "produced"))
    first = JobOrder([carried, made, memset], [], {}, {}).first_nonfinite()
    assert first is memset
    assert JobOrder([carried, made], [], {}, {}).first_nonfinite() is made
