"""The snapshot file formats: what each one is, said once.

A snapshot of a buffer is written as one file per format its rule asks for (`format:`),
where the format can hold the data: `.npy` (the lossless record: every dtype and shape) and
`.png` (a picture: image-like data only). Each format says here

- its name as a rule's `format:` writes it, and its files' suffix;
- which field of the manifest record holds its file's name: `file` for .npy and `png` for
  .png, the fields run directories have always had; a format added later names a field of
  its own, which goes among the record's extra keys;
- whether it can hold an array of a dtype and shape;
- how an array is written to a file (encoded first, then written into a file that is
  already open: the run's files are created by cudump.rundir.files);
- how an array is read back from a regular file already opened by cudump.rundir.reading.

FORMATS is the registry, in the order files are written and named. The rule checks, the
snapshot writer, `dump` at the prompt, load_array (`cudump show`, `diff`) and the manifest
ask it, so that a new format is one entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import IO

import numpy as np

from cudump.errors import SnapshotError
from cudump.rundir import reading
from cudump.rundir.imaging import is_image_like, read_png, render, save_png
from cudump.rundir.manifest import SnapshotRecord


@dataclass(frozen=True)
class Picture:
    """What a format that draws the data draws it with (one that stores it ignores it)."""

    value_range: tuple[float, float] | None = None   # a rule's `range:` (None: the data's)
    text: Mapping[str, str] = field(default_factory=dict)   # kernel, arg, phase, launch


@dataclass(frozen=True)
class Encoded:
    """An array made ready to be written: `write` puts the file's bytes into an open file."""

    write: Callable[[IO[bytes]], None]
    # The value range float data was drawn with: the record's `range` (None: not drawn).
    value_range: list[float] | None = None


@dataclass(frozen=True)
class SnapshotFormat:
    name: str       # as a rule's `format:` writes it
    suffix: str     # its files' suffix, lower case, with its dot
    field: str      # the manifest record's field that holds its file's name
    holds: Callable[[np.dtype, tuple[int, ...]], bool]
    encode: Callable[[np.ndarray, Picture], Encoded]
    # The array in a file opened by reading.open_regular (the path names it in messages);
    # SnapshotError when the file is not one of this format.
    read: Callable[[Path, IO[bytes]], np.ndarray]

    def file_of(self, record: SnapshotRecord) -> str | None:
        """The name of this format's file in a record, if it has one."""
        value = (getattr(record, self.field) if _is_field(self.field)
                 else record.extra.get(self.field))
        return value if isinstance(value, str) else None

    def set_file(self, record: SnapshotRecord, name: str | None) -> None:
        """Names this format's file in a record (None: it has none). A field of its own
        that is not a record field is an extra key, left out when there is no file."""
        if _is_field(self.field):
            setattr(record, self.field, name)
        elif name is None:
            record.extra.pop(self.field, None)
        else:
            record.extra[self.field] = name


@cache
def _is_field(name: str) -> bool:
    """Whether `name` is a field of the record (not one of its extra keys)."""
    return name in {f.name for f in fields(SnapshotRecord)} - {"extra"}


# .npy

NPY_MAGIC = b"\x93NUMPY"


def _encode_npy(array: np.ndarray, picture: Picture) -> Encoded:
    # A file object: np.save would add ".npy" to a name.
    return Encoded(lambda f: np.save(f, array))


def _read_npy(path: Path, f: IO[bytes]) -> np.ndarray:
    try:
        magic = f.read(len(NPY_MAGIC))
    except OSError as err:
        raise SnapshotError(f"{reading.shown(path)}: cannot read: {err.strerror or err}"
                            ) from None
    if magic != NPY_MAGIC:
        raise SnapshotError(f"{path}: not a .npy file (or a corrupted one)")
    try:
        # mmap: a diff of two large runs only pages in what it reads, and the page
        # cache is shared by the worker threads. numpy maps a file by its name: the
        # name of the descriptor opened by the caller, which is the regular file checked.
        arr = np.load(f"/proc/self/fd/{f.fileno()}", mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        if "object" in str(err).lower() or "pickle" in str(err).lower():
            raise SnapshotError(f"{path}: holds Python objects, not numeric data") from None
        raise SnapshotError(f"{path}: corrupted .npy file ({err})") from None
    # asarray drops the memmap subclass, whose per-operation overhead is measurable.
    return np.asarray(arr)


# .png

def _encode_png(array: np.ndarray, picture: Picture) -> Encoded:
    rendered = render(array, value_range=picture.value_range)
    drawn = None
    if rendered.value_range is not None and array.dtype.kind == "f":
        drawn = [float(rendered.value_range[0]), float(rendered.value_range[1])]
    text = dict(picture.text)
    return Encoded(lambda f: save_png(rendered, f, text), drawn)


def _read_png(path: Path, f: IO[bytes]) -> np.ndarray:
    try:
        return read_png(path, f)
    except (OSError, ValueError, SyntaxError) as err:   # PIL raises all three
        raise SnapshotError(f"{path}: not a PNG file (or a corrupted one): {err}") from None


NPY = SnapshotFormat("npy", ".npy", "file", holds=lambda dtype, shape: True,
                     encode=_encode_npy, read=_read_npy)
PNG = SnapshotFormat("png", ".png", "png", holds=is_image_like,
                     encode=_encode_png, read=_read_png)

# The registry: every snapshot format, by name, in the order a snapshot's files are written.
# NPY is the one a copy too large for staging is streamed into (policy.snapshot.place) and
# the one replays read: it holds any data.
FORMATS: dict[str, SnapshotFormat] = {NPY.name: NPY, PNG.name: PNG}


def names() -> frozenset[str]:
    """The names rules may give `format:`, besides both, digest and check-nan."""
    return frozenset(FORMATS)


def in_order(chosen: Iterable[str] | None = None) -> list[SnapshotFormat]:
    """The formats (those `chosen` by name, where given), in the registry's order."""
    wanted = None if chosen is None else set(chosen)
    return [fmt for fmt in FORMATS.values() if wanted is None or fmt.name in wanted]


def suffixes() -> list[str]:
    return [fmt.suffix for fmt in FORMATS.values()]


def by_suffix(path: str | Path) -> SnapshotFormat | None:
    """The format of a file, by its suffix (any case); None for a suffix of none."""
    suffix = Path(path).suffix.lower()
    return next((fmt for fmt in FORMATS.values() if fmt.suffix == suffix), None)


def record_fields() -> list[str]:
    """The manifest record fields that name snapshot files."""
    return [fmt.field for fmt in FORMATS.values()]


def files_of(record: SnapshotRecord) -> list[str]:
    """The names of a record's snapshot files, in the registry's order."""
    return [name for fmt in FORMATS.values() if (name := fmt.file_of(record)) is not None]


def forget_files(record: SnapshotRecord) -> None:
    """A record that names no file (a snapshot that failed)."""
    for fmt in FORMATS.values():
        fmt.set_file(record, None)


def spelled(words: Iterable[str], last: str = "or") -> str:
    """`a, b or c` (`last` joins the last two)."""
    items = list(words)
    if len(items) < 2:
        return "".join(items)
    return f"{', '.join(items[:-1])} {last} {items[-1]}"
