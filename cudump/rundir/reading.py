"""Reading a run directory's files: the one way every reader opens and decodes them.

What a run directory holds may not be what cudump wrote: a file cut short by a killed run,
changed by hand, or planted. Every reader of a run's files (manifest.jsonl, digests.bin,
captures.jsonl, flight.jsonl, trace.jsonl, summary.json, module images, snapshots) reads it
through here, so that each bad file is one line naming it, never a traceback or a hang:

- a file is opened only if it is a regular file: opened with O_NONBLOCK (a FIFO does not
  wait for a writer) and checked with fstat, so a FIFO or a device (/dev/zero) where a run
  file should be is refused, not read forever;
- a name too long, a loop of links, no permission: an OSError, said as one line;
- a line is decoded from UTF-8 and parsed as JSON with every way that fails caught: bytes
  that are not UTF-8, nesting too deep for the parser (RecursionError), a number of
  thousands of digits (ValueError);
- a line of a file written as the run goes (manifest, trace, captures) that is cut short at
  the end of the file was being written when the run was killed: skipped, as read_manifest
  always did; a file written whole (flight.jsonl, summary.json) has no such line.

RunFileError is the one error: its message starts with the file (and its line).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cudump.errors import SnapshotError

SHOWN_NAME = 160           # a name longer than this is shortened in messages


class RunFileError(SnapshotError):
    """A run file that cannot be read, or holds what cudump did not write."""


class LineError(ValueError):
    """A line is not a JSON value (the reader adds its file and line)."""


class NotThere(RunFileError):
    """The file does not exist (a reader may take that as the run not having it)."""


def shown(path: str | Path) -> str:
    """A path as a message shows it: shortened in the middle where it is very long."""
    text = str(path)
    if len(text) <= SHOWN_NAME:
        return text
    return f"{text[:80]}...({len(text)} characters)...{text[-60:]}"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _must_be_regular(path: str | Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise RunFileError(f"{shown(path)}: {_kind(mode)}, not a file cudump wrote; not read")


def open_regular(path: str | Path) -> IO[bytes]:
    """The file at `path` opened for reading, if it is a regular file (links followed).
    NotThere if nothing is there; RunFileError for anything else that is not a regular file
    or cannot be opened. Never blocks, and never opens a device (opening some has effects):
    what is there is looked at first, then opened O_NONBLOCK and looked at again, in case it
    was swapped in between."""
    try:
        _must_be_regular(path, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise NotThere(f"{shown(path)}: no such file") from None
    except (OSError, ValueError) as err:     # ValueError: a NUL byte in the name
        raise RunFileError(f"{shown(path)}: cannot read: {_reason(err)}") from None
    try:
        _must_be_regular(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_regular(path: str | Path) -> bool:
    """Whether a regular file is at `path` (links followed); False for a name that cannot
    be looked up at all (too long, a NUL byte in it)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def is_folder(path: str | Path) -> bool:
    """Whether a folder is at `path` (links followed); False for a name that cannot be
    looked up at all."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def present(path: str | Path) -> bool:
    """Whether anything is at `path` (links followed); False for a name that cannot be
    looked up at all."""
    try:
        os.stat(path)
    except (OSError, ValueError):
        return False
    return True


def read_bytes(path: str | Path) -> bytes:
    """A regular file's bytes (open_regular's errors, and a read that fails)."""
    with open_regular(path) as f:
        try:
            return f.read()
        except OSError as err:
            raise RunFileError(f"{shown(path)}: cannot read: {_reason(err)}") from None


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError):
        return err.strerror or str(err)
    return str(err)


def decode_json(raw: bytes) -> Any:
    """A JSON value from bytes; LineError says why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LineError("not UTF-8 text") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise LineError("not valid JSON (nested too deeply)") from None
    except ValueError:           # JSONDecodeError, or an integer of thousands of digits
        raise LineError("not valid JSON") from None


def read_json(path: str | Path) -> Any:
    """A file holding one JSON value (summary.json)."""
    data = read_bytes(path)
    try:
        return decode_json(data)
    except LineError as err:
        raise RunFileError(f"{shown(path)}: {err}") from None


@dataclass(frozen=True)
class JsonLine:
    number: int         # from 1
    data: Any


def json_lines(path: str | Path, torn_last: bool, what: str | None = None
               ) -> Iterator[JsonLine]:
    """Each non-blank line of a JSON-lines file, decoded, as it is read (the file is not
    held whole). RunFileError `path:N: why` for a line that is not JSON (`path:N: not WHAT
    (why)` with `what`). With `torn_last` (a file written as the run goes), a last line
    without its newline that does not decode was cut short by a killed run: skipped."""
    with open_regular(path) as f:
        number = 0
        try:
            for raw in f:
                number += 1
                if not raw.strip():
                    continue
                try:
                    data = decode_json(raw)
                except LineError as err:
                    if torn_last and not raw.endswith(b"\n"):
                        return
                    why = f"not {what} ({err})" if what else str(err)
                    raise RunFileError(f"{shown(path)}:{number}: {why}") from None
                yield JsonLine(number, data)
        except OSError as err:
            raise RunFileError(f"{shown(path)}: cannot read: {_reason(err)}") from None


def line_error(path: str | Path, number: int, problem: object) -> RunFileError:
    """The error of one line's record: `path:N: problem`."""
    return RunFileError(f"{shown(path)}:{number}: {problem}")

