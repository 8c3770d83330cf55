"""A run directory belongs to one run at a time.

Two runs given one `--out` at once would write over each other's files (the later
`summary.json` replacing the earlier), so a run takes the directory before it looks at what
is in it, and keeps it until it ends:

- the marker is a file in the directory, `.cudump-run.lock` (layout.LOCK_FILE), holding the
  owner's pid, on which the owner keeps an exclusive flock(2). A second run finds the lock
  taken and is refused with one line naming the owner;
- the kernel drops a flock when its process dies, however it dies: a run that crashed (or
  was killed with SIGKILL) leaves at most the file, with no lock on it, and the next run
  takes it over. So no crash leaves a directory unusable; a directory that holds a crashed
  run's files is still refused as one that holds a run (commands.run);
- the owner removes the file at its end. A run that opened the file just before it was
  removed would hold a lock on a name no longer there, so a lock counts only once the name
  is seen to be the file locked (same device and inode), else it is taken again;
- the file is opened with O_NOFOLLOW: a symlink planted under its name is refused, never
  followed; its descriptor is close-on-exec, so the traced program does not hold it.

Where the file system has no flock (ENOLCK, EOPNOTSUPP), the file is made with O_EXCL
instead: a second run is still refused, but a crashed run's marker must then be removed by
hand (the error line says so).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cudump.rundir.layout import LOCK_FILE

_OPEN = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL})


class RunDirTaken(Exception):
    """The run directory belongs to another run (its pid, where the marker says it)."""

    def __init__(self, run_dir: Path, owner: int | None, stale_marker: bool = False) -> None:
        who = f"process {owner}" if owner is not None else "another process"
        text = f"{run_dir} is in use by another cudump run ({who})"
        if stale_marker:
            text += (f"; if no such run is going on, remove {run_dir / LOCK_FILE} (this "
                     "file system cannot lock it)")
        super().__init__(text)
        self.owner = owner


class MarkerInTheWay(Exception):
    """Something that is not a plain file (a symlink?) is under the marker's name."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(f"{run_dir / LOCK_FILE} is not a plain file (a symlink?); cudump "
                         "does not write through it")


@dataclass
class Ownership:
    """A run directory this run holds; `release()` gives it up (removing the marker)."""

    run_dir: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            if _same_file(fd, self.run_dir / LOCK_FILE):
                os.unlink(self.run_dir / LOCK_FILE)   # before the lock goes with the close
        except OSError:
            pass
        os.close(fd)


def take(run_dir: Path) -> Ownership:
    """The run directory, held by this process until `release()` (or its exit).
    RunDirTaken if another run holds it; MarkerInTheWay if a symlink is at the marker's
    name; OSError where the marker cannot be made (a read-only directory)."""
    path = run_dir / LOCK_FILE
    for _ in range(100):
        try:
            fd = os.open(path, _OPEN, 0o644)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise MarkerInTheWay(run_dir) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):    # a FIFO, a device planted there
            os.close(fd)
            raise MarkerInTheWay(run_dir)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _owner(fd)
            os.close(fd)
            raise RunDirTaken(run_dir, owner) from None
        except OSError as err:
            os.close(fd)
            if err.errno not in _NO_FLOCK:
                raise
            return _take_exclusive(run_dir)
        except BaseException:
            os.close(fd)
            raise
        if not _same_file(fd, path):
            os.close(fd)     # the owner removed it as it ended: the name is free again
            continue
        _write_pid(fd)
        return Ownership(run_dir, fd)
    raise RunDirTaken(run_dir, None)


def _take_exclusive(run_dir: Path) -> Ownership:
    """Without flock: the marker created new, or the directory is another run's."""
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, _OPEN | os.O_EXCL, 0o644)
    except FileExistsError:
        owner = None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            raise MarkerInTheWay(run_dir) from None
        try:
            owner = _owner(fd)
        finally:
            os.close(fd)
        raise RunDirTaken(run_dir, owner, stale_marker=True) from None
    _write_pid(fd)
    return Ownership(run_dir, fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st, named = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (named.st_dev, named.st_ino)


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _owner(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isascii() and text.isdigit() else None
