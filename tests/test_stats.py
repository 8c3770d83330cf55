"""`cudump stats RUN` and the offline tools on a run without snapshots (a --trace run):
`ls` shows its kernels instead of refusing it, `show` says it holds no snapshots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import run_cli

from cudump.analysis.stats import run_stats
from cudump.commands.ls import LsCommand
from cudump.commands.show import ShowCommand
from cudump.commands.stats import StatsCommand
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord

PAINT = "void cam::paint<2>(uchar4*, int)"
ADD = "vecAdd(float const*, float const*, float*, int)"


def trace_line(kernel: str, grid: int, block: int, event: str = "launch",
               captured: bool = False) -> str:
    return json.dumps({"event": event, "launch": 1, "pid": 7, "device": 0, "kernel": kernel,
                       "mangled": "_Z" + kernel.split("(")[0].split()[-1], "grid": [grid, 1, 1],
                       "block": [block, 1, 1], "smem": 0, "stream": "0x0",
                       "api": "cuLaunchKernel", "captured": captured})


def record(kernel: str, **changes: object) -> SnapshotRecord:
    base = SnapshotRecord(kernel=kernel, mangled="_Zk", launch=1, occurrence=1, pid=7,
                          grid=[1, 1, 1], block=[32, 1, 1], stream="0x0", arg=0, type="float*",
                          phase="after", address="0x1000", dtype="float32", shape=[4],
                          file="x.npy")
    for name, value in changes.items():
        setattr(base, name, value)
    return base


@pytest.fixture
def full_run(tmp_path: Path) -> Path:
    """A run with all three files: paint launched 3 times in two shapes, vecAdd twice in a
    graph; a snapshot, a failed one, a digest and a NaN/Inf report of vecAdd."""
    root = tmp_path / "run"
    root.mkdir()
    (root / "summary.json").write_text(json.dumps({
        "kernels": {PAINT: 3, ADD: 2}, "graph_kernels": {ADD: 2}}))
    lines = [trace_line(PAINT, 4, 128), trace_line(PAINT, 8, 64), trace_line(PAINT, 4, 128),
             trace_line(ADD, 2, 32, captured=True),
             json.dumps({"event": "graph-launch", "launch": 5, "pid": 7, "exec": "0x1"}),
             trace_line(ADD, 2, 32, "graph-kernel"), trace_line(ADD, 2, 32, "graph-kernel")]
    (root / "trace.jsonl").write_text("\n".join(lines) + "\n")
    writer = ManifestWriter(root)
    writer.append(record(ADD))
    writer.append(record(ADD, file=None, status="error", reason="freed"))
    writer.append(record(ADD, file=None, extra={"digest": "0123456789abcdef", "bytes": 16}))
    writer.append(record(ADD, file=None, extra={"nonfinite": 3, "elements": 4,
                                                "first_nonfinite": 1}))
    writer.close()
    return root


def test_stats_of_a_run_with_every_file(full_run: Path, capsys) -> None:
    stats = run_stats(full_run)
    assert stats.sources == ["summary.json", "trace.jsonl", "manifest.jsonl"]
    paint, add = stats.select(None)
    assert (paint.kernel, paint.launches, paint.graph, len(paint.shapes)) == (PAINT, 3, 0, 2)
    assert paint.common_shape() == (((4, 1, 1), (128, 1, 1)), 2)
    assert (add.launches, add.graph, add.snapshots, add.failed, add.digests,
            add.nan_reports) == (2, 2, 1, 1, 1, 1)
    code, out, _ = run_cli(StatsCommand(), [str(full_run)], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["kernel", "launches", "in", "graphs", "shapes", "most",
                                "common", "grid", "/", "block", "snapshots", "failed",
                                "digests", "NaN/Inf"]
    assert lines[1].split() == ["void", "cam::paint<2>", "3", "0", "2", "(4,1,1)", "/",
                                "(128,1,1)", "(2", "of", "3)", "0", "0", "0", "0"]
    assert lines[2].split() == ["vecAdd", "2", "2", "1", "(2,1,1)", "/", "(32,1,1)", "1", "1",
                                "1", "1"]
    assert lines[3] == ("2 kernels, 5 launches (from summary.json, trace.jsonl, "
                        "manifest.jsonl)")
    code, out, _ = run_cli(StatsCommand(), [str(full_run), "--kernel", "vecAdd"], capsys)
    assert code == 0 and "paint" not in out and out.splitlines()[-1].startswith("1 kernel, 2 ")


def test_without_a_summary_the_trace_counts(full_run: Path) -> None:
    (full_run / "summary.json").unlink()
    with (full_run / "trace.jsonl").open("a") as f:
        f.write('{"event":"launch","kernel":"cut sh')          # killed while writing it
    stats = run_stats(full_run)
    paint, add = stats.select(None)
    assert (paint.launches, add.launches, add.graph) == (3, 2, 2)
    assert stats.launches_from == "trace.jsonl"


def test_a_bad_trace_line_is_named(full_run: Path, capsys) -> None:
    text = (full_run / "trace.jsonl").read_text().splitlines()
    text.insert(1, "not json")
    (full_run / "trace.jsonl").write_text("\n".join(text) + "\n")
    code, _, err = run_cli(StatsCommand(), [str(full_run)], capsys)
    assert code == 2
    assert err.startswith(f"cudump: error: {full_run / 'trace.jsonl'}:2: not a trace record")


def test_a_directory_that_is_no_run_is_refused(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(StatsCommand(), [str(tmp_path)], capsys)
    assert code == 2 and "is not a cudump run directory" in err


def test_a_trace_only_run_is_read_by_ls_stats_and_show(fake, cudump_run, capsys) -> None:
    """`--trace` writes no manifest: ls shows the run's kernels (and says there are no
    snapshots), stats the same, show says there is nothing to show and where to look."""
    ran = cudump_run([str(fake.programs["procs"]), "4"], "--trace")
    assert ran.returncode == 0, ran.stderr
    assert not (ran.run_dir / "manifest.jsonl").exists()
    run = str(ran.run_dir)
    code, out, err = run_cli(LsCommand(), [run], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].split()[:5] == ["vecAdd", "8", "0", "1", "(4,1,1)"]
    assert lines[-1] == (f"0 snapshots: {run} has no manifest.jsonl (no rule took any); the "
                         f"kernels above are `cudump stats {run}`")
    code, stats_out, _ = run_cli(StatsCommand(), [run], capsys)
    assert code == 0 and stats_out.splitlines() == lines[:-1]
    code, _, err = run_cli(ShowCommand(), [run, "--index", "0"], capsys)
    assert code == 2
    assert err == (f"cudump: error: {run} holds no snapshots (no manifest.jsonl: no rule took "
                   f"any); `cudump stats {run}` shows its kernels\n")
