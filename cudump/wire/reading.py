"""Messages read off the controller's end of a shim's socket (protocol.py defines them)."""

from __future__ import annotations

import socket
from typing import Protocol

from cudump.wire.protocol import HEADER, MAX_MESSAGE, Message, ProtocolError


class Reader(Protocol):
    def read(self, n: int, /) -> bytes: ...


class _Unbuffered:
    """Reads exactly what is asked of a socket, nothing beyond (for one-off exchanges)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def read(self, n: int, /) -> bytes:
        chunks: list[bytes] = []
        while n > 0:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def _read_exact(source: Reader, n: int) -> bytes | None:
    data = source.read(n)
    if data is None or len(data) < n:
        return None
    return data


def read_message(source: socket.socket | Reader) -> Message | None:
    """The next message, or None at the end of the connection. Raises ProtocolError.

    `source` is a buffered reader over the socket (`sock.makefile("rb")`), so that many
    small messages cost one system call, or a socket (read through a new buffer)."""
    if isinstance(source, socket.socket):
        return read_message(_Unbuffered(source))
    head = _read_exact(source, HEADER.size)
    if head is None:
        return None
    h = HEADER.unpack(head)
    size = h["size"]
    if size < HEADER.size or size > MAX_MESSAGE:
        raise ProtocolError(f"message size {size} out of bounds")
    payload = _read_exact(source, size - HEADER.size) if size > HEADER.size else b""
    if payload is None:
        return None
    return Message(h["kind"], h["tag"], payload)
