"""The replay engine's file reading: every file it reads is a regular file, inside the folder
it was given, of a bounded size, and opened without blocking.

An extract folder is sent from one person to another, so its launch.json is not trusted: a
name in it that climbs out of the folder (`../x`, an absolute path, a symlink that points
out) is refused before anything is opened, and a FIFO or a device under a good name is
refused after an open that cannot block (O_NONBLOCK) and before a byte is read.

Part of the standalone replay engine (cudump/analysis/replay_engine/): it needs the standard
library and numpy only.
"""

from __future__ import annotations

import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# A file name in launch.json: at most this many characters, and no component longer than
# NAME_MAX (bytes, as the file system counts them).
MAX_NAME = 4096
MAX_COMPONENT = 255
# What .npy headers may take besides the data (numpy's own limit is 10000 bytes).
NPY_HEADER_LIMIT = 1 << 16


class ReplayError(Exception):
    """A replay that could not be done: one line saying what and, where possible, how to fix it."""


def show(value: Any, limit: int = 80) -> str:
    """A JSON value as an error message shows it: short, on one line, whatever it holds."""
    if isinstance(value, (list, dict)):
        kind = "a list of" if isinstance(value, list) else "an object with"
        unit = "items" if isinstance(value, list) else "keys"
        summary = f"{kind} {len(value)} {unit}"
        if len(value) > 16:
            return summary
        try:
            text = json.dumps(value)
        except (RecursionError, TypeError, ValueError):
            return summary
        return text if len(text) <= limit else summary
    if isinstance(value, str):
        text = json.dumps(value[:limit])
        return text if len(value) <= limit else f"{text[:-1]}...\" ({len(value)} characters)"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def show_path(path: Path | str) -> str:
    """A file name as an error message shows it: quoted, and cut short past 300 characters."""
    return show(str(path), 300)


def control_character(text: str) -> bool:
    """Whether `text` holds a character a terminal may obey (C0, DEL, C1) rather than show."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a file of an extract folder (None: it can): it must be a relative
    path that stays inside the folder, on any file system."""
    if not name:
        return "is empty"
    if len(name) > MAX_NAME:
        return f"is {len(name)} characters long, more than a file name may be ({MAX_NAME})"
    if "\0" in name:
        return "holds a NUL character"
    if control_character(name):
        return "holds a control character"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text"
    if name.startswith("/") or os.path.isabs(name):
        return "is an absolute path: it must name a file inside the folder"
    parts = encoded.split(b"/")
    if b".." in parts:
        return "climbs out with '..': it must name a file inside the folder"
    if any(len(part) > MAX_COMPONENT for part in parts):
        return f"has a component longer than {MAX_COMPONENT} bytes"
    return None


def _not_regular(mode: int) -> str | None:
    """What a file of mode `mode` is, where it is not a regular file (None where it is)."""
    if stat.S_ISREG(mode):
        return None
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a file")


def open_regular(path: Path | str, what: str) -> int:
    """A descriptor of `path` for reading, which must be a regular file: checked with stat
    before it is opened (a device is never opened), opened with O_NONBLOCK (a FIFO put in its
    place meanwhile cannot hold the open up) and checked again with fstat before anything is
    read. FileNotFoundError where nothing is there; ReplayError, one line, otherwise."""
    fd = -1
    try:
        kind = _not_regular(os.stat(path).st_mode)
        if kind is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
            kind = _not_regular(os.fstat(fd).st_mode)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        if fd >= 0:
            os.close(fd)
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ReplayError(f"{what}: cannot open {show_path(path)}: {reason}") from None
    if kind is not None:
        if fd >= 0:
            os.close(fd)
        raise ReplayError(f"{what}: {show_path(path)} is {kind}, not a regular file; not read")
    return fd


def read_regular(path: Path | str, what: str, limit: int) -> bytes:
    """All of regular file `path` (open_regular), which must hold at most `limit` bytes.
    FileNotFoundError passes through; anything else is one line of ReplayError."""
    fd = open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise ReplayError(f"{what}: {show_path(path)} holds {size} bytes, more than the "
                              f"{limit} it may; not read")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 24, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise ReplayError(f"{what}: {show_path(path)} grew past {limit} bytes while it "
                              "was read")
        return b"".join(chunks)
    except OSError as e:
        raise ReplayError(f"{what}: cannot read {show_path(path)}: {e.strerror or e}") \
            from None
    finally:
        os.close(fd)


def inside(folder: Path, name: str, what: str) -> Path:
    """Where `name` leads from `folder`, with every symlink followed; ReplayError unless that
    is a file name of the folder's (name_problem) and the place is inside the folder.
    FileNotFoundError where nothing is there."""
    problem = name_problem(name)
    if problem is not None:
        raise ReplayError(f"{what}: {show_path(name)} {problem}; not read")
    try:
        root = Path(folder).resolve(strict=True)
        target = (Path(folder) / name).resolve(strict=True)
    except FileNotFoundError:
        raise
    except (OSError, RuntimeError, ValueError) as e:   # link loops, names too long
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ReplayError(f"{what}: {show_path(name)} cannot be used: {reason}") from None
    if target == root or not target.is_relative_to(root):
        raise ReplayError(f"{what}: {show_path(name)} leads to {show_path(target)}, outside the "
                          f"folder {show_path(root)}; not read")
    return target


def read_file(folder: Path, name: str, what: str, limit: int) -> bytes:
    """File `name` of the folder (inside, read_regular); FileNotFoundError where it is
    missing."""
    return read_regular(inside(folder, name, what), what, limit)


def read_npy(folder: Path, name: str, what: str, nbytes: int) -> np.ndarray:
    """The array in .npy file `name` of the folder, which must hold `nbytes` bytes of plain
    data: its header is read and checked before its data, and the file may hold no more
    than the header and those bytes."""
    data = read_file(folder, name, what, nbytes + NPY_HEADER_LIMIT)
    where = f"{what}: {show_path(name)}"
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ReplayError(f"{where} is a .npy file of version {version}, which this "
                              "replay does not read")
    except (ValueError, EOFError, OSError, SyntaxError, TypeError, MemoryError,
            RecursionError) as e:
        reason = " ".join(str(e).split())[:120]
        raise ReplayError(f"{where} is not a readable .npy file: {reason}") from None
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise ReplayError(f"{where} holds {show(str(dtype))}, not an array of plain numbers")
    if any(n < 0 for n in shape):
        raise ReplayError(f"{where} has a negative size in its shape {list(shape)}")
    count = 1
    for n in shape:
        count *= n
    size = count * dtype.itemsize
    rest = len(data) - f.tell()
    if size != nbytes or rest != size:
        raise ReplayError(f"{where} holds {dtype} {list(shape)} ({size} bytes) in "
                          f"{rest} bytes of data, but the buffer holds {nbytes} bytes")
    array = np.frombuffer(data, dtype=dtype, count=count, offset=f.tell())
    return array.reshape(shape, order="F" if fortran else "C")


MAX_DIGITS = 40                  # an integer in a JSON file of the folder


@dataclass(frozen=True)
class BigNumber:
    """An integer too long to be one (MAX_DIGITS), kept as its length so that the field it
    stands in is named when it is checked."""

    digits: int

    def __str__(self) -> str:
        return f"a {self.digits}-digit number"


def _parse_int(text: str) -> int | BigNumber:
    return int(text) if len(text) <= MAX_DIGITS else BigNumber(len(text.lstrip("-")))


def parse_json(data: bytes, name: str, error: type[ReplayError] = ReplayError) -> Any:
    """A JSON file's bytes as values: UTF-8 text, of bounded depth, with over-long integers
    kept as BigNumber; `error`, naming the file, where it is not that."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{name}: not UTF-8 text (byte {e.start} is {data[e.start]:#04x})") from None
    try:
        return json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        raise error(f"{name}: not valid JSON: {e.msg} at line {e.lineno} column "
                    f"{e.colno}") from None
    except RecursionError:
        raise error(f"{name}: not valid JSON: nested too deeply") from None
