"""The real-world matrix as GPU tests: one test per program, every mode, each cell as
tests/gpu/matrix/matrix.py checks it (exit status and stdout as bare, within the time
bound, every record on disk or failed for a budget, nothing lost after an abort)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "matrix"))

import matrix  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("program", matrix.PROGRAMS, ids=lambda p: p.name)
def test_every_mode_leaves_the_program_as_it_runs_bare(program: matrix.Program,
                                                       tmp_path: Path) -> None:
    missing = program.missing()
    if missing:
        pytest.skip(missing)
    modes = matrix.modes(tmp_path)
    cells = matrix.run_program(program, modes, tmp_path, 4, lambda cell: None)
    bad = [f"{c.mode}: {'; '.join(c.problems)[:2000]}" for c in cells if not c.ok]
    assert not bad, "\n".join(bad)
