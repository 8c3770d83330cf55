"""The prompt's command history file (~/.cudump_history or $CUDUMP_HISTORY).

Only a regular file is used, or a new one made in an existing directory: a directory gave
prompt_toolkit's traceback and "Press ENTER", a FIFO blocked the prompt at its first read, and
/dev/full at its first write. Each read and write opens the file without blocking and checks
that it is still a regular file; a file that cannot be used gives one warning line and the
prompt keeps its history in memory only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from prompt_toolkit.history import FileHistory, History, InMemoryHistory

MAX_HISTORY_BYTES = 1 << 20      # the newest 1 MiB of a longer file is read
_FLAGS = os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class HistoryFileError(OSError):
    """A history path that is not a regular file."""


def _open(path: str, flags: int) -> int:
    """A descriptor on `path`, opened without blocking; raises OSError, HistoryFileError
    when it is not a regular file."""
    fd = os.open(path, flags | _FLAGS, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise HistoryFileError(f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _why(err: OSError) -> str:
    if isinstance(err, HistoryFileError):
        return "not a regular file"
    return err.strerror or str(err)


class SafeFileHistory(FileHistory):
    """prompt_toolkit's FileHistory (same format) whose reads and writes never block nor
    raise: the first failure is kept in `problem` and history goes on in memory."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.problem: str | None = None

    def load_history_strings(self) -> Iterable[str]:
        try:
            fd = _open(str(self.filename), os.O_RDONLY)
        except FileNotFoundError:
            return []
        except OSError as err:
            self.problem = _why(err)
            return []
        try:
            with os.fdopen(fd, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                cut = size > MAX_HISTORY_BYTES
                if cut:
                    f.seek(size - MAX_HISTORY_BYTES)
                data = f.read(MAX_HISTORY_BYTES)
        except OSError as err:
            self.problem = _why(err)
            return []
        strings: list[str] = []
        lines: list[str] = []
        skipping = cut                      # a cut file starts inside an entry: drop it
        for raw in data.splitlines(keepends=True):
            line = raw.decode("utf-8", errors="replace")
            if line.startswith("+"):
                if not skipping:
                    lines.append(line[1:])
                continue
            skipping = False
            if lines:
                strings.append("".join(lines)[:-1])
            lines = []
        if lines:
            strings.append("".join(lines)[:-1])
        return list(reversed(strings))      # newest first, as prompt_toolkit wants

    def store_string(self, string: str) -> None:
        if self.problem is not None:
            return
        import datetime

        text = f"\n# {datetime.datetime.now()}\n" + "".join(
            f"+{line}\n" for line in string.split("\n"))
        try:
            fd = _open(str(self.filename), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                data = text.encode("utf-8")
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)
        except OSError as err:
            self.problem = _why(err)


def open_history(path: str) -> tuple[History, str | None]:
    """The history kept in `path`, and a warning line when it cannot be used (then the
    history is kept in memory only)."""
    try:
        os.close(_open(path, os.O_RDONLY | os.O_CREAT))
    except OSError as err:
        return InMemoryHistory(), (f"warning: history file {path}: {_why(err)}; commands are "
                                   "not kept after this run")
    return SafeFileHistory(path), None
