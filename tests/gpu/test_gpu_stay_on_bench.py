"""The stay-on benchmark's measurements on a GPU (bench/stay_on.py, one short run): under
--check-nan, cudump's kernels show in the device time of an eager training step and of a
CUDA-graph decode loop, as kernels of cudump's own (cudump_*): after the eager launches from
the host, inside the graph as its nodes (so few or no launches of cudump's from the host per
program kernel); under --trace, none. What the benchmark says it measured is what ran."""

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
    done = subprocess.run([sys.executable, str(BENCH / "stay_on.py"), "--quick", "--only",
                           "gpt,decode", "--modes", "trace,check-nan"], capture_output=True,
                          text=True, timeout=900, cwd=tmp_path)
    out = done.stdout
    assert "FAILED" not in out, out[-6000:] + done.stderr[-3000:]
    assert done.returncode in (0, 1), done.stderr[-3000:]      # 1: a goal not met
    for title in ("small GPT", "transformer decode step"):
        rows = table_rows(out, title)
        check, trace = rows["cudump --check-nan (exact)"], rows["cudump --trace"]
        assert number(check["cudump GPU"]) > 0, out
        assert number(check["cudump kernels/kernel"]) > 0, out
        assert number(trace["cudump GPU"]) == 0 and number(trace["cudump kernels/kernel"]) == 0
        assert number(trace["cudump launches/launch"]) == 0
        assert number(rows["bare"]["GPU µs/step"]) > 0
    # In the graph, cudump's kernels are nodes: fewer launches from the host than they run.
    decode = table_rows(out, "transformer decode step")["cudump --check-nan (exact)"]
    assert number(decode["cudump launches/launch"]) < number(decode["cudump kernels/kernel"])
    assert "| 4 exact --check-nan keeps its figures" in out
