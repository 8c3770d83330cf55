"""The line of the program's own code that called a PyTorch module (--layers).

PyTorch gives the GIL up around its operations, so the shim finds no Python frame to walk
at their launches; the forward pre-hook tells it the line instead (the shim's
`cudump_scope_source`), and the post-hook puts back the one before. The program's own code
is what is not under site-packages/dist-packages, not the standard library, not cudump,
and not generated (`<...>`): the same rule as the shim's frame walk (shim/pysource.c)."""

from __future__ import annotations

import os
import sys
import sysconfig
from types import CodeType, FrameType

_FRAMES = 64          # frames looked at, at most (the shim's bound too)


def _not_users() -> tuple[str, ...]:
    places = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib",
                                                          "platlib")}
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # cudump/
    return tuple(sorted(p.rstrip(os.sep) + os.sep for p in places | {here} if p))


class UserLines:
    """The innermost frame of the program's own code, as 'file:line'."""

    def __init__(self) -> None:
        self.skip = _not_users()
        self.cwd = os.getcwd().rstrip(os.sep) + os.sep
        self.files: dict[CodeType, str | None] = {}    # code -> its shown file, or None

    def _file(self, code: CodeType) -> str | None:
        shown = self.files.get(code, "")
        if shown != "":
            return shown
        path = code.co_filename
        users = not (path.startswith("<") or "site-packages" in path
                     or "dist-packages" in path or path.startswith(self.skip))
        shown = (path[len(self.cwd):] if path.startswith(self.cwd) else path) if users else None
        if len(self.files) < 65536:
            self.files[code] = shown
        return shown

    def line(self, depth: int = 2) -> str | None:
        frame: FrameType | None = sys._getframe(depth)
        for _ in range(_FRAMES):
            if frame is None:
                return None
            shown = self._file(frame.f_code)
            if shown is not None:
                return f"{shown}:{frame.f_lineno}"
            frame = frame.f_back
        return None
