"""The real-world matrix's record check (tests/gpu/matrix/matrix.py), on the CPU: which
failed records a cell may hold and stay green, and how the table counts them; and its
neighbour process (`--neighbour`), started, waited for and stopped."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu" / "matrix"))

import matrix  # noqa: E402

from cudump.policy.snapshot.planned import HOLD_NOT_SERVED, STALLED_COPY  # noqa: E402
from cudump.rundir.layout import MANIFEST_FILE as MANIFEST
from cudump.rundir.manifest import SnapshotRecord  # noqa: E402

PROGRAM = matrix.Program("prog", ("py:prog.py",))
MODE = matrix.Mode("check-nan", ("--check-nan",), takes_records=True)


def record(launch: int, reason: str) -> SnapshotRecord:
    return SnapshotRecord(kernel="k", mangled="_Z1kPf", launch=launch, occurrence=launch,
                          pid=1, grid=[1, 1, 1], block=[32, 1, 1], stream="0x0", arg=0,
                          type="float*", phase="after", address="0x1000", dtype=None,
                          shape=None, file=None, status="error", reason=reason)


def check(tmp_path: Path, *reasons: str) -> matrix.Cell:
    lines = [record(i + 1, r).to_json() for i, r in enumerate(reasons)]
    (tmp_path / MANIFEST).write_text("".join(line + "\n" for line in lines))
    cell = matrix.Cell(PROGRAM.name, MODE.name)
    matrix.check_records(cell, tmp_path, PROGRAM, MODE)
    return cell


def test_a_snapshot_let_go_fails_the_cell_and_is_counted_in_the_table(tmp_path: Path) -> None:
    """A NaN producer's buffers let go (the copies were not made while its stream was held)
    are what the user came for: the goal is none, so each fails its cell."""
    cell = check(tmp_path, STALLED_COPY, HOLD_NOT_SERVED, "--max-bytes 100 reached")
    assert not cell.ok
    assert cell.let_go == 2
    assert cell.problems[0] == "2 snapshots let go (a held launch's buffers lost)"
    bare = matrix.Cell(PROGRAM.name, "bare", seconds=1.0)
    table = matrix.table([bare, cell], [MODE.name])
    assert "FAIL 0.00x, 2 let go" in table


def test_a_record_over_budget_alone_leaves_the_cell_green(tmp_path: Path) -> None:
    cell = check(tmp_path, "--max-bytes 100 reached")
    assert cell.ok, cell.problems
    bare = matrix.Cell(PROGRAM.name, "bare", seconds=1.0)
    assert "ok 0.00x, 1 over budget |" in matrix.table([bare, cell], [MODE.name])


def test_a_record_failed_for_any_other_reason_fails_the_cell(tmp_path: Path) -> None:
    cell = check(tmp_path, "--max-bytes 100 reached", "the copy failed with CUDA error 700")
    assert not cell.ok
    assert "failed records" in cell.problems[0]


NEIGHBOUR = """import signal, sys, time
stopped = False
def stop(*_):
    global stopped
    stopped = True
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
if len(sys.argv) > 1 or "{mode}" == "dies":
    sys.exit(3)
while not stopped:
    time.sleep(0.01)
print("gemms 8 in 0.1 s", flush=True)
"""


def test_the_neighbour_runs_until_stopped(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "neighbour_fake.py").write_text(NEIGHBOUR.format(mode="runs"))
    monkeypatch.setattr(matrix, "HERE", tmp_path)
    neighbour = matrix.Neighbour("fake")
    assert neighbour.started()
    assert neighbour.proc.poll() is None
    assert neighbour.stop() is None
    assert "neighbour fake: ready / gemms 8 in 0.1 s" in capsys.readouterr().out


def test_a_neighbour_that_ends_early_says_so(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "neighbour_fake.py").write_text(NEIGHBOUR.format(mode="dies"))
    monkeypatch.setattr(matrix, "HERE", tmp_path)
    neighbour = matrix.Neighbour("fake")
    neighbour.started()
    neighbour.proc.wait()
    assert neighbour.stop() == "the neighbour ended early (exit 3)"
