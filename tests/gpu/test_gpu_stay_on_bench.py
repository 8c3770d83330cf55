"""The stay-on benchmark's measurements on a GPU (bench/stay_on.py, one short run of its
CUDA-graph decode loop): under --check-nan, cudump's kernels show in the device time as kernels
of cudump's own (cudump_*), inside the graph as its nodes, so that far fewer of them are
launched from the host than run; under --trace, none. What the benchmark says it measured is
what ran. (One workload, two rounds: the GPU suite runs under one time limit.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def table_rows(text: str, title_start: str) -> dict[str, list[str]]:
    """The figure table under the line that starts with `title_start`: mode label -> cells."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title_start))
    header = None
    rows: dict[str, list[str]] = {}
    for line in lines[at + 1:]:
        if not line.strip():
            if header is not None:
                break
            continue
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(cells[0]) <= {"-", ":"}:
            rows[cells[0]] = cells
    assert header is not None
    return {label: dict(zip(header, cells, strict=True)) for label, cells in rows.items()}


def number(cell: str) -> float:
    return float(cell.rstrip("%x"))


def test_cudumps_kernels_are_measured_where_they_run(tmp_path):
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, str(BENCH / "stay_on.py"), "--only", "decode",
                           "--runs", "1", "--rounds", "2", "--modes", "trace,check-nan"],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    out = done.stdout
    assert "FAILED" not in out, out[-6000:] + done.stderr[-3000:]
    assert done.returncode == 1, done.stderr[-3000:]      # the goals of modes not run
    rows = table_rows(out, "transformer decode step")
    check, trace = rows["cudump --check-nan (exact)"], rows["cudump --trace"]
    assert number(rows["bare"]["GPU µs/step"]) > 0, out
    assert number(check["cudump GPU"]) > 0, out
    assert number(check["cudump kernels/kernel"]) > 0, out
    # In the graph cudump's kernels are nodes: far fewer launches from the host than runs
    # (those few after the eager steps of the warm-up before the capture).
    assert number(check["cudump launches/launch"]) < number(check["cudump kernels/kernel"]) / 10
    assert number(trace["cudump GPU"]) == 0 and number(trace["cudump kernels/kernel"]) == 0
    assert number(trace["cudump launches/launch"]) == 0
    assert "- goal 2 (stay-on, CUDA-graph decode loop): not judged: stay-on did not run" in out
