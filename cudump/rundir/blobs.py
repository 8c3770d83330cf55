"""Snapshot bytes stored once per job, under their content hash (`cudump --job`).

Data-parallel ranks hold equal buffers: under `--job`, a snapshot's .npy is written as
usual (whole, under a temporary name, renamed into the node's run directory), then hashed
and moved to `JOB/blobs/<sha256[:2]>/<sha256>.npy`, the same for every node. Where that
blob is there already (another rank, another node, an earlier launch wrote the same bytes)
the node's file is dropped and the blob reused. The rename is atomic, so a reader sees a
whole blob or none, and two nodes that store the same bytes at once leave one (equal)
file: no lock is held across the shared file system.

The manifest record keeps its `file` (the name it would have had) and gains `blob`
(`blobs/ab/ab….npy`, relative to the job directory); every reader finds the bytes through
`blob_path`, which accepts nothing but that shape of name.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from cudump.errors import SnapshotError
from cudump.rundir import files as runfiles
from cudump.rundir import reading
from cudump.rundir.job import BLOBS_DIR

BLOB_FIELD = "blob"          # the manifest record's field naming its blob
_BLOB_NAME = re.compile(r"blobs/([0-9a-f]{2})/\1[0-9a-f]{62}\.npy")
_CHUNK = 1 << 20


@dataclass
class BlobTally:
    """What storing by content saved: snapshots stored, those whose bytes a blob already
    held, and the bytes those would have taken."""

    stored: int = 0
    reused: int = 0
    bytes_saved: int = 0


def is_blob_name(name: object) -> bool:
    return isinstance(name, str) and bool(_BLOB_NAME.fullmatch(name))


def job_of_run(run_dir: Path) -> Path:
    """The job directory a node's run lies in (JOB/nodes/NODE)."""
    return run_dir.resolve().parent.parent


def blob_path(run_dir: Path, name: object) -> Path:
    """The file a record's `blob` names, in the job the run directory belongs to;
    SnapshotError for a name that is not a blob's."""
    if not is_blob_name(name):
        raise SnapshotError(f"blob {str(name)[:80]!r} is not a blob's name "
                            "(blobs/xx/<sha256>.npy); not read")
    assert isinstance(name, str)
    return job_of_run(run_dir) / name


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with reading.open_regular(path) as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class BlobStore:
    """JOB/blobs/: a written snapshot file moved there under its hash, or dropped for the
    blob that holds its bytes already."""

    def __init__(self, job: Path) -> None:
        self.root = job / BLOBS_DIR
        self.tally = BlobTally()
        self._lock = threading.Lock()

    def keep(self, path: Path) -> str:
        """Moves the finished file at `path` into the store; its blob's name (relative to
        the job directory). OSError where the store cannot be written (the file is then
        where it was)."""
        sha = file_sha256(path)
        name = f"{BLOBS_DIR}/{sha[:2]}/{sha}.npy"
        folder = self.root / sha[:2]
        target = folder / f"{sha}.npy"
        size = path.stat().st_size
        runfiles.make_dirs(folder)      # made by whichever node comes first; never a link
        if reading.is_regular(target):
            path.unlink()
            with self._lock:
                self.tally.reused += 1
                self.tally.bytes_saved += size
            return name
        # Atomic: another node storing the same bytes meanwhile leaves one equal file.
        os.replace(path, target)
        with self._lock:
            self.tally.stored += 1
        return name
