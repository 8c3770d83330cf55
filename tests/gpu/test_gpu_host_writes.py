"""NaN written by the host counts as produced by the host (samples/torch_host_nan.py, PyTorch
on the GPU, under --check-nan):

- copy: `x[5] = nan` launches no kernel: PyTorch copies the one float with cudaMemcpyAsync
  (cuMemcpyHtoDAsync_v2, 4 bytes). That copy is the run's first producer, at the address of
  x[5], and the multiply that reads x carries its NaN on, from the copy.
- fill: torch.full(..., nan) writes the NaN with a fill kernel, whose inputs are finite: the
  fill launch is the first producer, as before, and the multiply carries its NaN on.
"""

from __future__ import annotations

import json
import re

import pytest
from gpurun import run, sample, under_cudump

pytestmark = pytest.mark.gpu

COPY = "a host-to-device copy of 4 bytes (cuMemcpyHtoDAsync) before launch"


def check_nan(mode: str, workdir, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    bare = run([*sample("torch_host_nan.py"), mode], workdir, timeout=180)
    assert bare.returncode == 0, bare.stderr[-3000:]
    ran = run(under_cudump([*sample("torch_host_nan.py"), mode], out, extra=["--check-nan"]),
              workdir, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout                # the program's output is its own
    summary = json.loads((out / "summary.json").read_text())
    reports = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf")]
    where = re.search(r"^nan at (0x[0-9a-f]+)$", ran.stderr, re.MULTILINE)
    assert where, ran.stderr[-3000:]
    return summary, reports, int(where.group(1), 16), ran


def test_the_host_copy_of_a_nan_is_the_first_producer(workdir, tmp_path):
    summary, reports, where, ran = check_nan("copy", workdir, tmp_path)
    assert "copy: 1 of 4096 NaN" in ran.stdout
    first = summary.get("first_nan_producer")
    assert first is not None, reports[:5]
    assert (first["kind"], first["api"], first["bytes"], first["address"]) == (
        "copy", "cuMemcpyHtoDAsync", 4, where), (first, reports[:5])
    assert summary["host_writes"] >= 1
    # The multiply reads x: its report is the first, propagated from the copy.
    assert reports, ran.stderr[-3000:]
    assert "mul" in reports[0].lower(), reports[0]
    assert "propagated: " in reports[0] and f"(from {COPY} {first['before_launch']})" in \
        reports[0], reports[0]
    launch = int(re.match(r"cudump: NaN/Inf: launch (\d+) of ", reports[0]).group(1))
    assert launch >= first["before_launch"], (launch, first)
    assert not any(" produced " in ln for ln in reports), reports
    last = ran.stderr.strip().splitlines()[-1]
    assert (f"(first produced by a host-to-device copy of 4 bytes at {where:#x} before launch "
            f"{first['before_launch']} of process {first['pid']})") in last, last


def test_a_fill_kernel_is_still_the_producer(workdir, tmp_path):
    summary, reports, _, ran = check_nan("fill", workdir, tmp_path)
    assert "fill: 4096 of 4096 NaN" in ran.stdout
    first = summary.get("first_nan_producer")
    assert first is not None and first["kind"] == "launch", (first, reports[:5])
    assert "fill" in first["kernel"].lower(), (first, reports[:5])
    assert reports and f"launch {first['launch']} of " in reports[0], reports[:3]
    assert " produced " in reports[0] and "its inputs were finite" in reports[0], reports[0]
    carried = [ln for ln in reports[1:] if "mul" in ln.lower()]
    assert carried and f"(from launch {first['launch']} of " in carried[0], reports[:3]
