"""Typed errors. Each carries the exit status the CLI turns it into."""

from __future__ import annotations


class CudumpError(Exception):
    """A problem cudump reports as one line and a non-zero exit status."""

    exit_code: int = 2

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CudumpError):
    """Bad command-line arguments."""


class ShimNotFound(CudumpError):
    """The native shim library is missing (the package was not built)."""


class RuleError(CudumpError):
    """A rule file is invalid. The message names the file, the line and the field."""

    def __init__(self, path: str, line: int | None, field: str | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        what = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{what} {problem}")
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem


class SnapshotError(CudumpError):
    """A snapshot could not be read or written."""


class DiffTrouble(CudumpError):
    """cudump diff could not compare its inputs (exit status 2, like diff/cmp)."""


class GeometryError(CudumpError):
    """A snapshot cannot be planned: the pointer is untracked, or the geometry a
    rule asks for reaches outside the allocation. The message is the reason the
    manifest records."""


class QueryError(CudumpError):
    """The columnar index (rundir/index.py) cannot be written or read, or a query failed."""
