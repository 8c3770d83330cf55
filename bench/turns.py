"""Processes that take turns, so that each is timed at the same moment as the others.

The hosts that run the GPU benchmarks run the same process at several speeds, and change
speed within seconds (docs/performance.md): two processes run one after the other can meet
different speeds, and their ratio carries that. Processes that take turns meet the same one.
The harness starts them all; each warms up and says it is ready; then a baton goes round a
ring of FIFOs, one FIFO a process, and a process times a chunk of its work only while it
holds the baton, then hands it on. The chunks of a round run one after the other, within a
fraction of a second, and never two at once.

The harness (Ring) makes the FIFOs and holds both ends of each open for the ring's life, so
that a participant's opens never block and its writes never fail, whoever has ended. A
participant (Turns) reads one byte a turn and waits at most `wait_s` for it. After the last
process's last turn the baton comes back once more to the first: its word that the ring is
done (the first process may then time more on its own).
"""

from __future__ import annotations

import os
import select
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BATON = b"b"
READY = b"r"
POLL_S = 0.2        # how often the harness looks at its processes while it waits for them


class TurnError(Exception):
    """The ring cannot go on: a turn did not come, or a process ended before it was ready."""


def _read_byte(fd: int, timeout_s: float, what: str) -> bool:
    """One byte from a FIFO opened non-blocking: False if none came in timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            continue
        try:
            data = os.read(fd, 1)
        except BlockingIOError:
            continue        # another reader took it: wait again
        if not data:
            raise TurnError(f"the ring ended while waiting for {what}")
        return True


@dataclass
class Turns:
    """A participant: `mine` is the FIFO its turns come through, `next` the next process's,
    `ready` the harness's."""

    mine: Path
    next: Path
    ready: Path
    wait_s: float = 600.0
    _fds: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def parse(cls, spec: str, wait_s: float = 600.0) -> Turns:
        """`MINE,NEXT,READY`, as Ring.spec writes it."""
        parts = spec.split(",")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"--turns: expected MINE,NEXT,READY (three FIFOs), got {spec!r}")
        for part in parts:
            try:
                mode = os.stat(part).st_mode
            except OSError as err:
                raise ValueError(f"--turns: {part}: {err.strerror}") from None
            if not stat.S_ISFIFO(mode):
                raise ValueError(f"--turns: {part} is not a FIFO")
        return cls(Path(parts[0]), Path(parts[1]), Path(parts[2]), wait_s)

    def _fd(self, name: str) -> int:
        if name not in self._fds:
            path = getattr(self, name)
            # Non-blocking: a FIFO without a reader fails the open (ENXIO) instead of
            # waiting for one; the harness holds a reader of every FIFO while the ring runs.
            flags = os.O_RDONLY if name == "mine" else os.O_WRONLY
            try:
                self._fds[name] = os.open(path, flags | os.O_NONBLOCK)
            except OSError as err:
                raise TurnError(f"{path}: {err.strerror} (is the ring's harness gone?)") from None
        return self._fds[name]

    def say_ready(self) -> None:
        os.write(self._fd("ready"), READY)

    def wait(self) -> None:
        """Until this process's turn."""
        if not _read_byte(self._fd("mine"), self.wait_s, "this process's turn"):
            raise TurnError(f"this process's turn did not come in {self.wait_s:g} s")

    def pass_on(self) -> None:
        os.write(self._fd("next"), BATON)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class Ring:
    """The harness's side: `size` FIFOs in a ring and one the participants say ready on,
    made in `directory` (made too, if it is not there) and removed by close()."""

    def __init__(self, directory: Path, size: int) -> None:
        if size < 1:
            raise ValueError("a ring needs a process")
        self.directory = directory
        self._made_directory = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        self.size = size
        self.paths = [directory / f"turn-{i}" for i in range(size)]
        self.ready_path = directory / "ready"
        self._fds: list[int] = []
        try:
            for path in [*self.paths, self.ready_path]:
                os.mkfifo(path)
                # Both ends in one descriptor: the FIFO has a reader and a writer for as
                # long as the ring lives.
                self._fds.append(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        except BaseException:
            self.close()
            raise

    def spec(self, index: int) -> str:
        """The --turns argument of the ring's process `index`."""
        return (f"{self.paths[index]},{self.paths[(index + 1) % self.size]},"
                f"{self.ready_path}")

    def wait_ready(self, timeout_s: float, ended: Callable[[], str | None]) -> None:
        """Until every process said it is ready; TurnError if `ended` names one that ended
        first (it is asked every POLL_S), or after timeout_s."""
        deadline = time.monotonic() + timeout_s
        for count in range(self.size):
            while True:
                gone = ended()
                if gone:
                    raise TurnError(f"{gone} before it was ready")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TurnError(f"{count} of {self.size} processes were ready after "
                                    f"{timeout_s:g} s")
                if _read_byte(self._fds[-1], min(POLL_S, left), "a process's word"):
                    break

    def start(self) -> None:
        """The first turn, to the first process."""
        os.write(self._fds[0], BATON)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        for path in [*self.paths, self.ready_path]:
            path.unlink(missing_ok=True)
        if self._made_directory:
            self.directory.rmdir()
            self._made_directory = False

    def __enter__(self) -> Ring:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
