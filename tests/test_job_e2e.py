"""`cudump --job JOB` end to end on the stand-in driver: each "node" is its own cudump writing
into one job directory (JOB/nodes/NODE); snapshots' bytes stored once in JOB/blobs; a node
that finds NaN/Inf writes JOB/triggers/NODE.json, and the other nodes running with --flight
write their flight recorder when it appears."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from records import manifest

from cudump.rundir.blobs import file_sha256
from cudump.rundir.flight import read_flight
from cudump.rundir.job import job_nodes
from cudump.rundir.triggers import read_triggers

ROOT = Path(__file__).resolve().parent.parent
SNAP_RULE = ('rules:\n  - kernel: "vecAdd"\n    args: [0, 1, 2]\n    when: after\n'
             '    format: npy\n')


def test_job_and_out_exclude_each_other(cudump, tmp_path: Path, fake) -> None:
    prog = str(fake.programs["nans"])
    done = cudump("--job", str(tmp_path / "j"), "--out", str(tmp_path / "o"), prog, "1", "0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "cudump: error: --job and --out exclude each other: under --job the run is written "
        "to JOB/nodes/NODE/"]
    done = cudump("--node", "n0", prog, "1", "0")
    assert done.returncode == 2 and "--node names this node of a --job" in done.stderr
    done = cudump("--job", str(tmp_path / "j"), "--node", "../x", prog, "1", "0")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_node_that_finds_nan_writes_the_jobs_trigger(cudump, tmp_path: Path, fake) -> None:
    job = tmp_path / "job"
    done = cudump("--job", str(job), "--node", "a", "--check-nan",
                  str(fake.programs["nans"]), "3", "5", "2")
    assert done.returncode == 0, done.stderr
    run = job / "nodes" / "a"
    # The summary, cudump's last line, names the node's folder.
    assert done.stderr.strip().splitlines()[-1].endswith(f"run: {run}")
    assert [n.name for n in job_nodes(job)] == ["a"]
    (trigger,) = read_triggers(job)
    assert (trigger.node, trigger.what, trigger.launch) == ("a", "NaN/Inf", 2)
    assert trigger.kernel is not None and trigger.kernel.startswith("vecAdd")
    assert "cudump: job: node a: NaN/Inf in arg 2" in done.stderr


def test_another_nodes_trigger_writes_this_nodes_flight_recorder(
        cudump, spawn, shim_lib: Path, fake, tmp_path: Path) -> None:
    """Node b runs until its flight.jsonl exists: only the trigger of node a, which finds
    NaN/Inf meanwhile, can make b's cudump write it before b's program ends."""
    job = tmp_path / "job"
    ready = tmp_path / "b.ready"
    flight = job / "nodes" / "b" / "flight.jsonl"
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib),
                        "PYTHONPATH": f"{ROOT}:{fake.env().get('PYTHONPATH', '')}"}
    node_b = spawn([sys.executable, "-m", "cudump", "--job", str(job), "--node", "b",
                    "--flight", "--", str(fake.programs["untilfile"]), str(ready),
                    str(flight), "120"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    _wait_for(ready, node_b)
    done = cudump("--job", str(job), "--node", "a", "--check-nan", "--flight",
                  str(fake.programs["nans"]), "3", "5", "2")
    assert done.returncode == 0, done.stderr
    out, err = node_b.communicate(timeout=120)
    assert node_b.returncode == 0, err
    assert out.startswith("launches vecAdd=")
    said = [ln for ln in err.splitlines() if ln.startswith("cudump: flight: node a:")]
    assert said == [f"cudump: flight: node a: NaN/Inf in arg 2, 1 of 1024 elements (launch 2 "
                    f"of vecAdd(float const*, float const*, float*, int)); this node's last "
                    f"launches are in {flight}"], err
    # Written again at the end, as every --flight run's.
    log = read_flight(job / "nodes" / "b")
    assert log.launches and log.processes[0].ended == "exited normally"
    assert [t.node for t in read_triggers(job)] == ["a"]     # b ended cleanly


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    """Until `path` exists (the program runs), or the process ended (a failure)."""
    while not path.exists():
        try:
            proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"node b ended before it was ready: {proc.communicate()}")


def test_equal_snapshots_of_two_nodes_are_stored_once(cudump, tmp_path: Path, fake) -> None:
    job = tmp_path / "job"
    rule = tmp_path / "snap.yaml"
    rule.write_text(SNAP_RULE)
    said = []
    for node in ("a", "b"):
        done = cudump("--job", str(job), "--node", node, "--rule", str(rule),
                      str(fake.programs["nans"]), "3", "5")
        assert done.returncode == 0, done.stderr
        said += [ln for ln in done.stderr.splitlines() if ln.startswith("cudump: job:")]
    # a stores its three buffers once for its three launches; b's are all there already.
    assert said == [f"cudump: job: 9 snapshots stored in {job / 'blobs'}: 3 new, 6 already "
                    "there (24.8 KiB not written again)",
                    f"cudump: job: 9 snapshots stored in {job / 'blobs'}: 0 new, 9 already "
                    "there (37.1 KiB not written again)"]
    records = [r for node in ("a", "b") for r in manifest(job / "nodes" / node)]
    assert len(records) == 18 and all(r["status"] == "ok" for r in records)
    blobs = sorted((job / "blobs").glob("*/*.npy"))
    # a and b are alike in every launch, c too after the first: 3 distinct buffers.
    assert len(blobs) == len({r["blob"] for r in records}) == 3
    for blob in blobs:
        assert blob.name == f"{file_sha256(blob)}.npy"
        assert blob.parent.name == blob.name[:2]
    # No .npy is left in a node's folder: the records point at the blobs.
    assert not list((job / "nodes").rglob("*.npy"))
    first = records[0]
    data = np.load(job / first["blob"])
    assert data.dtype == np.float32 and data.shape == (1024,)
    written = sum((job / r["blob"]).stat().st_size for r in records)
    stored = sum(b.stat().st_size for b in blobs)
    assert stored * 6 == written        # 18 snapshots' bytes on disk as 3


def test_offline_commands_read_a_job(cudump, tmp_path: Path, fake) -> None:
    """ls, stats, show, show --flight and diff take the job where they take a run: a job's
    rows have a node column, its records' bytes are read from the job's blobs."""
    job, other = tmp_path / "job", tmp_path / "other"
    rule = tmp_path / "snap.yaml"
    rule.write_text(SNAP_RULE)
    for where, node, poison in ((job, "a", []), (job, "b", ["2"]), (other, "a", []),
                                (other, "b", [])):
        done = cudump("--job", str(where), "--node", node, "--rule", str(rule), "--flight",
                      str(fake.programs["nans"]), "3", "5", *poison)
        assert done.returncode == 0, done.stderr
    listed = cudump("ls", str(job))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:3] == ["#", "pid", "node"]
    assert {ln.split()[2] for ln in lines[1:-1]} == {"a", "b"}
    assert lines[-1] == "18 of 18 records: 18 snapshots"
    assert all(" blobs/" in ln for ln in lines[1:-1])
    only_b = cudump("ls", str(job), "--node", "b")
    assert only_b.stdout.splitlines()[-1] == "9 of 9 records: 9 snapshots"
    missing = cudump("ls", str(job), "--node", "c")
    assert missing.returncode == 2 and missing.stderr.strip() == (
        f"cudump: error: --node c: {job} has no such node (it has a, b)")
    # Two nodes hold launch 2's arg 2: show lists both, then shows b's from its blob.
    both = cudump("show", str(job), "--launch", "2", "--arg", "2")
    assert both.returncode == 2 and "--node" in both.stderr
    shown = cudump("show", str(job), "--node", "b", "--launch", "2", "--arg", "2")
    assert shown.returncode == 0, shown.stderr
    assert "(node b)" in shown.stdout and "/blobs/" in shown.stdout
    assert shown.stdout.splitlines()[-1].split()[-3:] == ["1", "0", "0"]    # NaN +Inf -Inf
    stats = cudump("stats", str(job))
    assert stats.returncode == 0, stats.stderr
    rows = stats.stdout.splitlines()
    assert rows[0].split()[-1] == "node" and [r.split()[-1] for r in rows[1:3]] == ["a", "b"]
    assert any(r.endswith("on 2 nodes") for r in rows), rows
    assert "job: 2 nodes, 0 ranks, 2 processes without a rank" in rows, rows
    flight = cudump("show", str(job), "--flight")
    assert flight.returncode == 0, flight.stderr
    assert [ln for ln in flight.stdout.splitlines() if ln.startswith("node ")] == [
        f"node a: {job / 'nodes' / 'a'}", f"node b: {job / 'nodes' / 'b'}"]
    # The jobs differ in node b's launch 2 (its NaN), and there first.
    diff = cudump("diff", str(other), str(job))
    assert diff.returncode == 1, diff.stderr
    assert diff.stdout.splitlines()[1].split()[:2] == ["node", "launch"]
    assert [ln.split()[0] for ln in diff.stdout.splitlines()[2:20]] == ["a"] * 9 + ["b"] * 9
    assert ("first divergent: launch 2 of vecAdd(float const*, float const*, float*, int) "
            "(occurrence 2, node b, process 2 of 2 (pid ") in diff.stdout, diff.stdout


def test_a_jobs_timeline_shows_every_nodes_processes(cudump, tmp_path: Path, fake) -> None:
    job = tmp_path / "job"
    for node, poison in (("a", []), ("b", ["2"])):
        done = cudump("--job", str(job), "--node", node, "--trace", "--check-nan",
                      str(fake.programs["nans"]), "3", "5", *poison)
        assert done.returncode == 0, done.stderr
    out = tmp_path / "job.json"
    shown = cudump("show", str(job), "--timeline", str(out))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"wrote {out}: 2 processes, 6 launches, 1 NaN/Inf report\n"
    events = json.loads(out.read_text())["traceEvents"]
    names = sorted(e["args"]["name"].split(",")[0] for e in events
                   if e["name"] == "process_name")
    assert names == ["node a", "node b"]
    slices = [e for e in events if e["ph"] == "X"]
    assert sorted((e["args"]["node"], e["ts"]) for e in slices) == [
        ("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("b", 3)]
    (nan,) = [e for e in events if e["name"] == "NaN/Inf"]
    assert (nan["args"]["node"], nan["ts"]) == ("b", 2)
    again = cudump("show", str(job), "--timeline", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr


def test_a_cuda_error_is_the_nodes_trigger(cudump, tmp_path: Path, fake) -> None:
    """Without --flight too: the first CUDA error a call returned, read from the process's
    control page, is the node's trigger (before its exit status, which follows from it)."""
    job = tmp_path / "job"
    done = cudump("--job", str(job), "--node", "n0", str(fake.programs["flight"]), "fault")
    assert done.returncode == 1, done.stderr
    (trigger,) = read_triggers(job)
    assert (trigger.node, trigger.what, trigger.detail) == (
        "n0", "CUDA error", "a call returned CUDA_ERROR_ILLEGAL_ADDRESS")
    done = cudump("--job", str(job), "--node", "n1", str(fake.programs["exitcode"]), "3")
    assert done.returncode == 3
    assert [(t.node, t.what) for t in read_triggers(job)] == [
        ("n0", "CUDA error"), ("n1", "exit status 3")]


def test_two_jobs_align_rank_by_rank_whichever_node_ran_it(cudump, tmp_path: Path,
                                                          fake) -> None:
    """Ranks' buffers differ (a[i] = i + rank): job B runs rank 1 on its first node and rank
    0 on its second, the other way from A, and still nothing differs."""
    rule = tmp_path / "snap.yaml"
    rule.write_text(SNAP_RULE)
    for job, order in (("ja", ("0", "1")), ("jb", ("1", "0"))):
        for node, rank in zip(("n0", "n1"), order, strict=True):
            done = cudump("--job", str(tmp_path / job), "--node", node, "--rule", str(rule),
                          str(fake.programs["ranks"]), "2", "5", "0", env={"RANK": rank})
            assert done.returncode == 0, done.stderr
    diff = cudump("diff", str(tmp_path / "ja"), str(tmp_path / "jb"))
    assert diff.returncode == 0, diff.stdout + diff.stderr
    nodes = {ln.split()[0] for ln in diff.stdout.splitlines()[2:14]}
    assert nodes == {"n0|n1", "n1|n0"}
