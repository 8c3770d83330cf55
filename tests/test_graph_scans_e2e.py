"""Digests and NaN/Inf scans of kernels inside graph launches, on the stand-in driver:
cudump's kernel runs as kernel nodes of the instrumented graph, next to the node, and gives
what the same kernels give launched without a graph (graph_scans.c: a captured graph, and an
explicit one whose vecAdd sits in a child graph; --direct makes the same launches on the
stream)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from records import manifest, summary

VECADD = "vecAdd(float const*, float const*, float*, int)"


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def in_order(run_dir: Path) -> list[tuple]:
    """(kernel, arg, phase, digest, bytes) of every digest, launch by launch, kernel node by
    kernel node, argument by argument."""
    records = manifest(run_dir)
    assert all(r["status"] == "ok" for r in records), [r["reason"] for r in records]
    records.sort(key=lambda r: (r["launch"], r.get("node", 0), r["arg"],
                                r["phase"] == "after"))
    return [(r["kernel"], r["arg"], r["phase"], r["digest"], r["bytes"]) for r in records]


# How the program put y's NaN there, before its first launch.
COPY = "a host-to-device copy of 1024 bytes (cuMemcpyHtoD) before launch 1"


def test_check_nan_names_the_kernel_node_that_left_a_nan(fake, cudump_run, bare_run):
    """y[5] is NaN: each graph's vecAdd leaves NaN in its output in its first replay (the
    second's in a child graph). Both are reported as kernel nodes (graph, replay, node), the
    program's results are its own, and no record failed; the same producers are found when
    the launches are made without a graph."""
    program = [str(fake.programs["graph_scans"]), "--nan"]
    ran = cudump_run(program, "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    records = manifest(ran.run_dir)
    assert all(r["status"] == "ok" for r in records), [r["reason"] for r in records]
    found = [(r["graph"], r["replay"], r["node"], r["kernel"], r["arg"], r["phase"],
              r["nonfinite"], r["first_nonfinite"], r["elements"]) for r in records]
    assert found == [(1, 1, 1, VECADD, 2, "after", 1, 5, 256),
                     (2, 1, 0, VECADD, 2, "after", 1, 5, 256)]
    pid = records[0]["pid"]
    warnings = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf")]
    assert warnings == [
        f"cudump: NaN/Inf: launch {records[0]['launch']} of {VECADD} (graph 1, replay 1, "
        f"node 1, process {pid}) left 1 of 256 elements of arg 2 non-finite where there were none, "
        f"the first at index 5; propagated: arg 1 was already non-finite (from {COPY})",
        f"cudump: NaN/Inf: launch {records[1]['launch']} of {VECADD} (graph 2, replay 1, "
        f"node 0, process {pid}) left 1 of 256 elements of arg 2 non-finite where there were none, "
        "the first at index 5; propagated: arg 0 (from launch "
        f"{records[0]['launch']} of {VECADD}) and arg 1 (from {COPY}) were already non-finite"]
    line = last_line(ran.stderr)
    # The two launches, and the host's copy of y, which they read.
    assert ("2 NaN/Inf reports, 1 host write that left NaN/Inf (first produced by a "
            "host-to-device copy") in line, line
    assert "failed" not in line, line
    assert summary(ran.run_dir)["snapshot_errors"] == 0

    direct = cudump_run([*program, "--direct"], "--check-nan", run_dir=ran.run_dir.parent / "d")
    assert direct.returncode == 0, direct.stderr
    same = [(r["kernel"], r["arg"], r["nonfinite"], r["first_nonfinite"])
            for r in manifest(direct.run_dir) if "nonfinite" in r]
    assert same == [(VECADD, 2, 1, 5)] * 2


def test_a_producer_held_right_before_a_graph_launch_is_snapshotted(fake, cudump_run,
                                                                     bare_run):
    """A plain launch leaves NaN and its stream is held; the program's graph launch comes
    right behind it on that stream. The graph launch, which waits for its replay on the
    GPU, first sees the held launch served: the producer's buffers are snapshotted as it
    left them, not let go."""
    program = [str(fake.programs["graph_scans"]), "--nan", "--held"]
    ran = cudump_run(program, "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    records = manifest(ran.run_dir)
    assert all(r["status"] == "ok" for r in records), [r["reason"] for r in records]
    plain = [r for r in records if "graph" not in r]
    (producer,) = [r for r in plain if "nonfinite" in r]
    snaps = {r["arg"]: r for r in plain if r.get("file")}
    assert sorted(snaps) == [0, 1, 2]
    assert all(r["launch"] == producer["launch"] for r in snaps.values())
    w = np.load(ran.run_dir / snaps[2]["file"])
    assert np.isnan(w[5]) and np.isfinite(np.delete(w, 5)).all()
    assert "failed" not in last_line(ran.stderr)


def test_check_nan_over_clean_replays_fails_nothing_and_builds_each_graph_once(
        fake, cudump_run, bare_run, tmp_path, monkeypatch):
    """No NaN: every scan runs (none fails, nothing is reported), and each executable graph
    is instrumented once and that copy replayed: the program's two instantiations and
    cudump's two."""
    stats = tmp_path / "stats.txt"
    monkeypatch.setenv("FAKECUDA_STATS", str(stats))
    program = [str(fake.programs["graph_scans"])]
    ran = cudump_run(program, "--check-nan")
    assert ran.returncode == 0, ran.stderr
    # (read before the bare run, which writes the file too)
    assert stats.read_text().splitlines()[0] == "graph_instantiations 4"
    assert ran.stdout == bare_run(program).stdout
    assert manifest(ran.run_dir) == []
    assert "NaN" not in ran.stderr and "failed" not in last_line(ran.stderr)
    assert summary(ran.run_dir)["snapshot_errors"] == 0


def test_digests_inside_graph_replays_equal_those_of_the_same_launches(fake, cudump_run,
                                                                       bare_run, tmp_path):
    """--digest over the replays: every buffer of every kernel node, before and after, the
    records saying graph/replay/node; digest for digest, they are those of the same launches
    made on the stream without a graph."""
    program = [str(fake.programs["graph_scans"])]
    graphs = cudump_run(program, "--digest", run_dir=tmp_path / "graphs")
    direct = cudump_run([*program, "--direct"], "--digest", run_dir=tmp_path / "direct")
    assert graphs.returncode == 0 and direct.returncode == 0, graphs.stderr + direct.stderr
    assert graphs.stdout == bare_run(program).stdout
    records = manifest(graphs.run_dir)
    # scale has one buffer, vecAdd three; graph 1 replays 4 times, graph 2 twice
    assert len(records) == 4 * (1 + 3 + 1) * 2 + 2 * (3 + 1) * 2 == 56
    assert {(r["graph"], r["node"]) for r in records} == {(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)}
    assert sorted({r["replay"] for r in records if r["graph"] == 1}) == [1, 2, 3, 4]
    assert in_order(graphs.run_dir) == in_order(direct.run_dir)
    for run in (graphs, direct):
        line = last_line(run.stderr)
        assert "56 digests" in line and "failed" not in line, line


def test_break_on_nan_inside_a_graph_holds_the_graph_launch_after_it_ran(
        fake, cudump_run, bare_run, tmp_path):
    """--break-on-nan: the first producer is a kernel node, so the graph launch that ran it is
    held once the graph has run (its buffers as the graph left them), then goes on; the
    second producer is reported without another stop."""
    commands = tmp_path / "commands.txt"
    commands.write_text("info graph\nx/1fw arg2+20\ncontinue\n")
    program = [str(fake.programs["graph_scans"]), "--nan"]
    ran = cudump_run(program, "--break-on-nan", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    lines = ran.stderr.splitlines()
    stops = [ln for ln in lines if ln.startswith("NaN/Inf in arg")]
    assert len(stops) == 1, ran.stderr
    assert stops[0].startswith("NaN/Inf in arg 2: 1 of 256 elements, the first at index 5, "
                               "after graph launch ")
    assert stops[0].endswith(f" (graph 1, replay 1, node 1) of {VECADD}")
    at = lines.index("(cudump) info graph")
    assert lines[at + 1] == "graph 1, replay 1: 3 kernel nodes"
    assert lines[at + 3].startswith("* node 1 ")
    assert lines[lines.index("(cudump) x/1fw arg2+20") + 1].endswith(":  nan")
    assert "Continuing." in lines
    assert sum(1 for ln in lines if ln.startswith("cudump: NaN/Inf")) == 2


def test_without_cudumps_kernel_the_graph_runs_as_it_is(fake, cudump_run, bare_run, tmp_path,
                                                        monkeypatch):
    """A driver that cannot load cudump's kernel (its PTX): each scan inside a graph fails with
    that reason, as it does on the stream, and cudump makes no graph of its own: the
    application's runs, with its own results."""
    stats = tmp_path / "stats.txt"
    monkeypatch.setenv("FAKECUDA_STATS", str(stats))
    monkeypatch.setenv("FAKECUDA_NO_PTX", "1")
    program = [str(fake.programs["graph_scans"]), "--nan"]
    ran = cudump_run(program, "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert stats.read_text().splitlines()[0] == "graph_instantiations 2"
    assert ran.stdout == bare_run(program).stdout
    records = manifest(ran.run_dir)
    assert len(records) == 6 * 6   # vecAdd's 3 buffers, before and after, 6 replays
    reasons = {r["reason"] for r in records}
    assert reasons == {"the driver cannot load cudump's kernel from its PTX (CUDA error 222); "
                       "it needs a CUDA 13 driver"}, reasons
    assert {r["graph"] for r in records} == {1, 2}
    direct = cudump_run([*program, "--direct"], "--check-nan", run_dir=tmp_path / "direct")
    assert {r["reason"] for r in manifest(direct.run_dir)} == reasons
