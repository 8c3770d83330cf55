"""The offline tools on a run whose records name where their launches were made (scopes.py's
record fields): `ls` and `show` print it, `stats --by layer` groups the run by layer, and
`--kernel scope:GLOB` selects by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import run_cli

from cudump.commands.ls import LsCommand
from cudump.commands.show import ShowCommand
from cudump.commands.stats import StatsCommand
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord

CONV = "conv(float const*, float*)"
RELU = "relu(float*)"


def where(layer: str | None, step: int = 0, pass_: str = "forward") -> dict:
    if layer is None:
        return {}
    return {"scope": ["Net", layer], "layer": layer, "pass": pass_, "step": step,
            "source": "train.py:57"}


def launch(n: int, kernel: str, layer: str | None, **more: object) -> dict:
    return {"event": "launch", "launch": n, "pid": 7, "device": 0, "kernel": kernel,
            "mangled": "_Z" + kernel.split("(")[0], "grid": [1, 1, 1], "block": [32, 1, 1],
            "smem": 0, "stream": "0x0", "api": "cuLaunchKernel", "captured": False,
            **where(layer), **more}


def report(n: int, kernel: str, layer: str | None, origin: str) -> SnapshotRecord:
    return SnapshotRecord(kernel=kernel, mangled="_Zk", launch=n, occurrence=1, pid=7,
                          grid=[1, 1, 1], block=[32, 1, 1], stream="0x0", arg=1,
                          type="float*", phase="after", address="0x1000", dtype="float32",
                          shape=[4], file=None,
                          extra={"nonfinite": 1, "first_nonfinite": 0, "nonfinite_before": 0,
                                 "elements": 4, "nan_producer": True, "origin": origin,
                                 **where(layer)})


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """conv1 then relu1 then conv2 then fc's kernels; conv2 produces Inf (launch 5), relu2
    and fc carry it on; launch 1 is outside every scope."""
    root = tmp_path / "run"
    root.mkdir()
    trace = [launch(1, RELU, None), launch(2, CONV, "conv1"), launch(3, RELU, "relu1"),
             launch(4, CONV, "conv1", step=1), launch(5, CONV, "conv2"),
             launch(6, RELU, "relu2"), launch(7, CONV, "fc"), launch(8, RELU, "fc")]
    (root / "trace.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trace))
    writer = ManifestWriter(root)
    for rec in (report(5, CONV, "conv2", "produced"), report(6, RELU, "relu2", "propagated"),
                report(8, RELU, "fc", "propagated")):
        writer.append(rec)
    writer.close()
    return root


def test_stats_by_layer(run, capsys):
    code, out, _ = run_cli(StatsCommand(), [str(run), "--by", "layer"], capsys)
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["layer", "pass", "steps", "launches", "kernels", "NaN/Inf", "produced",
                       "propagated"]
    assert [r for r in rows[1:-1]] == [
        ["(no", "scope)", "-", "-", "1", "1", "-", "0", "0"],
        ["conv1", "forward", "0-1", "2", "1", "-", "0", "0"],
        ["relu1", "forward", "0", "1", "1", "-", "0", "0"],
        ["conv2", "forward", "0", "1", "1", "produced", "1", "0"],
        ["relu2", "forward", "0", "1", "1", "propagated", "0", "1"],
        ["fc", "forward", "0", "2", "2", "propagated", "0", "1"]]
    assert out.splitlines()[-1] == "5 layers, 8 launches (from trace.jsonl)"


def test_stats_by_layer_of_a_manifest_alone_and_of_a_run_without_scopes(run, capsys):
    (run / "trace.jsonl").unlink()
    _, out, _ = run_cli(StatsCommand(), [str(run), "--by", "layer"], capsys)
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["conv2", "relu2", "fc"]
    assert out.splitlines()[-1].startswith("3 layers, 3 launches (from manifest.jsonl; ")
    (run / "trace.jsonl").write_text(json.dumps(launch(1, RELU, None)) + "\n")
    (run / "manifest.jsonl").unlink()
    _, out, _ = run_cli(StatsCommand(), [str(run), "--by", "layer"], capsys)
    assert out.splitlines()[-1].startswith("no launch of this run names a scope")


def test_stats_by_kernel_of_one_scope(run, capsys):
    _, out, _ = run_cli(StatsCommand(), [str(run), "--kernel", "scope:conv*"], capsys)
    rows = {line.split()[0]: line for line in out.splitlines()[1:-1]}
    assert set(rows) == {"conv"}           # relu ran in no conv* scope
    assert out.splitlines()[-1].startswith("1 kernel, 3 launches (from trace.jsonl")
    _, out, _ = run_cli(StatsCommand(), [str(run), "--by", "layer", "--kernel", "scope:fc"],
                        capsys)
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["fc"]


def test_ls_and_show_print_where_each_record_was_made(run, capsys):
    code, out, _ = run_cli(LsCommand(), [str(run)], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[-1] == "where"
    assert lines[1].endswith("in conv2 (forward, step 0) at train.py:57")
    _, out, _ = run_cli(LsCommand(), [str(run), "--kernel", "scope:relu*"], capsys)
    assert [line.split()[2] for line in out.splitlines()[1:-1]] == ["6"]
    assert out.splitlines()[-1].startswith("1 of 3 records")
    _, out, _ = run_cli(ShowCommand(), [str(run), "--index", "0"], capsys)
    assert "  in conv2 (forward, step 0) at train.py:57" in out.splitlines()
    _, out, _ = run_cli(ShowCommand(), [str(run), "--kernel", "scope:train.py:57",
                                        "--phase", "after", "--launch", "8"], capsys)
    assert "  in fc (forward, step 0) at train.py:57" in out.splitlines()


def test_ls_of_records_without_where_keeps_its_columns(run, capsys):
    lines = (run / "manifest.jsonl").read_text().splitlines()
    bare = []
    for line in lines:
        data = json.loads(line)
        for key in ("scope", "layer", "pass", "step", "source"):
            data.pop(key, None)
        bare.append(json.dumps(data))
    (run / "manifest.jsonl").write_text("\n".join(bare) + "\n")
    _, out, _ = run_cli(LsCommand(), [str(run)], capsys)
    assert "where" not in out.splitlines()[0]
