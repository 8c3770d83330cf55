"""A run directory's manifest as the JSON objects of its records, the way read_manifest
gives them (templates and batches of digests expanded); the launches of its batches of
digests, as written; its summary; and the NaN/Inf reports a run printed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cudump.rundir.digest_batches import BATCH, DIGEST, LAUNCH
from cudump.rundir.layout import DIGESTS_FILE
from cudump.rundir.layout import MANIFEST_FILE as MANIFEST
from cudump.rundir.manifest import read_manifest


def manifest(run_dir: Path) -> list[dict]:
    """Every record, in order; none if the run wrote no manifest. Each record of a file
    written is checked against that file: its dtype and shape are the .npy's own."""
    if not (Path(run_dir) / MANIFEST).exists():
        return []
    records = [json.loads(r.to_json()) for r in read_manifest(run_dir)]
    for record in records:
        check_file_record(Path(run_dir), record)
    return records


def check_file_record(run_dir: Path, record: dict) -> None:
    """A record that names an .npy says the dtype and shape that file holds (a record
    without its dtype leaves `cudump show`, `diff` and `replay` guessing)."""
    if record.get("status", "ok") != "ok" or not record.get("file"):
        return
    assert isinstance(record.get("dtype"), str), f"a record without its dtype: {record}"
    path = run_dir / record["file"]
    if not path.exists():
        return      # written after the manifest line, or removed by the test itself
    with path.open("rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read_header = (np.lib.format.read_array_header_1_0 if major == 1
                       else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read_header(f)
    assert record["dtype"] == dtype.name, f"dtype {record['dtype']} of a {dtype.name} file"
    assert record.get("shape") is None or list(record["shape"]) == list(shape), record


def digests_by_buffer(run_dir: Path) -> dict[tuple, str]:
    """The digests of the run's records, by launch, argument, offset and phase."""
    return {(r["launch"], r["arg"], r.get("offset", 0), r["phase"]): r["digest"]
            for r in manifest(run_dir) if "digest" in r}


def raw_lines(run_dir: Path) -> list[dict]:
    """The manifest's lines, as JSON objects, unexpanded."""
    text = (Path(run_dir) / MANIFEST).read_text()
    return [json.loads(line) for line in text.splitlines()]


def batched_launches(run_dir: Path) -> list[list[int]]:
    """For each `digest_batch` line, the launch numbers of its batch, read from digests.bin
    by the line's offset and counts."""
    data = (Path(run_dir) / DIGESTS_FILE).read_bytes() if (
        Path(run_dir) / DIGESTS_FILE).exists() else b""
    batches = []
    for line in raw_lines(run_dir):
        if BATCH in line:
            launches = line["offset"], line["launches"]
            end = launches[0] + launches[1] * LAUNCH.itemsize + line["digests"] * DIGEST.itemsize
            assert end <= len(data), "a batch line names bytes past the end of digests.bin"
            records = np.frombuffer(data, LAUNCH, count=launches[1], offset=launches[0])
            batches.append(records["launch"].tolist())
    return batches


def group_line(key: str, launch: int, occurrence: int, grid: list[int], block: list[int],
               stream: int, device: int, digests: list[str],
               sums: list[float | str | None] | None = None) -> str:
    """The line earlier versions wrote for each launch made with a repeated plan
    (`digests_of`): its fields and digests in the template's order, and where the template's
    records have them, their sums of |x| (None for those without). read_manifest still
    reads run directories written so."""
    data: dict[str, object] = {
        "digests_of": key, "launch": launch, "occurrence": occurrence, "grid": grid,
        "block": block, "stream": f"0x{stream:x}", "device": device if device >= 0 else None,
        "digests": digests}
    if sums is not None:
        data["sums"] = sums
    return json.dumps(data, separators=(",", ":"))


def summary(run_dir: Path) -> dict:
    """The run's summary.json."""
    return json.loads((Path(run_dir) / "summary.json").read_text())


def nan_lines(stderr: str) -> list[str]:
    """The NaN/Inf reports cudump printed, in order."""
    return [line for line in stderr.splitlines() if line.startswith("cudump: NaN/Inf")]
