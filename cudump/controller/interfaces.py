"""What the debugger needs of the run and of a process's connection, as protocols.

The debugger (debugger.py, remote_stop.py) is handed the run's state and each process's
connection by the modules that own them (run_state.py, connection.py), which import the
debugger; it imports only these protocols, so that no import goes back up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from cudump.controller.options import RunOptions
from cudump.launches.process import ProcessState
from cudump.launches.stop import StopInfo
from cudump.rundir.manifest import ManifestWriter
from cudump.wire import protocol as p
from cudump.wire.shm import SharedFile


class ProcessLink(Protocol):
    """One process's connection to the controller (connection.Connection), as a held launch
    uses it: requests go over it on the connection's own thread."""

    @property
    def proc(self) -> ProcessState | None: ...

    @property
    def shared(self) -> SharedFile | None: ...

    def send(self, kind: p.Kind, payload: bytes = b"", tag: int = 0) -> None: ...

    def request(self, kind: p.Kind, payload: bytes = b"") -> tuple[int, bytes]: ...


class RunControl(Protocol):
    """The state of the run shared by all connections (run_state.Controller), as the debugger
    uses it."""

    options: RunOptions
    lock: threading.Lock
    processes: list[ProcessState]

    @property
    def manifest(self) -> ManifestWriter: ...

    def bump(self) -> int: ...

    def each_shared(self, fn: Callable[[SharedFile], None]) -> None: ...

    def stopped(self, info: StopInfo) -> None: ...
