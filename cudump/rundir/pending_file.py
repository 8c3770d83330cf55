"""A file written as a run goes and put in place, whole, only when it is finished.

It is written unnamed (O_TMPFILE) in its destination's directory and given the name at the
end (linked under a temporary name, then renamed over the destination), so that a run
that is killed leaves neither a partial file nor a stray temporary one. Where the file
system has no O_TMPFILE, it is written under a hidden temporary name beside the
destination instead (a run killed with SIGKILL then leaves that name behind).
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

BUFFER = 1 << 20


class PendingFile:
    """Text written to `path`'s directory; `finish()` gives it the name, `discard()` not."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        folder = self.path.parent
        self._temp: Path | None = None
        try:
            fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o644)
        except OSError as err:
            if err.errno not in _NO_TMPFILE:
                raise
            self._temp = self._temp_name()
            fd = os.open(self._temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o644)
        self._fd = fd
        self.file = open(fd, "w", encoding="utf-8", buffering=BUFFER, closefd=False)
        self._done = False

    def _temp_name(self) -> Path:
        return self.path.with_name(f".{self.path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")

    def finish(self) -> Path:
        """Flushes the file and puts it in place under its name (replacing what was there)."""
        if self._done:
            return self.path
        self._done = True
        try:
            self.file.close()
            os.fsync(self._fd)
            temp = self._temp
            if temp is None:
                temp = self._temp_name()
                # linkat(AT_SYMLINK_FOLLOW) of the /proc name: a dir fd makes os.link use it.
                folder = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.link(f"/proc/self/fd/{self._fd}", temp.name, dst_dir_fd=folder,
                            follow_symlinks=True)
                finally:
                    os.close(folder)
                self._temp = temp
            os.replace(temp, self.path)
            self._temp = None
        except BaseException:
            self._remove_temp()
            raise
        finally:
            os.close(self._fd)
        return self.path

    def discard(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            self.file.close()
        except OSError:
            pass
        os.close(self._fd)
        self._remove_temp()

    def _remove_temp(self) -> None:
        if self._temp is not None:
            try:
                self._temp.unlink()
            except OSError:
                pass
            self._temp = None


# What open(O_TMPFILE) fails with where the file system cannot make unnamed files.
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.EISDIR})   # EISDIR: before 3.11
