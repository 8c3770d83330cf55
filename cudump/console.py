"""The one place cudump's own messages go to the terminal.

Trace lines, warnings and the summary are written by several threads (one per
target process, the snapshot writer, the prompt). They all go through
`console.say`, which writes whole lines under one lock, so that lines never
interleave, and which the prompt redirects while it reads input so that a
message from another process never breaks the line being typed.

A closed or broken stderr (`cudump ... 2>&1 | head -1`) must not end the run:
after the first failed write, messages are dropped and the run goes on.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

Sink = Callable[[str], None]


class Console:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sink: Sink | None = None
        self._broken = False

    def say(self, line: str) -> None:
        """Writes one line (no trailing newline needed) to the user."""
        with self._lock:
            if self._sink is not None:
                try:
                    self._sink(line)
                    return
                except Exception:  # the prompt's sink failed: fall back to stderr
                    self._sink = None
            self._write(sys.stderr, line)

    def say_lines(self, lines: list[str]) -> None:
        """Many lines at once (a batch of trace events): one write when nothing redirects."""
        if not lines:
            return
        with self._lock:
            if self._sink is None:
                self._write(sys.stderr, "\n".join(lines))
                return
        for line in lines:
            self.say(line)

    def _write(self, stream: TextIO, line: str) -> None:
        if self._broken:
            return
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):
            # EPIPE, EBADF, a closed file: nobody is reading; carry on quietly.
            self._broken = True

    def redirect(self, sink: Sink | None) -> None:
        """Sends lines to `sink` (the prompt's printer) until redirect(None)."""
        with self._lock:
            self._sink = sink


console = Console()


def say(line: str) -> None:
    console.say(line)


def say_lines(lines: list[str]) -> None:
    console.say_lines(lines)


def warn(message: str) -> None:
    console.say(f"cudump: warning: {message}")


# ---------------------------------------------------------------- text from files

def printable(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with its control characters escaped (`\\x1b`, `\\r`, `\\n`), so that what a run's
    files hold (a kernel name, a stream, a path) never acts on the terminal it is shown on."""
    if text.isprintable() or (keep_newlines and text.replace("\n", "").isprintable()):
        return text
    if keep_newlines:
        return "\n".join(printable(part) for part in text.split("\n"))
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class PrintableWriter:
    """A text stream that writes through printable(): the offline commands' stdout."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text, keep_newlines=True))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
