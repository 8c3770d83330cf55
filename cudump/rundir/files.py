"""Creating the files of a run, each one new and inside its run directory.

`--out` may name a directory that exists already, and what is in it is not cudump's: a
symlink planted under a name the run writes (`manifest.jsonl`, a snapshot's name) must not
carry the run's bytes to wherever it points, and a file that is there already must not be
appended to. So:

- every file of a run is created with O_CREAT | O_EXCL | O_NOFOLLOW: never through a
  symlink, never into a file that was there (FileExistsError instead);
- a file meant to appear whole is written under a temporary name created the same way and
  renamed over its final name, which replaces a symlink there rather than following it.
  Temporary names hold a token drawn by this process (and, for whole files, one drawn by
  each write): a stale `.NAME.part` left by an earlier run, or a file or symlink planted
  under a name that could be guessed, can neither block the write nor redirect it;
- a folder the run makes inside itself (`modules/`) must be a real folder, not a symlink;
- a file the run created and opens again (a module image written chunk by chunk) is
  reopened with O_NOFOLLOW.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource
import secrets
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from cudump.sizes import human_bytes

NEW_FILE = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create(path: str | Path, flags: int = os.O_WRONLY, mode: int = 0o644) -> int:
    """A descriptor of a new file at `path` (FileExistsError if anything is there, a
    dangling symlink included)."""
    return os.open(path, flags | NEW_FILE, mode)


def create_file(path: str | Path, mode: str = "wb", encoding: str | None = None) -> IO[Any]:
    """A new file at `path` as a file object; `mode` is "wb", "w+b" or a text mode."""
    flags = os.O_RDWR if "+" in mode else os.O_WRONLY
    fd = create(path, flags)
    try:
        return os.fdopen(fd, mode, encoding=encoding)
    except BaseException:
        os.close(fd)
        raise


def reopen(path: str | Path, flags: int = os.O_WRONLY) -> int:
    """A descriptor of a file this run created, opened again; never through a symlink
    (ELOOP if one took its place)."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


class LineAppender:
    """A run file written a line at a time from any thread (captures.jsonl, outputs.jsonl):
    created new at the first line, opened again for each later one, never through a
    symlink. The first write that fails stops it: `on_stop` is told why, once (a lost line
    must not stop the run)."""

    def __init__(self, path: Path, on_stop: Callable[[str], None]) -> None:
        self.path = path
        self.on_stop = on_stop
        self.lock = threading.Lock()
        self.count = 0
        self.created = False
        self.failed: str | None = None

    def append(self, line: bytes) -> bool:
        """Whether the line was written (False: stopped, now or before)."""
        with self.lock:
            if self.failed is not None:
                return False
            try:
                fd = (reopen(self.path, os.O_WRONLY | os.O_APPEND) if self.created
                      else create(self.path, os.O_WRONLY | os.O_APPEND))
                self.created = True
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
            except OSError as err:
                self.failed = f"{self.path.name} stopped: {err.strerror or err}"
                self.on_stop(self.failed)
                return False
            self.count += 1
            return True


def write_at(fd: int, data: memoryview, offset: int) -> None:
    """All of `data` at `offset` of file `fd`."""
    while data:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


# Drawn once per process: the temporary names of this run's files are its own.
_TOKEN = f"{os.getpid()}-{secrets.token_hex(6)}"
PART_SUFFIX = ".part"      # every temporary name ends so (a reader of the run skips them)


def temporary_name(path: Path) -> Path:
    """The name a file of this run is written under before it is renamed into place: the
    same for the same `path` all through the run (a streamed snapshot's is found again by
    it), and no earlier run's nor anyone else's."""
    return path.with_name(f".{path.name}.{_TOKEN}{PART_SUFFIX}")


def _fresh_temporary(path: Path) -> tuple[Path, IO[bytes]]:
    """A temporary file for `path` created new under a name drawn for this write alone
    (another draw, should one ever be taken)."""
    for _ in range(8):
        tmp = path.with_name(f".{path.name}.{_TOKEN}-{secrets.token_hex(4)}{PART_SUFFIX}")
        try:
            return tmp, create_file(tmp)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no fresh temporary name could be created",
                          str(path))


def write_whole(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """Writes the file through a temporary name and renames it into place: a reader never
    sees half a file, and a symlink at `path` is replaced, never followed."""
    path = Path(path)
    tmp, f = _fresh_temporary(path)
    try:    # from here on the temporary file is this call's own: removed on any failure
        with f:
            write(f)    # closing flushes, and a full disk may say so only then
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def make_dir(path: str | Path) -> Path:
    """A folder of the run: made, or one that is there already as a real folder (a symlink
    to one, or anything else, is refused with NotADirectoryError)."""
    path = Path(path)
    try:
        path.mkdir()
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "something that is not a folder is in "
                                     "the way (a symlink?)", str(path)) from None
    return path


def make_dirs(path: str | Path) -> Path:
    """`path` and the folders above it that are missing, each made new (make_dir): none is
    a symlink, whatever appears under their names meanwhile. Folders above it that are
    there already are the user's, symlinks or not."""
    path = Path(path)
    missing: list[Path] = []
    at = path
    while not os.path.lexists(at) and at.parent != at:
        missing.append(at)
        at = at.parent
    if not missing:
        return make_dir(path)      # there: a real folder, or NotADirectoryError
    for folder in reversed(missing):
        make_dir(folder)
    return path


def check_writable(run_dir: Path) -> None:
    """OSError unless a file can be created in run_dir (a read-only file system, a folder
    of /proc or /sys, no permission): found before the program starts, not after. Root
    passes permission checks, so only creating a file tells."""
    probe = run_dir / f".cudump-probe-{_TOKEN}-{secrets.token_hex(4)}"
    os.close(create(probe))
    os.unlink(probe)


def write_error(err: OSError) -> str:
    """Why a file could not be written, in words that name the cause: a file larger than
    the process may write (RLIMIT_FSIZE, `ulimit -f`; EFBIG with SIGXFSZ ignored) says
    what the limit is, since "File too large" alone reads as a fault of the file."""
    text = err.strerror or str(err)
    if err.errno == errno.EFBIG:
        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY:
            text += f" (the file size limit, ulimit -f, is {human_bytes(soft)})"
    return text


def remove_own_temporaries(folder: Path) -> list[str]:
    """Removes what this process left under temporary names in `folder` (a write that
    failed, or never ran): only names holding its own token, so nothing of another
    run's. The names removed, for saying so."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    mark = f".{_TOKEN}"
    for entry in entries:
        name = entry.name
        if name.startswith(".") and name.endswith(PART_SUFFIX) and mark in name:
            try:
                os.unlink(entry.path)
                removed.append(name)
            except OSError:
                pass
    return removed


def _libc_fallocate() -> Any:
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).fallocate64
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


_FALLOCATE = _libc_fallocate()
# What fallocate(2) fails with where the file system cannot reserve blocks.
_NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


def reserve(fd: int, nbytes: int) -> None:
    """The first `nbytes` of file `fd` given their blocks now, so that a mapping of it is
    never short of them: a store into a mapped page a full disk cannot back is SIGBUS,
    which would end cudump; here it is ENOSPC (or EFBIG past the file size limit), an
    OSError. fallocate(2) itself, not posix_fallocate, which where the file system has no
    fallocate writes a byte into every block instead (slow for large files): there the
    file is left as it is."""
    if _FALLOCATE is None or nbytes <= 0:
        return
    if _FALLOCATE(fd, 0, 0, nbytes) != 0:
        err = ctypes.get_errno()
        if err not in _NO_FALLOCATE:
            raise OSError(err, os.strerror(err))
