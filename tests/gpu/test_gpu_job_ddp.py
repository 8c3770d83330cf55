"""A PyTorch DDP job of two ranks over NCCL as a job of two "nodes" (samples/torch_ddp_job.py):
one cudump per rank, `cudump --job JOB --node nodeK ...`, each rank on a GPU of its own
(CUDA_VISIBLE_DEVICES=K), started together as a launcher starts them. Rank 1's input at
step 3 overflows to Inf (a multiply from finite inputs); DDP's all-reduce carries it into
rank 0's gradients at the same step, one collective later. So in the job's order (step,
collective, launch within it) the first non-finite launch is rank 1's multiply, between the
all-reduce of step 2 and that of step 3, though rank 0 reports NaN/Inf of its own.

Needs two CUDA devices; skipped otherwise."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpurun import SAMPLES, cudump_command, run

pytestmark = pytest.mark.gpu

WORLD = 2
BAD_RANK, BAD_STEP = 1, 3
TIMEOUT_S = 300
SAMPLE = SAMPLES / "torch_ddp_job.py"

# The wordings cudump prints (checked against the code on any machine by
# tests/test_job_ddp_sample.py): node 1's first NaN/Inf report, the first non-finite line of
# `cudump stats JOB` (its launch number put in), and a timeline's process names.
FIRST_REPORT = re.compile(
    r"cudump: NaN/Inf: launch (\d+) of (.*MulFunctor.*) in step 3, between all-reduce "
    r"(\d+) and (\d+)(?: at \S+)? \(occurrence \d+, process \d+, rank 1\) produced "
    r"(\d+) of \d+ non-finite elements in arg \d+(?: \(the pointer at byte \d+\))?, the "
    r"first at index \d+; its inputs were finite")
FIRST_NONFINITE = (
    r"first non-finite: rank 1 \(node node1\), launch {launch} of .+ in step 3, between "
    r"all-reduce (\d+) and (\d+)(?: at \S+)?: \d+ of \d+ elements of arg \d+ "
    r"non-finite \(produced\)")
TRACK = re.compile(r"node (node\d), rank (\d), pid \d+")


def _two_gpus() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs {WORLD} CUDA devices, torch sees {torch.cuda.device_count()}")
    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        pytest.skip("this torch has no NCCL backend")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_command(job: Path, k: int) -> list[str]:
    """What node K runs: cudump as one node of the job, around the rank's program."""
    return [*cudump_command(), "--job", str(job), "--node", f"node{k}", "--check-nan",
            "--layers", "--flight", "--trace", "--max-bytes", "1G", "--", sys.executable,
            str(SAMPLE)]


def node_env(k: int, port: int) -> dict[str, str]:
    """Rank K's launcher variables: one rank per node, so local rank 0 on its one GPU."""
    return dict(os.environ) | {"RANK": str(k), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": "0",
                               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                               "CUDA_VISIBLE_DEVICES": str(k)}


def run_job(job: Path, cwd: Path, logs: Path) -> list[tuple[int, str, str]]:
    """Both nodes started together and waited for (each node's exit status, stdout,
    stderr); a node still running after TIMEOUT_S is killed, with both, and fails the
    test."""
    port = _free_port()
    procs = []
    for k in range(WORLD):
        out = (logs / f"node{k}.out").open("w")
        err = (logs / f"node{k}.err").open("w")
        procs.append((subprocess.Popen(node_command(job, k), cwd=cwd, env=node_env(k, port),
                                       stdout=out, stderr=err, text=True), out, err))
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for proc, _, _ in procs:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        tails = "\n".join(f"node{k}: {(logs / f'node{k}.err').read_text()[-2000:]}"
                          for k in range(WORLD))
        pytest.fail(f"the job did not end in {TIMEOUT_S} s:\n{tails}")
    finally:
        for _, out, err in procs:
            out.close()
            err.close()
    return [(proc.returncode, (logs / f"node{k}.out").read_text(),
             (logs / f"node{k}.err").read_text()) for k, (proc, _, _) in enumerate(procs)]


def _first_report(run: Path) -> dict:
    """The NaN/Inf report of the lowest launch in a node's manifest."""
    records = [json.loads(ln) for ln in (run / "manifest.jsonl").read_text().splitlines()]
    made = [r for r in records if r.get("nonfinite")]
    assert made, f"no NaN/Inf report in {run}: the NaN/Inf never reached it"
    return min(made, key=lambda r: r["launch"])


def test_ddp_job_names_rank_1_step_3_and_its_collective_interval(workdir, tmp_path):
    _two_gpus()
    job = tmp_path / "job"
    logs = tmp_path / "logs"
    logs.mkdir()
    ended = run_job(job, workdir, logs)
    for k, (status, _, err) in enumerate(ended):
        assert status == 0, f"node{k}: exit {status}\n{err[-3000:]}"
    # The program's own output: rank 1's overflow reaches rank 0 through step 3's
    # all-reduce, after rank 0's loss of that step was computed.
    assert [out.strip() for _, out, _ in ended] == [
        "rank 0: loss finite at steps 0 1 2 3; non-finite at steps 4 5",
        "rank 1: loss finite at steps 0 1 2; non-finite at steps 3 4 5"], ended

    # Node 1's first report: rank 1's multiply, produced at step 3, after step 2's
    # all-reduce.
    err1 = ended[1][2]
    reports = sorted((ln for ln in err1.splitlines() if ln.startswith("cudump: NaN/Inf: ")),
                     key=lambda ln: int(re.match(r"cudump: NaN/Inf: launch (\d+) ", ln)[1]))
    assert reports, err1[-3000:]
    first = FIRST_REPORT.fullmatch(reports[0])
    assert first, reports[0]
    launch, a, b = int(first.group(1)), int(first.group(3)), int(first.group(4))
    assert a >= 1 and b == a + 1, reports[0]
    # Its manifest record says the same.
    made = _first_report(job / "nodes" / "node1")
    assert (made["rank"], made["launch"], made["step"], made["collective"],
            made["origin"]) == (BAD_RANK, launch, BAD_STEP, a, "produced"), made

    # The job's order: rank 1 first, though rank 0 reports NaN/Inf of the same step too
    # (its all-reduce of step 3, collective a + 1, carried rank 1's in).
    zero = _first_report(job / "nodes" / "node0")
    assert zero["rank"] == 0 and zero["step"] == BAD_STEP, zero
    assert zero["collective"] >= a, zero

    stats = run([*cudump_command(), "stats", str(job)], workdir)
    assert stats.returncode == 0, stats.stderr
    lines = stats.stdout.splitlines()
    assert "job: 2 nodes, 2 ranks" in lines, stats.stdout
    line = next((ln for ln in lines if ln.startswith("first non-finite: ")), None)
    assert line is not None, stats.stdout
    said = re.fullmatch(FIRST_NONFINITE.format(launch=launch), line)
    assert said, line
    assert int(said.group(1)) < int(said.group(2)), line
    assert (int(said.group(1)), int(said.group(2))) == (a, b), line
    # Both ranks launched every collective: no rank stopped.
    assert not [ln for ln in lines if ln.startswith("stopped: ")], stats.stdout

    # The job's timeline: a process track per rank, named by node and rank.
    timeline = tmp_path / "timeline.json"
    shown = run([*cudump_command(), "show", str(job), "--timeline", str(timeline)], workdir)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"wrote {timeline}: 2 processes, "), shown.stdout
    events = json.loads(timeline.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    tracks = {TRACK.fullmatch(n).groups(): pid for pid, n in names.items()}
    assert set(tracks) == {("node0", "0"), ("node1", "1")}, names
    for pid in tracks.values():
        assert any(e.get("ph") == "X" and e["pid"] == pid for e in events), names

    # Every node's flight recorder is on disk.
    for k in range(WORLD):
        assert (job / "nodes" / f"node{k}" / "flight.jsonl").is_file(), k
