"""Directories the offline commands write into (--out, --html), checked before any work."""

from __future__ import annotations

import os
from pathlib import Path

from cudump.errors import DiffTrouble


def output_dir(path: Path, option: str) -> Path:
    """A directory to write into, made if need be; DiffTrouble (before any work) if it is a
    file, cannot be made, or cannot be written."""
    if path.exists() and not path.is_dir():
        raise DiffTrouble(f"{option} {path}: exists and is not a directory; give a directory "
                          "(it is made if need be)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DiffTrouble(f"{option} {path}: cannot make the directory: "
                          f"{err.strerror or err}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise DiffTrouble(f"{option} {path}: the directory is not writable")
    return path


def report_dir(path: Path, index: str, given: Path | None = None, force: bool = False) -> Path:
    """The directory of an HTML report (--html), made if need be; DiffTrouble before any work
    if it already holds a page of that name: a report is never written over another unless
    --force says to (`force`)."""
    output_dir(path, "--html")
    page = path / index
    if not force and (page.exists() or page.is_symlink()):
        shown = given if given is not None else path
        raise DiffTrouble(f"--html {shown}: {page} already exists; give a new or empty "
                          "directory (or remove the old report), or --force to replace it")
    return path
