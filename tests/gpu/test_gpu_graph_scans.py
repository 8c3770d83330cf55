"""--check-nan and --digest inside CUDA graph replays: cudump's kernel runs as kernel nodes of
the instrumented copy of each graph (samples/torch_graph_scans.py: torch.compile with
mode="reduce-overhead", and a torch.cuda.graph capture). The program's output is bare's,
no record fails, and a NaN made by a kernel inside a replay is reported as that kernel node."""

from __future__ import annotations

import pytest
from gpurun import RunDir, run, sample, under_cudump

from cudump.rundir.manifest import read_manifest

pytestmark = pytest.mark.gpu

MODES = ["compiled", "graph"]
NAN_STEP = 4   # a replayed step in both modes (torch.compile replays from the third step on)


def run_both(mode: str, option: str, workdir, tmp_path, *extra: str):
    """The sample bare and under cudump `option`: same exit status and stdout, and no
    failed record. Returns the run directory and cudump's stderr."""
    pytest.importorskip("torch")
    cmd = [*sample("torch_graph_scans.py"), mode, *extra]
    bare = run(cmd, workdir)
    assert bare.returncode == 0, bare.stderr[-3000:]
    out = tmp_path / "run"
    ran = run(under_cudump(cmd, out, extra=[option]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout          # graph-mode numerics, bit for bit
    records = read_manifest(out) if (out / "manifest.jsonl").exists() else []
    failed = [(r.kernel[:80], r.extra.get("graph"), r.reason) for r in records
              if r.status != "ok"]
    assert not failed, failed[:10]
    summary = RunDir(out).summary()
    assert summary["snapshot_errors"] == 0
    assert summary["graph_launches"] > 0
    last = ran.stderr.strip().splitlines()[-1]
    assert "failed" not in last, last
    return out, ran.stderr


@pytest.mark.parametrize("mode", MODES)
def test_check_nan_inside_graph_replays_fails_nothing(mode, workdir, tmp_path):
    out, stderr = run_both(mode, "--check-nan", workdir, tmp_path)
    assert "NaN/Inf" not in stderr
    assert not (out / "manifest.jsonl").exists() or not read_manifest(out)


@pytest.mark.parametrize("mode", MODES)
def test_digests_inside_graph_replays_fail_nothing(mode, workdir, tmp_path):
    """Every kernel node's buffers are digested in every replay (records with graph, replay
    and node), none fails."""
    out, _ = run_both(mode, "--digest", workdir, tmp_path)
    in_graph = [r for r in read_manifest(out) if "graph" in r.extra]
    assert in_graph, "no digest of a kernel inside a graph"
    assert all(r.extra.get("digest") and "node" in r.extra for r in in_graph)
    assert len({r.extra["replay"] for r in in_graph}) >= 3


def test_a_nan_inside_a_compiled_replay_is_reported(workdir, tmp_path):
    """torch.compile: the NaN enters through the graph's static input (PyTorch copies each
    step's input into it before the replay, outside the graph), which is reported; inside
    the replay Inductor writes x * 2's output over that same input buffer, so no kernel node
    turns a finite buffer non-finite (seen on an H100: the node's output held the NaN before
    it ran), and none is reported."""
    out, stderr = run_both("compiled", "--check-nan", workdir, tmp_path, "--nan",
                           str(NAN_STEP))
    producers = [r for r in read_manifest(out) if "nonfinite" in r.extra]
    assert producers, stderr[-3000:]
    assert not [r for r in producers if "graph" in r.extra], [r.extra for r in producers]


def test_a_nan_made_inside_a_replay_is_reported_as_a_kernel_node(workdir, tmp_path):
    """NaN in one element of one step's input, copied into the graph's input: PyTorch's
    x * 2 kernel inside the replayed graph is the first kernel node to leave NaN in its
    output, and the report names it with its graph, replay and node."""
    mode = "graph"
    out, stderr = run_both(mode, "--check-nan", workdir, tmp_path, "--nan", str(NAN_STEP))
    producers = [r for r in read_manifest(out) if "nonfinite" in r.extra]
    in_graph = [r for r in producers if "graph" in r.extra]
    assert in_graph, [(r.kernel[:100], r.extra) for r in producers]
    first = in_graph[0]
    assert "MulFunctor" in first.kernel, first.kernel
    assert first.phase == "after" and first.extra["nonfinite"] >= 1
    where = (f"(graph {first.extra['graph']}, replay {first.extra['replay']}, "
             f"node {first.extra['node']}, process {first.pid}")
    reports = [ln for ln in stderr.splitlines() if ln.startswith("cudump: NaN/Inf")]
    assert any(where in ln and first.kernel in ln for ln in reports), reports
    assert "NaN/Inf report" in stderr.strip().splitlines()[-1]
