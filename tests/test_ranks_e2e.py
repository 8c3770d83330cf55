"""Ranks (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, LOCAL_RANK in a process's environment) end to
end on the stand-in driver, with tests/fakecuda/progs/ranks.c: two ranks started as torchrun
does (fork and exec with RANK set), of which only rank 1 leaves NaN in a buffer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from records import manifest, nan_lines

from cudump.cli import main
from cudump.controller.ranks import environ_rank, rank_of, read_environ

ROOT = Path(__file__).resolve().parent.parent
ADD = "vecAdd(float const*, float const*, float*, int)"


def test_rank_of_an_environment() -> None:
    assert rank_of({"RANK": "3", "LOCAL_RANK": "1"}) == 3
    assert rank_of({"OMPI_COMM_WORLD_RANK": "2"}) == 2
    assert rank_of({"PMI_RANK": "5"}) == 5
    assert rank_of({"LOCAL_RANK": "1"}) == 1
    assert rank_of({"RANK": "x", "PMI_RANK": "4"}) == 4
    assert rank_of({"RANK": "-1"}) is None
    assert rank_of({}) is None


def test_environ_read_and_unreadable(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "environ").write_bytes(b"PATH=/bin\0RANK=7\0odd\0")
    assert read_environ(42, tmp_path) == {"PATH": "/bin", "RANK": "7"}
    assert environ_rank(42, tmp_path) == 7
    assert environ_rank(43, tmp_path) is None          # gone (or not ours to read)
    assert environ_rank(os.getpid()) == rank_of(dict(os.environ))


def cudump_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "cudump", *args], env=env,
                          capture_output=True, text=True, timeout=60, cwd=cwd)


def test_check_nan_names_the_rank(cudump_run, fake, tmp_path: Path) -> None:
    ran = cudump_run([str(fake.programs["ranks"]), "3", "5", "2"], "--check-nan", "--trace")
    assert ran.returncode == 0, ran.stderr
    assert "rank 0: launches vecAdd=3" in ran.stdout
    assert "rank 1: launches vecAdd=3" in ran.stdout
    nan = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf:")]
    assert len(nan) == 1, ran.stderr
    copy = r"a host-to-device copy of 4096 bytes \(cuMemcpyHtoD\) before launch 2"
    assert re.search(r"launch 2 of vecAdd\(.*\) \(occurrence 2, process \d+, rank 1\) left "
                     r"1 of 1024 elements of arg 2 non-finite where there were none, .*; "
                     rf"propagated: arg 0 \(from {copy}\) and arg 1 \(from {copy}\) were "
                     r"already non-finite", nan[0]), nan[0]
    summary = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: ") and
               "that left NaN/Inf" in ln]
    # The host's copies put the infinities there: the summary names the first, with its
    # process and rank.
    assert summary and re.search(r"1 NaN/Inf report, 2 host writes that left NaN/Inf \(first "
                                 r"produced by a "
                                 r"host-to-device copy of 4096 bytes at 0x[0-9a-f]+ before "
                                 r"launch 2 of process \d+ \(rank 1\)\)", summary[0]), summary
    # Trace lines and records carry the rank.
    traced = [ln for ln in ran.stderr.splitlines() if re.match(r"cudump: #\d+ pid=", ln)]
    assert {re.search(r"rank=(\d)", ln).group(1) for ln in traced} == {"0", "1"}
    trace = [json.loads(ln) for ln in (ran.run_dir / "trace.jsonl").read_text().splitlines()]
    assert {r["rank"] for r in trace} == {0, 1}
    records = manifest(ran.run_dir)
    assert records and {r["rank"] for r in records} == {1}     # rank 0 left no NaN
    producers = [r for r in records if "nonfinite" in r]
    assert [(r["rank"], r["launch"], r["arg"]) for r in producers] == [(1, 2, 2)]
    data = json.loads((ran.run_dir / "summary.json").read_text())
    assert sorted(data["ranks"].values()) == [0, 1]
    # first_nan_rank is the first producer's: the copy's process's.
    first = data["first_nan_producer"]
    assert (first["kind"], first["api"], first["before_launch"], first["rank"]) == (
        "copy", "cuMemcpyHtoD", 2, 1)
    assert data["first_nan_rank"] == 1
    assert (data["first_nan_report"]["launch"], data["first_nan_report"]["rank"]) == (2, 1)
    # ls shows the rank column, stats the ranks of each kernel.
    ls = cudump_cli("ls", str(ran.run_dir), cwd=tmp_path)
    assert ls.returncode == 0, ls.stderr
    head = ls.stdout.splitlines()[0].split()
    assert head[:4] == ["#", "pid", "rank", "launch"]
    stats = cudump_cli("stats", str(ran.run_dir), cwd=tmp_path)
    assert stats.stdout.splitlines()[0].split()[-1] == "ranks"
    assert stats.stdout.splitlines()[1].split()[-1] == "1"


def test_check_nan_names_the_rank_of_the_first_producer(cudump_run, fake, tmp_path: Path,
                                                        capsys) -> None:
    """RANKS_SQUARE=1: rank 0 (run first) reads infinities a device-to-device copy put
    there, which cudump does not follow, so the run's first report is rank 0's and
    propagated from nothing cudump saw; rank 1's square then produces an Inf from finite
    inputs, and its vecAdd carries it on. The report lines carry rank and origin, the summary
    names the first producer with its rank (first_nan_rank: 1, not the first report's 0), and
    stats shows the produced/propagated columns and the ranks column."""
    ran = cudump_run([str(fake.programs["ranks"]), "3", "5", "2"], "--check-nan",
                     env_extra={"RANKS_SQUARE": "1"})
    assert ran.returncode == 0, ran.stderr
    assert "rank 1: launches vecAdd=3 square=1" in ran.stdout
    records = manifest(ran.run_dir)
    reports = [r for r in records if "nonfinite" in r]
    pids = {r["rank"]: r["pid"] for r in reports}
    square, add = "square(float const*, float*, int)", ADD
    assert nan_lines(ran.stderr) == [
        f"cudump: NaN/Inf: launch 2 of {add} (occurrence 2, process {pids[0]}, rank 0) left 1 "
        "of 1024 elements of arg 2 non-finite where there were none, the first at index 5; "
        "propagated: arg 0 and arg 1 were already non-finite (no launch cudump scanned left "
        "them so)",
        f"cudump: NaN/Inf: launch 2 of {square} (occurrence 1, process {pids[1]}, rank 1) "
        "produced 1 of 1024 non-finite elements in arg 1, the first at index 5; its inputs "
        "were finite",
        f"cudump: NaN/Inf: launch 3 of {add} (occurrence 2, process {pids[1]}, rank 1) left 1 "
        "of 1024 elements of arg 2 non-finite where there were none, the first at index 5; "
        f"propagated: arg 1 was already non-finite (from launch 2 of {square})"]
    assert [(r["rank"], r["launch"], r["origin"], r.get("from_launch")) for r in reports] == [
        (0, 2, "propagated", None), (1, 2, "produced", None), (1, 3, "propagated", 2)]
    assert ran.stderr.splitlines()[-1].endswith(
        f"3 NaN/Inf reports (first produced by launch 2 of {square} (process "
        f"{pids[1]}, rank 1)); run: {ran.run_dir}")
    data = json.loads((ran.run_dir / "summary.json").read_text())
    assert data["first_nan_producer"] == {"kind": "launch", "pid": pids[1], "launch": 2,
                                          "kernel": square, "rank": 1}
    assert data["first_nan_report"] == {"kind": "launch", "pid": pids[0], "launch": 2,
                                        "kernel": add, "rank": 0}
    assert data["first_nan_rank"] == 1 and data["nan_produced"] == 1
    assert main(["stats", str(ran.run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-4:] == ["NaN/Inf", "produced", "propagated", "ranks"]
    counts = {line.split()[0]: line.split()[-4:] for line in lines[1:3]}
    assert counts == {"vecAdd": ["2", "0", "2", "0,1"], "square": ["1", "1", "0", "1"]}


def test_no_rank_no_rank_field(cudump_run, fake) -> None:
    ran = cudump_run([str(fake.programs["nans"]), "3", "5", "2"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert all("rank" not in r for r in manifest(ran.run_dir))
    assert ", rank " not in ran.stderr and "first on rank" not in ran.stderr
    data = json.loads((ran.run_dir / "summary.json").read_text())
    assert "ranks" not in data and "first_nan_rank" not in data
    assert data["first_nan_report"] is not None and "rank" not in data["first_nan_report"]


def test_diff_aligns_per_rank(cudump_run, fake, tmp_path: Path) -> None:
    prog = str(fake.programs["ranks"])
    a = cudump_run([prog, "3", "5", "0"], "--digest", run_dir=tmp_path / "a")
    # B starts rank 1 first: aligned per rank, its launches still pair with A's.
    b = cudump_run([prog, "3", "5", "0"], "--digest", run_dir=tmp_path / "b",
                   env_extra={"RANKS_REVERSE": "1"})
    c = cudump_run([prog, "3", "5", "3"], "--digest", run_dir=tmp_path / "c")
    assert a.returncode == b.returncode == c.returncode == 0, a.stderr + b.stderr + c.stderr
    same = cudump_cli("diff", str(a.run_dir), str(b.run_dir), cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    differ = cudump_cli("diff", str(a.run_dir), str(c.run_dir), cwd=tmp_path)
    assert differ.returncode == 1, differ.stdout + differ.stderr
    assert re.search(r"first divergent: launch 3 of vecAdd\(.*\) \(occurrence 3, rank 1, "
                     r"process 2 of 2 \(pid \d+\)\), arg 0 before", differ.stdout), differ.stdout
