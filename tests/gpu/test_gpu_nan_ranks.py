"""--check-nan on ranked processes, on a GPU: samples/nan_source started twice as a launcher
such as torchrun starts its workers (RANK and LOCAL_RANK in each one's environment), rank 0
with no zero row, rank 1 with one at step 4. Rank 1's sim::normalize produces the NaN (0 / 0
from finite inputs) and its sim::accumulate carries it on: the report lines carry both the
rank and the origin, the summary names the first producer with its rank, and `cudump stats`
shows the produced/propagated columns and the ranks column."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from gpurun import cudump_command, run, sample, under_cudump

pytestmark = pytest.mark.gpu

NORMALIZE = "sim::normalize(float*, float const*, float const*, int, int)"


def test_the_first_producer_is_named_with_its_rank(workdir, tmp_path):
    program = shlex.quote(sample("nan_source")[0])
    launcher = (f"env RANK=0 LOCAL_RANK=0 {program} 6 0 && "
                f"env RANK=1 LOCAL_RANK=1 {program} 6 4")
    out = tmp_path / "run"
    ran = run(under_cudump(["sh", "-c", launcher], out, extra=["--check-nan"]), workdir,
              timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "accumulator: 0 of 4096 values are NaN" in ran.stdout
    assert "accumulator: 64 of 4096 values are NaN" in ran.stdout
    reports = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf")]
    assert len(reports) == 2, ran.stderr[-3000:]
    made = re.fullmatch(
        rf"cudump: NaN/Inf: launch 11 of {re.escape(NORMALIZE)} \(occurrence 4, process "
        r"(\d+), rank 1\) produced 64 of 4096 non-finite elements in arg 0, the first at "
        r"index 2048; its inputs were finite", reports[0])
    assert made, reports[0]
    pid = made.group(1)
    assert re.fullmatch(
        r"cudump: NaN/Inf: launch 12 of sim::accumulate\(float\*, float const\*, int\) "
        rf"\(occurrence 4, process {pid}, rank 1\) left 64 of 4096 elements of arg 0 "
        r"non-finite where there were none, the first at index 2048; propagated: arg 1 was "
        rf"already non-finite \(from launch 11 of {re.escape(NORMALIZE)}\)", reports[1]), \
        reports[1]
    last = ran.stderr.splitlines()[-1]
    assert (f"2 NaN/Inf reports (first produced by launch 11 of {NORMALIZE} (process "
            f"{pid}, rank 1)); run: ") in last, last
    totals = json.loads((out / "summary.json").read_text())
    assert totals["first_nan_rank"] == 1 and totals["nan_produced"] == 1
    assert totals["first_nan_producer"] == {"kind": "launch", "pid": int(pid), "launch": 11,
                                            "kernel": NORMALIZE, "rank": 1}
    assert sorted(totals["ranks"].values()) == [0, 1]
    stats = run([*cudump_command(), "stats", str(out)], workdir)
    assert stats.returncode == 0, stats.stderr
    lines = stats.stdout.splitlines()
    assert lines[0].split()[-4:] == ["NaN/Inf", "produced", "propagated", "ranks"], lines
    counts = {ln.split()[0]: ln.split()[-4:] for ln in lines[1:4]}
    assert counts["sim::normalize"] == ["1", "1", "0", "1"], lines
    assert counts["sim::accumulate"] == ["1", "0", "1", "1"], lines
