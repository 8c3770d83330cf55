"""The run directory's manifest: one JSON object per snapshot in manifest.jsonl.

This is the output contract shared by the snapshot writer and the offline
tools (`cudump diff`, `ls`, `show`).
"""

from __future__ import annotations

import errno
import json
import os
import threading
from dataclasses import MISSING, dataclass, field, fields
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
        # Field by field: dataclasses.asdict deep-copies every value, and a manifest
        # line is written for every digest of every launch.
        data = {name: getattr(self, name) for name in _RECORD_FIELDS}
        data.update(self.extra)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Any) -> SnapshotRecord:
        """A record from one decoded manifest line; SnapshotError says what is wrong."""
        if not isinstance(data, dict):
            raise SnapshotError(f"expected a JSON object, got {_json_kind(data)}")
        names = {f.name for f in fields(cls)} - {"extra"}
        missing = [f.name for f in fields(cls) if f.name in _REQUIRED and f.name not in data]
        if missing:
            raise SnapshotError(f"record lacks the field '{missing[0]}'")
        for name, value in data.items():
            if name in _FIELD_TYPES:
                _check_field(name, value)
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**known, extra=extra)


_RECORD_FIELDS = tuple(f.name for f in fields(SnapshotRecord) if f.name != "extra")
# What each field of a manifest line must hold, so that the offline tools can trust it.
_STR, _INT, _INTS, _NUMBERS = "a string", "a whole number", "a list of whole numbers", \
    "a list of numbers"
_FIELD_TYPES: dict[str, tuple[str, bool]] = {       # name -> (kind, may be null)
    "kernel": (_STR, False), "mangled": (_STR, False), "launch": (_INT, False),
    "occurrence": (_INT, False), "pid": (_INT, False), "grid": (_INTS, False),
    "block": (_INTS, False), "stream": (_STR, False), "arg": (_INT, False),
    "type": (_STR, True), "phase": (_STR, False), "address": (_STR, False),
    "dtype": (_STR, True), "shape": (_INTS, True), "file": (_STR, True), "png": (_STR, True),
    "status": (_STR, False), "reason": (_STR, True), "range": (_NUMBERS, True),
    "device": (_INT, True),
}
_REQUIRED = frozenset(f.name for f in fields(SnapshotRecord)
                      if f.default is MISSING and f.default_factory is MISSING)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_kind(value: Any, kind: str) -> bool:
    if kind == _STR:
        return isinstance(value, str)
    if kind == _INT:
        return _is_int(value)
    if not isinstance(value, list):
        return False
    if kind == _INTS:
        return all(_is_int(v) for v in value)
    return all(_is_int(v) or isinstance(v, float) for v in value)


def _check_field(name: str, value: Any) -> None:
    kind, nullable = _FIELD_TYPES[name]
    if value is None and nullable:
        return
    if not _is_kind(value, kind):
        raise SnapshotError(f"field '{name}' should be {kind}"
                            f"{' or null' if nullable else ''}, got {_json_kind(value)}")


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, str):
        return "a string"
    return "a number"


def read_manifest(run_dir: Path) -> list[SnapshotRecord]:
    """Read a run directory's manifest.jsonl. A torn last line (the run was killed) is skipped.

    Any other line that is not UTF-8, not JSON, not an object or holds a field of the wrong
    type is a SnapshotError naming the file and the line.
    """
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise SnapshotError(f"{run_dir} is not a cudump run directory (no {MANIFEST})")
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as err:
        raise SnapshotError(f"{path}: cannot read: {err.strerror or err}") from None
    while lines and not lines[-1].strip():
        lines.pop()
    records: list[SnapshotRecord] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            data = _decode_line(raw)
        except SnapshotError as err:
            if number == len(lines):
                break                      # torn: the run was killed while writing it
            raise SnapshotError(f"{path}:{number}: {err}") from None
        try:
            records.append(SnapshotRecord.from_dict(data))
        except SnapshotError as err:
            raise SnapshotError(f"{path}:{number}: {err}") from None
    return records


def _decode_line(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SnapshotError("not UTF-8 text") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise SnapshotError("not valid JSON (nested too deeply)") from None
    except ValueError:           # JSONDecodeError, or an integer of thousands of digits
        raise SnapshotError("not valid JSON") from None


class ManifestWriter:
    """Appends records to manifest.jsonl, one whole line per write, so that a killed run
    keeps what it wrote and a full disk never leaves half a line."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / MANIFEST
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                           0o644)
        self._lock = threading.Lock()

    def append(self, record: SnapshotRecord) -> None:
        self.append_lines([record.to_json()])

    def append_lines(self, lines: list[str]) -> None:
        """Whole lines in one write (repeat.py makes digest lines from templates)."""
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        with self._lock:  # the writer thread, connections and the prompt all append
            if self._fd < 0:
                raise OSError(errno.EBADF, "the manifest is closed")
            start = os.lseek(self._fd, 0, os.SEEK_END)
            try:
                if os.write(self._fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "no space left for a whole line")
            except OSError:
                os.ftruncate(self._fd, start)  # never half a line
                raise

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
