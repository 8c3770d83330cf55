"""The controller's socket reader (cudump/wire/socket_reader.py) says when it has caught up:
its thread waits for the next message with nothing read and unhandled, and nothing is left
in the socket. The results drain waits for that before it says where ring slots' launches
were made (what the shim said on the socket before them: scope nodes, collectives)."""

from __future__ import annotations

import socket
import threading

from cudump.wire import protocol as p
from cudump.wire.reading import read_message
from cudump.wire.socket_reader import SocketReader


def test_messages_read_whole_across_chunks_and_at_the_end() -> None:
    ours, shim = socket.socketpair()
    reader = SocketReader(ours)
    shim.sendall(p.encode(p.Kind.NOTICE, b"x" * 100, 7) + p.encode(p.Kind.SCOPE, b"", 8))
    first = read_message(reader)
    assert first is not None and (first.kind, first.tag, first.payload) == \
        (p.Kind.NOTICE, 7, b"x" * 100)
    second = read_message(reader)
    assert second is not None and second.tag == 8
    shim.close()
    assert read_message(reader) is None
    ours.close()


def test_caught_up_only_once_every_message_written_is_handled() -> None:
    ours, shim = socket.socketpair()
    reader = SocketReader(ours)
    handled: list[int] = []
    may_handle = threading.Event()

    def connection() -> None:
        while (msg := read_message(reader)) is not None:
            may_handle.wait()
            handled.append(msg.tag)

    thread = threading.Thread(target=connection)
    thread.start()
    assert reader.wait_caught_up(60)           # nothing written yet: caught up
    shim.sendall(p.encode(p.Kind.SCOPE, b"", 1) + p.encode(p.Kind.SCOPE, b"", 2))
    # Written but not handled (the connection is held): not caught up, and a wait that
    # runs out is not made again until the connection catches up.
    assert not reader.wait_caught_up(0.05)
    assert not reader.wait_caught_up(60)       # returns at once
    may_handle.set()
    while not reader.wait_caught_up(60):       # (each False: only until it catches up)
        pass
    assert handled == [1, 2]                   # every message written before, handled
    shim.close()
    thread.join()
    reader.close()
    assert reader.wait_caught_up(0)            # a closed connection has nothing to wait for
    ours.close()
