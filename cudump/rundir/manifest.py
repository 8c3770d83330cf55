"""The run directory's manifest: one JSON object per snapshot in manifest.jsonl.

This is the output contract shared by the snapshot writer and the offline
tools (`cudump diff`, `ls`, `show`).

The digests of launches the shim repeated on its own (results.py) are many, and alike: they
are written another way. A template line (`digest_template`) holds one plan's records
without the fields of a launch; the launches made with it are binary records in digests.bin,
a batch at a time, each batch named by one line (`digest_batch`, rundir/digest_batches.py).
Run directories of earlier versions have one line per launch instead (`digests_of`), with a
launch's fields and its digests in the template's order. read_manifest gives both back as
records like any other, where their line is.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from cudump.errors import SnapshotError
from cudump.rundir import files as runfiles
from cudump.rundir import reading
from cudump.rundir.digest_batches import BATCH, HAS_SUM, BatchLine, DigestBatch
from cudump.rundir.layout import DIGESTS_FILE, MANIFEST_FILE
from cudump.rundir.wheres import WHERE_FIELDS
from cudump.wire.digest import digest_hex, sum_json


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
    rank: int | None = None          # the process's rank (RANK, OMPI_COMM_WORLD_RANK, ...)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        # Field by field: dataclasses.asdict deep-copies every value, and a manifest
        # line is written for every digest of every launch.
        data = {name: getattr(self, name) for name in _RECORD_FIELDS}
        if self.rank is None:
            del data["rank"]             # written only where the process has a rank
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
    "device": (_INT, True), "rank": (_INT, True),
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
    """Read a run directory's manifest.jsonl. A torn last line (the beginning of a record:
    the run was killed while writing it) is skipped.

    Any other line that is not UTF-8, not JSON, not an object or holds a field of the wrong
    type is a SnapshotError naming the file and the line.
    """
    path = Path(run_dir) / MANIFEST_FILE
    if not reading.present(path) or path.is_dir():
        raise SnapshotError(f"{reading.shown(run_dir)} is not a cudump run directory (no "
                            f"{MANIFEST_FILE})")
    lines = reading.read_bytes(path).split(b"\n")     # a FIFO, a device: one line, refused
    while lines and not lines[-1].strip():
        lines.pop()
    records: list[SnapshotRecord] = []
    templates: dict[str, list[dict[str, Any]]] = {}
    batches = _BatchFile(Path(run_dir) / DIGESTS_FILE)
    first = True
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            data = _decode_line(raw)
        except SnapshotError as err:
            if number == len(lines) and raw.lstrip().startswith(b"{"):
                break                      # torn: the run was killed while writing it
            if first:                      # nothing in the file is a record
                raise SnapshotError(f"{path}:{number}: not a cudump manifest ({err}); "
                                    "is this a run directory?") from None
            raise SnapshotError(f"{path}:{number}: {err}") from None
        first = False
        try:
            if isinstance(data, dict) and TEMPLATE in data:
                key, template = _template(data)
                templates[key] = template
            elif isinstance(data, dict) and GROUP in data:
                records.extend(_group(data, templates))
            elif isinstance(data, dict) and BATCH in data:
                records.extend(_batch(BatchLine.from_dict(data), templates, batches))
            else:
                records.append(SnapshotRecord.from_dict(data))
        except SnapshotError as err:
            raise SnapshotError(f"{path}:{number}: {err}") from None
    return records


TEMPLATE = "digest_template"
GROUP = "digests_of"
# What a launch of a repeated plan gives each of its records.
_LAUNCH_FIELDS = ("launch", "occurrence", "grid", "block", "stream", "device")


def template_line(key: str, records: list[SnapshotRecord]) -> str:
    """The line that holds a repeated plan's digest records, without a launch's fields."""
    data = []
    for record in records:
        fields_ = json.loads(record.to_json())
        # A launch's where is its own (wheres.py): a launch made with the plan that has
        # one is written as a record of its own (policy/snapshot/results.py).
        for name in (*_LAUNCH_FIELDS, *WHERE_FIELDS, "digest", "abs_sum"):
            fields_.pop(name, None)
        data.append(fields_)
    return json.dumps({TEMPLATE: key, "records": data}, separators=(",", ":"))


def _template(data: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    key, records = data[TEMPLATE], data.get("records")
    if not isinstance(key, str):
        raise SnapshotError(f"field '{TEMPLATE}' should be a string, got {_json_kind(key)}")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise SnapshotError(f"field 'records' should be a list of objects, got "
                            f"{_json_kind(records)}")
    return key, records


def _group(data: dict[str, Any], templates: dict[str, list[dict[str, Any]]]
           ) -> list[SnapshotRecord]:
    key, digests = data[GROUP], data.get("digests")
    template = templates.get(key) if isinstance(key, str) else None
    if template is None:
        raise SnapshotError(f"field '{GROUP}' names no template of an earlier line")
    if (not isinstance(digests, list) or len(digests) != len(template)
            or not all(isinstance(d, str) for d in digests)):
        raise SnapshotError(f"field 'digests' should be a list of {len(template)} strings, "
                            f"got {_json_kind(digests)}")
    sums = data.get("sums", [None] * len(template))
    if not isinstance(sums, list) or len(sums) != len(template):
        raise SnapshotError(f"field 'sums' should be a list of {len(template)} values, got "
                            f"{_json_kind(sums)}")
    launch = {name: data.get(name) for name in _LAUNCH_FIELDS}
    return [SnapshotRecord.from_dict({**record, **launch, "digest": digest}
                                     | ({"abs_sum": total} if total is not None else {}))
            for record, digest, total in zip(template, digests, sums, strict=True)]


class _BatchFile:
    """digests.bin, read whole the first time a batch line asks for it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data: bytes | None = None

    def batch(self, line: BatchLine) -> DigestBatch:
        if self._data is None:
            try:
                self._data = reading.read_bytes(self.path)
            except reading.NotThere:
                raise SnapshotError(f"a batch of digests is in {DIGESTS_FILE}, which the run "
                                    "directory lacks") from None
        view = memoryview(self._data)[line.offset:line.offset + line.size]
        return DigestBatch.from_bytes(view, line.launches, line.digests)


def _batch(line: BatchLine, templates: dict[str, list[dict[str, Any]]], file: _BatchFile
           ) -> list[SnapshotRecord]:
    """A batch's records: each digest's template record, with its launch's fields."""
    batch = file.batch(line)
    launches = batch.launches
    shared: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
    for pid, plan, launch, occurrence, grid, block, stream, device in zip(
            *(launches[name].tolist() for name in ("pid", "plan", "launch", "occurrence",
                                                   "grid", "block", "stream", "device")),
            strict=True):
        template = templates.get(f"{pid}.{plan}")
        if template is None:
            raise SnapshotError(f"a launch of the batch names no template of an earlier line "
                                f"({pid}.{plan})")
        shared.append((template, {"launch": launch, "occurrence": occurrence, "grid": grid,
                                  "block": block, "stream": f"0x{stream:x}",
                                  "device": device if device >= 0 else None}))
    digests = batch.digests
    records = []
    for value, total, row, copy, flags in zip(
            *(digests[name].tolist() for name in ("digest", "sum", "row", "copy", "flags")),
            strict=True):
        template, launch = shared[row]
        if copy >= len(template):
            raise SnapshotError(f"a digest of the batch is number {copy + 1} of a template "
                                f"of {len(template)}")
        data = {**template[copy], **launch, "digest": digest_hex(value)}
        if flags & HAS_SUM:
            data["abs_sum"] = sum_json(total)
        records.append(SnapshotRecord.from_dict(data))
    return records


def _decode_line(raw: bytes) -> Any:
    try:
        return reading.decode_json(raw)
    except reading.LineError as err:
        raise SnapshotError(str(err)) from None


class ManifestWriter:
    """Appends records to manifest.jsonl, one whole line per write, so that a killed run
    keeps what it wrote and a full disk never leaves half a line.

    The file is created new (runfiles.create): a manifest, or a symlink, already in the
    run directory is a FileExistsError, never appended to or written through."""

    def __init__(self, run_dir: Path,
                 observer: Callable[[SnapshotRecord], None] | None = None) -> None:
        self.path = Path(run_dir) / MANIFEST_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = runfiles.create(self.path, os.O_WRONLY | os.O_APPEND)
        self._digests_fd = -1          # digests.bin, made at the first batch
        self._lock = threading.Lock()
        self._observer = observer      # sees each record once it is written (the timeline)

    def append(self, record: SnapshotRecord) -> None:
        self.append_lines([record.to_json()])
        if self._observer is not None:
            self._observer(record)

    def append_lines(self, lines: list[str]) -> None:
        """Whole lines in one write (results.py makes digest template lines)."""
        with self._lock:  # the writer thread, connections and the prompt all append
            self._write_lines(lines)

    def append_digests(self, lines: list[str], batch: DigestBatch | None) -> None:
        """Lines (the templates a batch uses), then a batch of repeated launches' digests:
        its records go to digests.bin first, then its line here, so that no line names
        bytes that are not there. On an error neither file keeps any of it."""
        if batch is None or not len(batch.launches):
            if lines:
                self.append_lines(lines)
            return
        data = batch.to_bytes()
        with self._lock:
            if self._fd < 0:
                raise OSError(errno.EBADF, "the manifest is closed")
            if self._digests_fd < 0:
                self._digests_fd = runfiles.create(self.path.parent / DIGESTS_FILE,
                                                   os.O_WRONLY | os.O_APPEND)
            offset = os.lseek(self._digests_fd, 0, os.SEEK_END)
            try:
                if os.write(self._digests_fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "no space left for a whole batch of digests")
                self._write_lines([*lines, batch.line(offset)])
            except OSError:
                os.ftruncate(self._digests_fd, offset)
                raise

    def _write_lines(self, lines: list[str]) -> None:
        """Whole lines in one write, or none of them (under the lock)."""
        data = "".join(line + "\n" for line in lines).encode("utf-8")
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
            for fd in (self._fd, self._digests_fd):
                if fd >= 0:
                    os.close(fd)
            self._fd = self._digests_fd = -1
