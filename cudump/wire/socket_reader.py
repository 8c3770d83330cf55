"""The controller's reader of one shim's socket: buffered (a burst of small messages, one
system call), and able to say when it has caught up.

The shim says on the socket what a launch's ring slot does not carry (a scope node, sent
before the first launch that names it; without a trace ring, its process's collective
launches), and the rings are read by other threads than the socket. A thread about to say
where a slot's launch was made waits until the connection has caught up (`wait_caught_up`):
its thread is back waiting for the next message, with nothing read and not yet handled, and
nothing in the socket. Whatever the shim wrote before the slot was then read and handled:
a write to a local socket is in the reader's queue when it returns.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
import threading
import time

CHUNK = 1 << 16
# A wait that runs out (a connection busy at a prompt's stop, or writing a large snapshot)
# is not made again until the connection has next caught up: the program's results are
# never held up twice for the same messages.
WAIT_SECONDS = 5.0


class SocketReader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()
        self._pos = 0
        self._idle = False           # blocked for the next message, nothing unread
        self._closed = False
        self._behind = False         # a wait ran out since the connection last caught up
        self._cond = threading.Condition()

    def read(self, n: int, /) -> bytes:
        """`n` bytes, fewer only at the end of the connection."""
        while len(self._buf) - self._pos < n:
            if self._pos:
                del self._buf[:self._pos]
                self._pos = 0
            idle = not self._buf
            if idle:
                with self._cond:
                    self._idle, self._behind = True, False
                    self._cond.notify_all()
            try:
                chunk = self.sock.recv(CHUNK)
            finally:
                if idle:
                    with self._cond:
                        self._idle = False
            if not chunk:
                break
            self._buf += chunk
        out = bytes(self._buf[self._pos:self._pos + n])
        self._pos += len(out)
        return out

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _unread(self) -> int:
        """Bytes in the socket not yet received (0 where it cannot tell: a closed socket)."""
        try:
            data = fcntl.ioctl(self.sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
        except (OSError, ValueError):
            return 0
        return struct.unpack("i", data)[0]

    def wait_caught_up(self, seconds: float = WAIT_SECONDS) -> bool:
        """Waits (at most `seconds`) until every message written on the socket so far has
        been read and handled; whether it has."""
        deadline = time.monotonic() + seconds
        with self._cond:
            while not self._closed and not (self._idle and self._unread() == 0):
                left = deadline - time.monotonic()
                if self._behind or left <= 0:
                    self._behind = True
                    return False
                self._cond.wait(left)
            return True
