"""A launch's where (layer, pass, step, source line) in what cudump says and records of it
live: the NaN/Inf report and its manifest record, the --layers hint of a Python program
with no scopes, and the summary's first producer."""

from __future__ import annotations

from dataclasses import replace

from pair_kernel import PAIR_FUNC, pair_launch, scanning
from records import manifest

from cudump.launches.process import ProcessState
from cudump.launches.scopes import ScopeKind, ScopeNode
from cudump.policy.snapshot.origin import Origin
from cudump.wire.digest import Scan

WHERE_TEXT = "in layer3.0.conv1 (forward, step 2) at train.py:57"
WHERE_FIELDS = {"scope": ["ResNet", "layer3.0.conv1"], "layer": "layer3.0.conv1",
                "pass": "forward", "step": 2, "source": "train.py:57"}


def scoped(proc: ProcessState) -> ProcessState:
    for node in (ScopeNode(1, 0, ScopeKind.FORWARD, "ResNet"),
                 ScopeNode(2, 1, ScopeKind.FORWARD, "layer3.0.conv1"),
                 ScopeNode(9, 0, ScopeKind.SOURCE, "train.py:57")):
        proc.scopes.add(node)
    return proc


def report_one(tmp_path, capsys, proc: ProcessState, scope: int) -> tuple[str, dict]:
    """Launch 1 of the pair kernel planned and reported as producing NaN/Inf in its first
    buffer: what was said, and the producer's manifest record."""
    snapshots = scanning(tmp_path)
    try:
        assert snapshots.wants(proc, PAIR_FUNC)
        event = pair_launch(1, 0x10000, 0x10800)
        if scope:
            event = replace(event, scope=scope, step=3, source=9)
        planned = snapshots.plan(proc, PAIR_FUNC, event, 1 << 20)
        assert planned is not None
        after = next(c for c in planned.copies if c.phase == "after")
        snapshots.report.launch(planned, after, Scan(4, 3), Origin())
    finally:
        snapshots.close()
    (record,) = [r for r in manifest(tmp_path) if r.get("nan_producer")]
    return capsys.readouterr().err, record


def test_a_nan_report_names_the_layer_step_and_line(tmp_path, capsys):
    said, record = report_one(tmp_path, capsys, scoped(ProcessState(1, 0, "prog", rank=1)), 2)
    assert (f"cudump: NaN/Inf: launch 1 of {PAIR_FUNC.demangled} {WHERE_TEXT} (occurrence 1, "
            "process 1, rank 1) produced 4 of ") in said
    assert "--layers" not in said
    assert {k: record[k] for k in WHERE_FIELDS} == WHERE_FIELDS


def test_a_report_without_scopes_keeps_its_words(tmp_path, capsys):
    said, record = report_one(tmp_path, capsys, ProcessState(1, 0, "prog"), 0)
    assert f"launch 1 of {PAIR_FUNC.demangled} (occurrence 1, process 1) produced" in said
    assert not set(WHERE_FIELDS) & set(record) and "--layers" not in said


def test_a_python_program_without_scopes_is_told_of_the_layers_flag(tmp_path, capsys):
    """Process 1 is no Python program of this test's: its maps are not read (its pid is
    no process's here, or one without PyTorch), so an interpreter's name decides."""
    proc = ProcessState(2 ** 22 + 17, 0, "/usr/bin/python3.12")
    said, _ = report_one(tmp_path, capsys, proc, 0)
    assert said.splitlines()[-1] == ("cudump: hint: run with --layers to name the PyTorch "
                                     "module, step and line behind each NaN/Inf report")
    assert not said.splitlines()[-1].startswith("cudump: NaN/Inf: ")   # no report's words


def test_the_summary_names_the_first_producers_layer(tmp_path, capsys):
    """The first producer the tally keeps has the record's where: the summary line names it
    and summary.json has its fields."""
    import json

    from cudump.rundir.summary import RunSummary
    (tmp_path / "run").mkdir()
    snapshots = scanning(tmp_path / "run")
    proc = scoped(ProcessState(1, 0, "prog", rank=1))
    try:
        assert snapshots.wants(proc, PAIR_FUNC)
        event = replace(pair_launch(1, 0x10000, 0x10800), scope=2, step=3, source=9)
        planned = snapshots.plan(proc, PAIR_FUNC, event, 1 << 20)
        assert planned is not None
        after = next(c for c in planned.copies if c.phase == "after")
        snapshots.report.launch(planned, after, Scan(4, 3), Origin())
        first = snapshots.state.tally.first_producer
    finally:
        snapshots.close()
    summary = RunSummary(processes=1, pids=[1], nan_reports=1, nan_producers=1,
                         nan_produced=1, first_nan_producer=first, first_nan_report=first)
    assert summary.line().endswith(f"(first produced by launch 1 of {PAIR_FUNC.demangled} "
                                   f"{WHERE_TEXT} (rank 1))")
    summary.write(tmp_path)
    written = json.loads((tmp_path / "summary.json").read_text())["first_nan_producer"]
    assert written == {"kind": "launch", "pid": 1, "launch": 1,
                       "kernel": PAIR_FUNC.demangled, "rank": 1, **WHERE_FIELDS}
