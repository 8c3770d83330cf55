"""Kernels inside CUDA graphs, on the stand-in driver: each graph launch reports the kernel
nodes it runs, and the summary counts them, exactly as the program counts its own node
executions (captured graphs, explicit graphs with child graphs, parameter updates)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from cudump.signature import parse_signature


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]


def tally(stdout: str) -> Counter[str]:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("launches "))
    counts = Counter({k: int(v) for k, v in (item.split("=") for item in line.split()[1:])})
    counts.pop("graph", None)
    return counts


def base(name: str) -> str:
    return parse_signature(name).base_name


def test_graph_kernels_are_traced_and_counted(fake, cudump_run, bare_run):
    program = [str(fake.programs["graphs"])]
    bare = bare_run(program)
    assert bare.returncode == 0, bare.stderr
    ran = cudump_run(program, "--trace")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare.stdout
    made = tally(bare.stdout)  # kernel-node executions, per kernel
    events = records(ran.run_dir)
    nodes = [e for e in events if e["event"] == "graph-kernel"]
    assert Counter(base(e["kernel"]) for e in nodes) == made
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert Counter({base(k): n for k, n in summary["kernels"].items()}) == made
    assert summary["graph_kernel_launches"] == sum(made.values())
    assert summary["graph_launches"] == sum(1 for e in events if e["event"] == "graph-launch")
    # Replays of one executable graph count from 1, and its nodes keep their order.
    by_graph: dict[int, list[dict]] = {}
    for e in nodes:
        by_graph.setdefault(e["graph"], []).append(e)
    for graph_nodes in by_graph.values():
        replays = [e["replay"] for e in graph_nodes]
        assert replays == sorted(replays) and replays[0] == 1
        first = [e["node"] for e in graph_nodes if e["replay"] == 1]
        assert first == list(range(len(first)))
    line = ran.stderr.strip().splitlines()[-1]
    assert f"running {sum(made.values())} kernels" in line


def test_captured_graph_replays_report_their_kernels(fake, cudump_run):
    ran = cudump_run([str(fake.programs["capture"]), "--copy"], "--trace")
    assert ran.returncode == 0, ran.stderr
    events = records(ran.run_dir)
    captured = [e for e in events if e["event"] == "launch" and e["captured"]]
    nodes = [e for e in events if e["event"] == "graph-kernel"]
    assert len(nodes) == 10 * len(captured) == 30
    assert Counter(e["kernel"] for e in nodes) == Counter(
        {k: 10 * n for k, n in Counter(e["kernel"] for e in captured).items()})
    assert all(e["replay"] in range(1, 11) for e in nodes)


def test_graph_kernels_are_counted_without_trace(fake, cudump_run, bare_run):
    program = [str(fake.programs["graphs"])]
    ran = cudump_run(program)
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert Counter({base(k): n for k, n in summary["kernels"].items()}) == tally(
        bare_run(program).stdout)
