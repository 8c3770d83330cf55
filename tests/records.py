"""A run directory's manifest as the JSON objects of its records, the way read_manifest
gives them (template and per-launch digest lines expanded); its summary; and the NaN/Inf
reports a run printed."""

from __future__ import annotations

import json
from pathlib import Path

from cudump.rundir.layout import MANIFEST_FILE as MANIFEST
from cudump.rundir.manifest import read_manifest


def manifest(run_dir: Path) -> list[dict]:
    """Every record, in order; none if the run wrote no manifest."""
    if not (Path(run_dir) / MANIFEST).exists():
        return []
    return [json.loads(r.to_json()) for r in read_manifest(run_dir)]


def summary(run_dir: Path) -> dict:
    """The run's summary.json."""
    return json.loads((Path(run_dir) / "summary.json").read_text())


def nan_lines(stderr: str) -> list[str]:
    """The NaN/Inf reports cudump printed, in order."""
    return [line for line in stderr.splitlines() if line.startswith("cudump: NaN/Inf")]
