"""Ctrl-C once the prompt has let the program go (detach, the end of a batch, kill): as after
gdb's detach, it is the program's. The program runs in its own process group (so that the
prompt got the terminal's Ctrl-C), so the terminal's SIGINT reaches cudump only, and cudump
passes it on to the program's process group."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

Handler = Callable[[int, Any], Any]

# What Ctrl-C says while the debugger has the program: before the prompt is ready (the
# session) and at the prompt (cudump/prompt/repl.py).
INTERRUPT_MESSAGE = "cudump: interrupt: stopping at the next launch (Ctrl-C again to end the run)"
END_MESSAGE = "cudump: interrupt: ending the run"


def forwarder(child: subprocess.Popen[bytes]) -> Handler:
    """A signal handler that passes the signal on to the program's process group."""
    def forward(signum: int, _frame: object) -> None:
        if child.returncode is None:
            try:
                os.killpg(child.pid, signum)
            except OSError:
                pass

    return forward


def pass_ctrl_c_on(child: subprocess.Popen[bytes] | None) -> None:
    """From now on Ctrl-C is the program's. Set as soon as the prompt lets the program go,
    before it says so: a Ctrl-C that comes while the prompt winds down must not end cudump
    without its summary."""
    if child is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, forwarder(child))
