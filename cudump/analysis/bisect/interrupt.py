"""A bisection stopped by a signal (SIGTERM, SIGINT, SIGHUP): its side runs are stopped,
its temporary work directory removed, and it exits as the shell says a process ended by
that signal did (128 + N).

The side runs each run in a session of their own (side_run), so a terminal's Ctrl-C reaches
bisect alone; bisect then ends each side run's whole process group, cudump and the
program with it, rather than leaving them to run on."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(BaseException):
    """A stop signal came: raised in the main thread, wherever it was, so that everything
    under way unwinds (a side run being waited for is stopped on the way)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within it, a stop signal raises Interrupted; after the first, further ones are
    ignored until it ends (the cleanup is not itself cut short). A signal that was ignored
    when bisect started (nohup's SIGHUP, a background job's SIGINT) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def stop(signum: int, _frame: FrameType | None) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    try:
        for s, handler in old.items():
            if handler is not signal.SIG_IGN:
                signal.signal(s, stop)
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
