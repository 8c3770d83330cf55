"""The columnar index read by Spark, unchanged: the README's Spark query on a simulated job
(bench/job_index.py) whose index DuckDB wrote. Needs pyspark (the test extra) and a Java
runtime; skipped without either."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from job_index import Plant, make_job  # noqa: E402

pytest.importorskip("duckdb")
pyspark_sql = pytest.importorskip("pyspark.sql")
if shutil.which("java") is None:
    pytest.skip("Spark needs a Java runtime", allow_module_level=True)


def test_spark_reads_the_index_as_written(tmp_path: Path) -> None:
    from cudump.rundir.index import build, duckdb_module, indexed

    job = make_job(tmp_path / "job1", 16, steps=3, layers=4, plant=Plant(11, 2, 1),
                   hang=(3, 5))
    con = duckdb_module().connect(":memory:")
    build(con, indexed(job))
    con.close()
    spark = (pyspark_sql.SparkSession.builder.master("local[1]")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "512m")
             .getOrCreate())
    try:
        spark.sparkContext.setLogLevel("ERROR")
        first = (spark.read.parquet(str(job / "index" / "reports"))
                 .orderBy("step", "collective", "within", "rank")
                 .select("rank", "node", "step", "collective", "layer").first())
        assert first is not None
        assert (first["rank"], first["node"], first["step"], first["collective"],
                first["layer"]) == (11, "node1", 2, 9, "layers.1")
        launches = spark.read.parquet(str(job / "index" / "launches"))
        assert launches.count() == 16 * 3 * 4 * 2 - (12 - 5)   # rank 3 stopped after 5
        assert {r["rank"] for r in launches.select("rank").distinct().collect()} == \
            set(range(16))
        ranks = spark.read.parquet(str(job / "index" / "ranks"))
        stopped = ranks.where("collectives < 12").select("rank", "collectives").collect()
        assert [(r["rank"], r["collectives"]) for r in stopped] == [(3, 5)]
    finally:
        spark.stop()
