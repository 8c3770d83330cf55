"""The run directory's manifest: one JSON object per snapshot in manifest.jsonl.

This is the output contract shared by the snapshot writer and the offline
tools (`cudump diff`, `ls`, `show`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from cudump.errors import SnapshotError

MANIFEST = "manifest.jsonl"


@dataclass
class SnapshotRecord:
    kernel: str                      # demangled name
    mangled: str
    launch: int                      # per-process launch sequence number (1-based)
    occurrence: int                  # n-th launch of this kernel in this process (1-based)
    pid: int
    grid: list[int]
    block: list[int]
    stream: str                      # hex, e.g. "0x0"
    arg: int                         # argument index
    type: str | None                 # type from the signature, e.g. "uchar4*", if known
    phase: str                       # "before" | "after"
    address: str                     # hex device address the copy started at
    dtype: str | None                # numpy dtype name, e.g. "uint8"
    shape: list[int] | None
    file: str | None                 # .npy path relative to the run directory
    png: str | None = None           # .png path relative to the run directory, if written
    status: str = "ok"               # "ok" or "error"
    reason: str | None = None        # why, when status is "error"
    range: list[float] | None = None  # value range a float PNG was rendered with
    device: int | None = None        # CUDA device ordinal of the launch
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        extra = data.pop("extra")
        data.update(extra)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SnapshotRecord:
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        try:
            return cls(**known, extra=extra)
        except TypeError as err:
            raise SnapshotError(f"manifest record is missing a field: {err}") from None


def read_manifest(run_dir: Path) -> list[SnapshotRecord]:
    """Read a run directory's manifest.jsonl. A torn last line (the run was killed) is skipped."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise SnapshotError(f"{run_dir} is not a cudump run directory (no {MANIFEST})")
    records: list[SnapshotRecord] = []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise SnapshotError(f"{path}:{number}: not valid JSON") from None
        records.append(SnapshotRecord.from_dict(data))
    return records


class ManifestWriter:
    """Appends records to manifest.jsonl, flushing each so a killed run keeps what it wrote."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / MANIFEST
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, record: SnapshotRecord) -> None:
        line = record.to_json() + "\n"
        with self._lock:  # the writer thread, connections and the prompt all append
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        self._file.close()
