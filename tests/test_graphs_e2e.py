"""Kernels inside CUDA graphs, on the stand-in driver: each graph launch reports the kernel
nodes it runs, and the summary counts them, exactly as the program counts its own node
executions (captured graphs, explicit graphs with child graphs, parameter updates)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from records import manifest

from cudump.kernels.signature import parse_signature


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



def test_snapshots_of_a_kernel_inside_a_replayed_graph(fake, cudump_run, bare_run, tmp_path):
    """capture.c replays scale(x, 2) -> vecAdd(x, y, x) -> scale(x, 0.5) ten times: the copy
    nodes around vecAdd see 2x before and 2x + y after, replay by replay, and the program's
    own result (checked against the host) is unchanged."""
    import numpy as np

    rule = tmp_path / "vec.yaml"
    rule.write_text('rules:\n  - kernel: vecAdd\n    args: [0, 1, 2]\n    format: npy\n'
                    '    overrides:\n      0: {dtype: float32, count: arg3}\n'
                    '      1: {dtype: float32, count: arg3}\n'
                    '      2: {dtype: float32, count: arg3}\n')
    program = [str(fake.programs["capture"])]
    ran = cudump_run(program, "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    records = manifest(ran.run_dir)
    assert all(r["status"] == "ok" for r in records), [r["reason"] for r in records]
    assert Counter((r["phase"], r["arg"]) for r in records) == Counter(
        {(phase, arg): 10 for phase in ("before", "after") for arg in (0, 1, 2)})
    i = np.arange(256, dtype=np.float32)
    y = (2 * (i.astype(int) % 7)).astype(np.float32)
    for r in records:
        assert (r["graph"], r["node"]) == (1, 1) and r["replay"] in range(1, 11)
        x = i + (r["replay"] - 1) * y / 2         # x before this replay
        got = np.load(ran.run_dir / r["file"])
        if r["arg"] == 1:
            assert np.array_equal(got, y)
        elif r["phase"] == "before":
            assert np.array_equal(got, 2 * x)
        else:
            assert np.array_equal(got, 2 * x + y)
    assert sorted(r["replay"] for r in records if r["arg"] == 2 and r["phase"] == "after") == \
        list(range(1, 11))


def test_the_instrumented_graph_is_made_once_while_the_plan_stays_the_same(
        fake, cudump_run, tmp_path, monkeypatch):
    """Ten replays with the same copies: the program's instantiation and one of cudump's,
    reused (the snapshots still follow the replays, as the test above shows). When a rule
    stops wanting a replay, the application's graph runs; when it wants one again with the
    same copies, the kept copy runs again."""
    stats = tmp_path / "stats.txt"
    monkeypatch.setenv("FAKECUDA_STATS", str(stats))
    rule = tmp_path / "vec.yaml"
    rule.write_text('rules:\n  - kernel: vecAdd\n    args: [2]\n    when: both\n'
                    '    format: npy\n    overrides:\n      2: {dtype: float32, count: arg3}\n')
    ran = cudump_run([str(fake.programs["capture"])], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    assert len(manifest(ran.run_dir)) == 20
    assert stats.read_text().splitlines()[0] == "graph_instantiations 2"
    rule.write_text('rules:\n  - kernel: vecAdd\n    args: [2]\n    when: after\n    every: 3\n'
                    '    format: npy\n    overrides:\n      2: {dtype: float32, count: arg3}\n')
    ran = cudump_run([str(fake.programs["capture"])], "--rule", str(rule),
                     run_dir=tmp_path / "every3")
    assert sorted(r["replay"] for r in manifest(ran.run_dir)) == [1, 4, 7, 10]
    assert stats.read_text().splitlines()[0] == "graph_instantiations 2"


def test_snapshot_filters_count_node_executions(fake, cudump_run, tmp_path):
    rule = tmp_path / "vec.yaml"
    rule.write_text('rules:\n  - kernel: vecAdd\n    args: [2]\n    when: after\n    skip: 2\n'
                    '    every: 3\n    format: npy\n'
                    '    overrides:\n      2: {dtype: float32, count: arg3}\n')
    ran = cudump_run([str(fake.programs["capture"])], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    assert sorted(r["replay"] for r in manifest(ran.run_dir)) == [3, 6, 9]
    # The shim counts the node's runs itself: only the three it takes are asked about.
    assert json.loads((ran.run_dir / "summary.json").read_text())["planned_launches"] == 3


def test_set_params_between_replays_changes_what_is_snapshotted(fake, cudump_run, tmp_path):
    """graphs.c changes the scale factor of an executable graph's node between replays
    (1.5, 2.5, 3.5), then changes the graph it was made from to 100 and replays once more:
    the snapshots follow the executable graph (3.5 again), never the application's graph."""
    import numpy as np

    rule = tmp_path / "scale.yaml"
    rule.write_text('rules:\n  - kernel: scale\n    args: [0]\n    when: after\n    format: npy\n'
                    '    overrides:\n      0: {dtype: float32, count: arg2}\n')
    ran = cudump_run([str(fake.programs["graphs"])], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    constant = []
    for r in manifest(ran.run_dir):
        assert r["status"] == "ok", r["reason"]
        got = np.load(ran.run_dir / r["file"])
        if (got == got[0]).all():
            constant.append(float(got[0]))
    assert [v for v in constant if v in (1.5, 2.5, 3.5, 100.0)] == [1.5, 2.5, 3.5, 3.5]


def test_a_breakpoint_on_a_kernel_inside_a_graph_holds_the_graph_launch(fake, cudump_run,
                                                                         bare_run, tmp_path):
    """The launch is held before the graph runs: memory is as the graph will find it; `step`
    runs the whole graph and holds again; the results are the program's own."""
    commands = tmp_path / "commands.txt"
    commands.write_text("info graph\nx/4fw arg0\nstep\nx/4fw arg0\ncontinue\ndelete\n"
                        "continue\n")
    program = [str(fake.programs["capture"])]
    ran = cudump_run(program, "--break", "vecAdd", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    lines = ran.stderr.splitlines()
    stops = [ln.split(" of ")[0] for ln in lines if " of vecAdd(" in ln]
    assert stops == ["Breakpoint 1, graph launch 4 (graph 1, replay 1, node 1)",
                     "Step, after graph launch 4 (graph 1, replay 1, node 1)",
                     "Breakpoint 1, graph launch 5 (graph 1, replay 2, node 1)"]
    at = lines.index("(cudump) info graph")
    assert lines[at + 1:at + 5] == [
        "graph 1, replay 1: 3 kernel nodes",
        "  node 0   grid (4,1,1) block (64,1,1) smem 0  scale",
        "* node 1   grid (4,1,1) block (64,1,1) smem 0  vecAdd(float const*, float const*, "
        "float*, int)",
        "  node 2   grid (4,1,1) block (64,1,1) smem 0  scale"]
    reads = [ln.split(":  ", 1)[1].split() for ln in lines if ln.startswith("0x") and ":  " in ln]
    # x before replay 1 is 0 1 2 3; after it, x + y/2 with y = 2 * (i % 7): 0 2 4 6.
    assert reads == [["0", "1", "2", "3"], ["0", "2", "4", "6"]]


def test_snapshots_of_a_kernel_inside_a_child_graph(fake, cudump_run, bare_run, tmp_path):
    """graphs.c's explicit graph (its 2nd) holds a child graph: copy `in` -> z, then
    scale(z, 3). The copy nodes go into cudump's copy of the child graph, around scale:
    before each of the 2 replays z is `in`, after it 3 * `in`; the program's results are
    its own. The graph is instantiated with cuGraphInstantiateWithParams."""
    import numpy as np

    rule = tmp_path / "scale.yaml"
    rule.write_text('rules:\n  - kernel: scale\n    args: [0]\n    when: both\n    format: npy\n'
                    '    overrides:\n      0: {dtype: float32, count: arg2}\n')
    program = [str(fake.programs["graphs"])]
    ran = cudump_run(program, "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    inner = [r for r in manifest(ran.run_dir) if r["graph"] == 2]
    assert sorted((r["replay"], r["phase"]) for r in inner) == [
        (1, "after"), (1, "before"), (2, "after"), (2, "before")]
    given = (np.arange(256) % 17 - 4).astype(np.float32)
    for r in inner:
        assert r["status"] == "ok" and r["node"] == 0, r
        got = np.load(ran.run_dir / r["file"])
        assert np.array_equal(got, given if r["phase"] == "before" else 3 * given), r


def test_a_graph_made_for_device_launch_is_named_once(fake, cudump_run, bare_run):
    """cuGraphInstantiateWithParams with the device-launch flag: one warning that launches
    from device code are not seen; its host launches are counted and run as before."""
    program = [str(fake.programs["graphs"])]
    ran = cudump_run(program)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    warnings = [ln for ln in ran.stderr.splitlines() if "device launch" in ln]
    assert len(warnings) == 1, ran.stderr
    assert warnings[0].startswith("cudump: warning: graph 6 of process ")
    assert warnings[0].endswith("was instantiated for device launch: cudump sees its launches "
                                "from the host only; launches from device code are neither "
                                "traced nor snapshotted")
    assert "device: replays 2" in ran.stdout


def test_a_breakpoint_on_a_kernel_inside_a_child_graph(fake, cudump_run, bare_run, tmp_path):
    """scale(z, 3.0f) sits in the explicit graph's child graph: the stop shows it, marked
    as in a child graph; before the graph runs z is the program's zeros, after `step`
    3 * in + 1 with in = -4, -3, -2, -1."""
    commands = tmp_path / "commands.txt"
    commands.write_text("info graph\nx/4fw arg0\nstep\nx/4fw arg0\ndelete\ncontinue\n")
    program = [str(fake.programs["graphs"])]
    three = 0x40400000  # 3.0f: scale's extern "C" parameters are raw words
    ran = cudump_run(program, "--break", f"scale if arg1 == {three}", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    lines = ran.stderr.splitlines()
    assert [ln for ln in lines if ln.startswith(("Breakpoint", "Step"))] == [
        "Breakpoint 1, graph launch 13 (graph 2, replay 1, node 0) of scale",
        "Step, after graph launch 13 (graph 2, replay 1, node 0) of scale"]
    at = lines.index("(cudump) info graph")
    assert lines[at + 1:at + 3] == [
        "graph 2, replay 1: 2 kernel nodes",
        "* node 0   grid (4,1,1) block (64,1,1) smem 0  scale (in a child graph)"]
    reads = [ln.split(":  ", 1)[1].split() for ln in lines if ln.startswith("0x") and ":  " in ln]
    assert reads == [["0", "0", "0", "0"], ["-11", "-8", "-5", "-2"]]
