"""The real-world matrix's record check (tests/gpu/matrix/matrix.py), on the CPU: which
failed records a cell may hold and stay green, and how the table counts them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu" / "matrix"))

import matrix  # noqa: E402

from cudump.policy.snapshot.planned import STALLED_COPY  # noqa: E402
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


def test_a_copy_let_go_for_the_program_is_counted_apart_and_the_cell_stays_green(
        tmp_path: Path) -> None:
    cell = check(tmp_path, STALLED_COPY, STALLED_COPY, "--max-bytes 100 reached")
    assert cell.ok, cell.problems
    assert cell.let_go == 2
    bare = matrix.Cell(PROGRAM.name, "bare", seconds=1.0)
    table = matrix.table([bare, cell], [MODE.name])
    assert "ok 0.00x, 1 over budget, 2 let go" in table


def test_a_record_failed_for_any_other_reason_fails_the_cell(tmp_path: Path) -> None:
    cell = check(tmp_path, STALLED_COPY, "the copy failed with CUDA error 700")
    assert not cell.ok
    assert "failed records" in cell.problems[0]
