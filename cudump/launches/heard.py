"""Whether a process's connection has read what its shim wrote on the socket, for the threads
that read its rings (the connection's reader: cudump/wire/socket_reader.py).

The shim says on the socket what a launch's ring slot does not carry (a scope node, sent
before the first launch that names it; without a trace ring, its process's collective
launches). The results drain waits until the connection has caught up before it says where
the launches of the slots it takes were made: the connection reads the socket apart from the
rings, and under load it may be behind them.
"""

from __future__ import annotations

from typing import Protocol


class Heard(Protocol):
    def wait_caught_up(self, seconds: float = ..., /) -> bool: ...


class NoSocket:
    """A process known without a connection (read back from a run directory): nothing to
    wait for."""

    def wait_caught_up(self, seconds: float = 0.0, /) -> bool:
        return True
