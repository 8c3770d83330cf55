"""Reading what a run wrote: its manifest, its snapshot files, and choosing snapshots.

Shared by the offline commands (`cudump diff`, `ls`, `show`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cudump.errors import SnapshotError
from cudump.imaging import read_png
from cudump.manifest import MANIFEST, SnapshotRecord, read_manifest

PHASE_ORDER = {"before": 0, "after": 1}


def load_array(path: str | Path) -> np.ndarray:
    """A snapshot file as an array: .npy memory-mapped (read-only), .png decoded."""
    path = Path(path)
    if not path.is_file():
        raise SnapshotError(f"{path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            # mmap: a diff of two large runs only pages in what it reads, and the page
            # cache is shared by the worker threads.
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            # asarray drops the memmap subclass, whose per-operation overhead is measurable.
            return np.asarray(arr)
        if suffix == ".png":
            return read_png(path)
    except (OSError, ValueError) as err:
        raise SnapshotError(f"{path}: cannot read: {err}") from None
    raise SnapshotError(f"{path}: not a .npy or .png file")


def short_kernel_name(kernel: str) -> str:
    """The demangled name without its parameter list: `ns::k<2>(float*, int)` -> `ns::k<2>`."""
    name = kernel.rstrip()
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        ch = name[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                return name[:i].rstrip() or name
    return name


def kernel_matches(pattern: str, kernel: str) -> bool:
    """Does a user's kernel pattern name this kernel?

    A pattern with wildcards (* ? [) is a shell-style glob matched against the demangled name
    with and without its parameter list; a plain word matches any name containing it.
    """
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(kernel, pattern) or fnmatch.fnmatchcase(
            short_kernel_name(kernel), pattern
        )
    return pattern in kernel


def is_run_dir(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


@dataclass
class Snapshot:
    """A manifest record with its position in the manifest and the run it belongs to."""

    index: int                 # position in manifest.jsonl, from 0 (as `cudump ls` shows)
    record: SnapshotRecord
    run_dir: Path

    @property
    def ok(self) -> bool:
        return self.record.status == "ok" and self.record.file is not None

    @property
    def path(self) -> Path | None:
        return self.run_dir / self.record.file if self.record.file else None

    def load(self) -> np.ndarray:
        if not self.ok or self.path is None:
            why = self.record.reason or "no file was written"
            raise SnapshotError(f"snapshot #{self.index} was not captured: {why}")
        return load_array(self.path)

    def sort_key(self) -> tuple[int, int, int, int]:
        r = self.record
        return (r.pid, r.launch, PHASE_ORDER.get(r.phase, 2), r.arg)

    def describe(self) -> str:
        r = self.record
        return (
            f"#{self.index} {short_kernel_name(r.kernel)} occurrence {r.occurrence} "
            f"arg {r.arg} {r.phase}"
        )


@dataclass
class Run:
    path: Path
    snapshots: list[Snapshot]

    @classmethod
    def open(cls, path: str | Path) -> Run:
        path = Path(path)
        records = read_manifest(path)
        return cls(path, [Snapshot(i, r, path) for i, r in enumerate(records)])

    def select(
        self,
        kernel: str | None = None,
        *,
        arg: int | None = None,
        phase: str | None = None,
        occurrence: int | None = None,
        launch: int | None = None,
        pid: int | None = None,
        index: int | None = None,
    ) -> list[Snapshot]:
        """Snapshots that satisfy every criterion given (None: any)."""
        return [s for s in self.snapshots if _wanted(s, kernel, arg, phase, occurrence,
                                                      launch, pid, index)]

    def by_file(self, file: str | Path) -> Snapshot | None:
        """The snapshot whose .npy or .png is this file, if any."""
        target = Path(file).resolve()
        for snap in self.snapshots:
            for rel in (snap.record.file, snap.record.png):
                if rel and (self.path / rel).resolve() == target:
                    return snap
        return None


def _wanted(
    snap: Snapshot,
    kernel: str | None,
    arg: int | None,
    phase: str | None,
    occurrence: int | None,
    launch: int | None,
    pid: int | None,
    index: int | None,
) -> bool:
    r = snap.record
    return (
        (index is None or snap.index == index)
        and (kernel is None or kernel_matches(kernel, r.kernel))
        and (arg is None or r.arg == arg)
        and (phase is None or r.phase == phase)
        and (occurrence is None or r.occurrence == occurrence)
        and (launch is None or r.launch == launch)
        and (pid is None or r.pid == pid)
    )


def in_launch_order(snapshots: Iterable[Snapshot]) -> list[Snapshot]:
    return sorted(snapshots, key=Snapshot.sort_key)
