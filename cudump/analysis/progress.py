"""One line of progress on the terminal for long offline work (`cudump diff`, `bisect`).

Shown only where stderr is a terminal: rewritten in place with a carriage return, at most
every INTERVAL seconds (the first at once), and taken off the screen before other output
reaches the same terminal and when the work is done. Elsewhere (a pipe, a file, a test's
capture) nothing at all is written.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

INTERVAL = 0.1


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """A `\\r`-updated line on `stream` (stderr), or nothing where it is not a terminal."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None,
                 interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _isatty(self.stream) if enabled is None else enabled
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._width = 0                 # what is on the screen now
        self._last: float | None = None  # when it was drawn

    def update(self, text: str) -> None:
        """Shows `text` in place of the line shown, unless one was shown moments ago."""
        if not self.enabled:
            return
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self.interval:
                return
            self._last = now
            text = text[:max(self._columns() - 1, 10)]   # a wrapped line cannot be rewritten
            self._write("\r" + text + " " * max(0, self._width - len(text)))
            self._width = len(text)

    def clear(self) -> None:
        """Takes the line off the screen (the next update shows at once)."""
        if not self.enabled:
            return
        with self._lock:
            if self._width:
                self._write("\r" + " " * self._width + "\r")
                self._width = 0
            self._last = None

    def before_output(self, out: TextIO | None = None) -> None:
        """Clears the line if `out` (stdout) writes to a terminal too: a line printed there
        must not run into it."""
        if self._width and _isatty(out if out is not None else sys.stdout):
            self.clear()

    def _columns(self) -> int:
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
        return columns or 80             # a terminal that does not say its size: 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False          # nobody is reading: no more progress
