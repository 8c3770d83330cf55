"""--check-nan names where NaN/Inf begins in a real model (samples/torch_resnet_nan.py,
torchvision ResNet-18 on the GPU):

- Inf: layer3.0.conv1's weights are a finite 3e37, so its convolution (cuDNN's kernel, on
  Hopper an sm90 implicit GEMM reading through tensor maps) overflows from finite inputs. The
  run's first producer is a convolution kernel, and the reports after it are propagated.
- NaN fill: one weight element set to NaN on the GPU (`w[0, 0, 0, 0] = nan`), which PyTorch
  does with no kernel: a 4-byte host-to-device copy (cudaMemcpyAsync, the driver's
  cuMemcpyHtoDAsync_v2). That copy is the first producer, at the weight's address, and what
  reads the weight afterwards is propagated from it.
"""

from __future__ import annotations

import json
import re

import pytest
from gpurun import run, sample, under_cudump

from cudump.rundir.manifest import read_manifest

pytestmark = pytest.mark.gpu


def check_nan(mode: str, workdir, tmp_path):
    pytest.importorskip("torchvision")
    out = tmp_path / "run"
    bare = run([*sample("torch_resnet_nan.py"), mode], workdir, timeout=180)
    assert bare.returncode == 0, bare.stderr[-3000:]
    ran = run(under_cudump([*sample("torch_resnet_nan.py"), mode], out,
                           extra=["--check-nan"]), workdir, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout             # the program's output is its own (stderr
                                                 # says where the fill put its NaN)
    summary = json.loads((out / "summary.json").read_text())
    reports = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf")]
    return summary, reports, ran


def test_the_overflowing_convolution_is_the_first_producer(workdir, tmp_path):
    summary, reports, ran = check_nan("inf", workdir, tmp_path)
    first = summary.get("first_nan_producer")
    assert first is not None, reports[:5]
    kernel = first["kernel"].lower()
    assert any(word in kernel for word in ("conv", "fprop", "xmma", "implicit_gemm")), \
        (first, reports[:5])
    made = [ln for ln in reports if f"launch {first['launch']} of " in ln]
    assert made and " produced " in made[0] and "its inputs were finite" in made[0], made
    later = [ln for ln in reports if ln not in made]
    assert later and all("propagated" in ln or " produced " in ln for ln in later), later[:5]
    assert any("propagated" in ln for ln in later), later[:5]
    assert not any("CUDA error" in ln for ln in ran.stderr.splitlines())
    # The convolution's buffers, snapshotted while its stream was held: none let go (the
    # copies are the holding kernel's own; on a side stream the GPU queued them behind it).
    records = read_manifest(tmp_path / "run")
    snaps = [r for r in records if r.extra.get("nan_producer") and "nonfinite" not in r.extra]
    let_go = [r for r in records if "let the stream go" in (r.reason or "")]
    assert snaps and not let_go, [(r.launch, r.arg, r.reason) for r in let_go]
    assert all(r.status == "ok" for r in snaps if r.launch == first["launch"]), \
        [(r.arg, r.status, r.reason) for r in snaps]


def test_the_host_copy_that_wrote_the_nan_is_the_first_producer(workdir, tmp_path):
    summary, reports, ran = check_nan("fill", workdir, tmp_path)
    where = re.search(r"^nan at (0x[0-9a-f]+)$", ran.stderr, re.MULTILINE)
    assert where, ran.stderr[-3000:]
    first = summary.get("first_nan_producer")
    assert first is not None, reports[:5]
    assert (first["kind"], first["api"], first["bytes"], first["address"]) == (
        "copy", "cuMemcpyHtoDAsync", 4, int(where.group(1), 16)), (first, reports[:5])
    # The first launch that reads the weight carries the copy's NaN on.
    copy = (f"(from a host-to-device copy of 4 bytes (cuMemcpyHtoDAsync) before launch "
            f"{first['before_launch']})")
    assert reports and "propagated" in reports[0] and copy in reports[0], reports[:3]
    assert summary["nan_produced"] >= 1 and summary["host_writes"] >= 1


def test_a_clean_model_reports_nothing(workdir, tmp_path):
    summary, reports, _ = check_nan("none", workdir, tmp_path)
    assert reports == [] and summary["nan_producers"] == 0
