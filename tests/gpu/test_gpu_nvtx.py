"""NVTX ranges on a real GPU, from a C++ program (NVTX 3's headers) and from Python
(torch.cuda.nvtx): `--trace` names each launch's scopes, a CUDA graph's kernel nodes keep
the range they were captured under when it is replayed under another, and the timeline
has the ranges as slices on the thread's track."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from gpurun import RunDir, run, sample, under_cudump

pytestmark = pytest.mark.gpu


def scope_text(record: dict) -> str:
    return "/".join(record.get("scope", [])) or "-"


def slices(timeline: Path) -> set[str]:
    data = json.loads(timeline.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    return {e["name"] for e in events if e.get("cat") == "scope"}


def test_a_cpp_programs_ranges_name_its_launches_and_graph_nodes(workdir, tmp_path):
    out, timeline = tmp_path / "run", tmp_path / "timeline.json"
    ran = run(under_cudump(sample("nvtx_ranges"), out, trace=True,
                           extra=["--timeline", str(timeline), "--step-range", "step"]),
              workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "scopes from NVTX are off" not in ran.stderr
    expected = [line.split()[2] for line in ran.stdout.splitlines()
                if line.startswith("expect ") and line.split()[1] != "graph"]
    trace = RunDir(out).trace()
    direct = [r for r in trace if r.get("event") == "launch" and not r.get("captured")]
    assert [scope_text(r) for r in direct] == expected
    assert [r.get("step") for r in direct if scope_text(r) == "step"] == [0, 1]
    captured = [r for r in trace if r.get("event") == "launch" and r.get("captured")]
    assert [scope_text(r) for r in captured] == ["captured", "captured"]
    nodes = [r for r in trace if r.get("event") == "graph-kernel"]
    assert len(nodes) == 4, trace[-6:]                  # two nodes, two replays
    assert {scope_text(r) for r in nodes} == {"captured"}
    assert {"prepare", "train", "forward", "step", "captured"} <= slices(timeline)


PYTHON = textwrap.dedent("""\
    import torch

    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.nvtx.range_push("prepare")
    y = x * 2
    torch.cuda.nvtx.range_pop()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 3
        torch.cuda.nvtx.range_push("captured")
        g.capture_begin()
        z = x + 1
        z = z * 5
        g.capture_end()
        torch.cuda.nvtx.range_pop()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.nvtx.range_push("replay")
    g.replay()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print("sum", float(z.sum()))
""")


def test_a_python_programs_ranges_name_its_launches_and_graph_nodes(workdir, tmp_path):
    pytest.importorskip("torch")
    program = tmp_path / "nvtx_py.py"
    program.write_text(PYTHON)
    out, timeline = tmp_path / "run", tmp_path / "timeline.json"
    ran = run(under_cudump([sys.executable, str(program)], out, trace=True,
                           extra=["--timeline", str(timeline)]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == f"sum {float(10 * (1 << 16))}\n"      # (1 + 1) * 5
    trace = RunDir(out).trace()
    launches = [r for r in trace if r.get("event") == "launch"]
    assert "prepare" in {scope_text(r) for r in launches}, [scope_text(r) for r in launches]
    nodes = [r for r in trace if r.get("event") == "graph-kernel"]
    assert nodes and {scope_text(r) for r in nodes} == {"captured"}, nodes[:2]
    assert {"prepare", "captured"} <= slices(timeline)
