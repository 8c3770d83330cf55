"""Showing a differing buffer of the snapshot runs: the file diff's report and the elements
that differ."""

from __future__ import annotations

from pathlib import Path

from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.report.text import file_report
from cudump.analysis.spots import difference_spots
from cudump.errors import CudumpError
from cudump.rundir.runs import Snapshot


def _shown_path(snap: Snapshot, work: Path, shown: Path | None) -> str:
    """A snapshot's file as the user can find it: under the work directory as they named it
    (`shown`), or relative to a work directory that will be removed."""
    path = snap.path or snap.run_dir
    try:
        inside = path.relative_to(work.resolve())
    except ValueError:
        return str(path)
    return str(shown / inside if shown is not None else inside)


def buffer_report(pair: PairResult, tol: Tolerance, work: Path,
                  shown: Path | None = None) -> list[str]:
    """A differing pair of the snapshot runs: the file diff's report and where it differs."""
    assert pair.a is not None and pair.b is not None
    r = pair.a.record
    head = f"  arg {r.arg}" + (f" ({r.type})" if r.type else "") + f" {r.phase}:"
    if pair.metrics is None:
        return [head, f"    {pair.reason or pair.status}"]
    names = (_shown_path(pair.a, work, shown), _shown_path(pair.b, work, shown))
    lines = [head] + ["    " + ln for ln in file_report(*names, pair.metrics, tol)]
    try:
        spots = difference_spots(pair.a.load(), pair.b.load(), tol)
    except (CudumpError, OSError, ValueError, MemoryError) as err:
        return lines + [f"    (cannot read the arrays again to list the elements: {err})"]
    return lines + ["    " + ln for ln in spots.lines()]
