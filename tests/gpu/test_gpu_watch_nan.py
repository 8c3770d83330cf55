"""--watch-nan on a GPU (samples/torch_watch_nan.py): a NaN/Inf planted in an eager training
step and in a CUDA-graph decode loop is found in the stay-on mode, its producer named
(unconfirmed) or bounded to a window's launches, and then named exactly after the switch
to per-launch scans, where it comes again."""

from __future__ import annotations

import json

import pytest
from gpurun import run, sample, under_cudump

from cudump.rundir.manifest import read_manifest

pytestmark = pytest.mark.gpu


def watch(mode: str, poison: list[int], workdir, tmp_path, *options: str):
    pytest.importorskip("torch")
    cmd = [*sample("torch_watch_nan.py"), mode, *map(str, poison)]
    bare = run(cmd, workdir, timeout=300)
    assert bare.returncode == 0, bare.stderr[-3000:]
    out = tmp_path / "run"
    ran = run(under_cudump(cmd, out, extra=["--watch-nan", *options]), workdir, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout     # the program's output is its own
    reports = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf")]
    summary = json.loads((out / "summary.json").read_text())
    return reports, summary, read_manifest(out)


def test_an_eager_training_step_names_the_planted_producer(workdir, tmp_path):
    """Steps 5 and 9 multiply the first layer's weight by inf (`mul_`): the multiply is named
    exactly, in a window or, once the first finding has switched the process to exact
    scans, at step 9's launch."""
    reports, summary, records = watch("train", [5, 9], workdir, tmp_path)
    assert reports, "nothing found"
    first = summary.get("first_nan_producer")
    assert first is not None, reports[:5]
    assert "mul" in first["kernel"].lower(), (first, reports[:5])
    windows = [r for r in records if "nan_window" in r.extra]
    exact = [r for r in records if r.extra.get("nan_producer") and "nan_window" not in r.extra
             and "mul" in r.kernel.lower()]
    named = [r for r in windows if r.extra["producer"] == "sole" and "mul" in r.kernel.lower()]
    assert named or exact, reports[:8]
    bounded = [r for r in windows if r.extra["producer"] == "bounded"]
    assert all(r.extra["touches"] > 1 for r in bounded)


def test_a_clean_training_run_reports_nothing(workdir, tmp_path):
    reports, summary, _ = watch("train", [], workdir, tmp_path)
    assert reports == [] and summary.get("nan_reports", 0) == 0


def test_a_cuda_graph_decode_loop_finds_the_overflow_inside_the_graph(workdir, tmp_path):
    """Replay 6's static input is a finite 3e38: the graph's first projection overflows.
    The producer is a kernel node of the graph replay (or, bounded, the window that holds
    the graph launch), and a later poisoned replay is named after the switch."""
    reports, summary, records = watch("decode", [6, 10], workdir, tmp_path)
    assert reports, "nothing found"
    assert any("graph" in ln and "replay" in ln for ln in reports) or any(
        "nan_window" in r.extra for r in records), reports[:8]
    first = summary.get("first_nan_producer")
    assert first is not None and "fill" not in first["kernel"].lower(), (first, reports[:5])
