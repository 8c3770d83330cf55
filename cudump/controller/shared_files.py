"""Each process's shared file (wire/shm.SharedFile), made when it says hello; the first one made
ahead, as the program starts. The pages of a file's write-behind area are allocated by a
thread of the controller's, from the moment the file is made: allocating and clearing them
takes about 0.2 ms per MiB, and a program that snapshots large buffers right away would
otherwise wait for them. The shim pins each segment once it is allocated."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable

from cudump.rundir.files import write_error
from cudump.wire import protocol as p
from cudump.wire.shm import SharedFile


class SharedFiles:
    """Makes each process's shared file; the first one ahead of its hello."""

    def __init__(self, make: Callable[[str, int], SharedFile]) -> None:
        self._make = make      # (name, bytes of areas made but not allocated yet)
        self._lock = threading.Lock()
        self._ahead: SharedFile | None = None
        self._pending = 0      # bytes of areas whose pages are still being allocated

    def _made(self, name: str) -> SharedFile:
        # One at a time: each area is sized by the memory the ones before will take.
        with self._lock:
            made = self._make(name, self._pending)
            self._pending += made.behind_size
        if made.behind_size:
            # A descriptor of the thread's own: the file's goes once it is handed over.
            threading.Thread(target=self._allocate, args=(made, os.dup(made.fd)),
                             name="cudump-behind", daemon=True).start()
        return made

    def _allocate(self, made: SharedFile, fd: int) -> None:
        try:
            made.allocate_behind(fd, p.BEHIND_SEGMENT)
        finally:
            with self._lock:
                self._pending -= made.behind_size

    def prepare(self) -> None:
        """Makes the first process's file now, as the program starts."""
        try:
            made = self._made("cudump-first")
        except OSError:
            return     # made at hello then, where a failure is reported
        with self._lock:
            self._ahead = made

    def take(self, pid: int) -> SharedFile:
        """The shared file for process `pid`: the one made ahead, else a new one."""
        with self._lock:
            made, self._ahead = self._ahead, None
        return made if made is not None else self._made(f"cudump-{pid}")

    def close(self) -> None:
        """The file made ahead, if no process took it."""
        with self._lock:
            made, self._ahead = self._ahead, None
        if made is not None:
            made.close()


def no_shared_memory(err: OSError, staging_bytes: int) -> str:
    """Why a process got no shared file, and what to do about it. The file is sized with
    ftruncate, which the file size limit (`ulimit -f`) bounds as it bounds any file: that
    is no shortage of memory, and a smaller --staging may not be enough to fit it."""
    if err.errno == errno.EFBIG:
        return (f"no shared memory for it: {write_error(err)}, below the size of the "
                "process's shared file (its staging area, rings and write-behind area): "
                "raise the limit (ulimit -f unlimited)")
    return (f"no shared memory of {staging_bytes} bytes for it ({err.strerror}); try a "
            "smaller --staging")
