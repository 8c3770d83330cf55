"""The writer thread: each snapshot's .npy, its PNG and its manifest record, written while
the program runs on (PNG encoding never happens while the target waits)."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from cudump.console import warn
from cudump.policy.snapshot.failures import Failures
from cudump.policy.snapshot.state import SnapshotState
from cudump.rundir import files as runfiles
from cudump.rundir.imaging import is_image_like, render, save_png
from cudump.rundir.manifest import SnapshotRecord


@dataclass
class WriteJob:
    record: SnapshotRecord
    array: np.ndarray | None    # None: made by `target` first
    formats: frozenset[str]
    value_range: tuple[float, float] | None
    streamed: bool = False   # the array is the .npy itself, filled piece by piece
    # Pieces still to put into a streamed .npy first: (byte offset in it, their bytes), read
    # from the write-behind area; and how to make that .npy where there is none yet.
    fill: list[tuple[int, memoryview]] = field(default_factory=list)
    target: Callable[[], np.ndarray] | None = None


class _NoFile(Exception):
    """A snapshot's file could not be made: that snapshot fails, the others go on."""


@dataclass(frozen=True)
class Release:
    """After the jobs of a launch written behind the program: its bytes may be reused."""

    done: Callable[[], None]


class SnapshotWriter:
    """Writes queued snapshots on its own thread; stops writing (once) if the disk fails."""

    def __init__(self, state: SnapshotState, failures: Failures) -> None:
        self.state = state
        self.failures = failures
        self.run_dir = state.run_dir
        self.disk_failed: str | None = None
        self.jobs: queue.Queue[WriteJob | Release | None] = queue.Queue(maxsize=64)
        self.thread = threading.Thread(target=self._loop, name="cudump-writer", daemon=True)
        self.thread.start()

    def put(self, job: WriteJob | Release) -> None:
        self.jobs.put(job)

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            if isinstance(job, Release):
                try:
                    job.done()
                except Exception as err:  # the writer goes on whatever a release does
                    warn(f"the write-behind area could not be released: {err}")
                continue
            if self.disk_failed is not None:
                self._drop(job.record, f"not written: {self.disk_failed}")
                continue
            try:
                self._write(job)
            except _NoFile as err:
                self.failures.fail(job.record, str(err))
            except FileExistsError as err:
                # Something (a symlink?) is in the run directory under this snapshot's
                # temporary name: this one is not written; the others go on (runfiles).
                job.record.png = None
                self.failures.fail(job.record, f"could not write the snapshot: "
                                   f"{err.filename} is in the way")
            except OSError as err:
                # The disk is full or the directory went away: stop writing (once, with
                # one warning); the program carries on and the manifest stays true.
                self.disk_failed = f"writing snapshots stopped: {err.strerror or err}"
                self.state.stopped = True
                warn(f"{self.disk_failed} ({self.run_dir}); no more snapshots, the program "
                     "carries on")
                self._drop(job.record, self.disk_failed)
            except Exception as err:  # a bad write must not stop the others
                job.record.png = None
                self.failures.fail(job.record, f"could not write the snapshot: {err}")

    def _drop(self, record: SnapshotRecord, reason: str) -> None:
        """A snapshot that cannot be written: recorded if the manifest still can be."""
        record.status, record.reason, record.file, record.png = "error", reason, None, None
        state = self.state
        with state.lock:
            state.tally.failed += 1
            try:
                state.manifest.append(record)
            except OSError:
                pass  # the manifest keeps only whole lines (see ManifestWriter)

    def _write(self, job: WriteJob) -> None:
        record = job.record
        assert record.file is not None
        npy = self.run_dir / record.file
        png = npy.with_suffix(".png")
        written: list[Path] = []
        try:
            if job.array is None:
                assert job.target is not None
                try:
                    job.array = job.target()
                except FileExistsError:
                    raise                 # something in the way: said so below
                except OSError as err:    # this snapshot's file, not the disk's end
                    raise _NoFile(f"cannot create its file: {err.strerror or err}") from None
            array = job.array
            if job.streamed:
                part = npy.with_name(f".{npy.name}.part")
                if job.fill:
                    # From the write-behind area by file writes: filling the mapping would
                    # fault the file's pages in one at a time, which is slower.
                    fd = runfiles.reopen(part)
                    try:
                        start = int(array.offset)  # type: ignore[attr-defined]
                        for dst, piece in job.fill:
                            runfiles.write_at(fd, piece, start + dst)
                    finally:
                        os.close(fd)
                array.flush()  # type: ignore[attr-defined]
                if "npy" in job.formats:
                    os.replace(part, npy)
                    written.append(npy)
                else:
                    record.file = None
            elif "npy" in job.formats:
                save_whole(npy, lambda tmp: save_npy(tmp, array))
                written.append(npy)
            else:
                record.file = None
            if "png" in job.formats and is_image_like(array.dtype, array.shape):
                rendered = render(array, value_range=job.value_range)
                info = {"kernel": record.kernel, "arg": str(record.arg),
                        "phase": record.phase, "launch": str(record.launch)}
                save_whole(png, lambda f: save_png(rendered, f, info))
                written.append(png)
                record.png = png.name
                if rendered.value_range is not None and array.dtype.kind == "f":
                    record.range = [float(rendered.value_range[0]),
                                    float(rendered.value_range[1])]
            state = self.state
            with state.lock:
                state.manifest.append(record)
                state.tally.written += 1
                state.tally.bytes_written += array.nbytes
        except BaseException:
            # No file without its manifest line, and no line without its file.
            for path in written:
                path.unlink(missing_ok=True)
            raise
        finally:
            if job.streamed:
                npy.with_name(f".{npy.name}.part").unlink(missing_ok=True)

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join()


def save_npy(f: IO[bytes], array: np.ndarray) -> None:
    np.save(f, array)  # a file object: np.save would add ".npy" to a name


def save_whole(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Writes through a temporary name and renames: a reader never sees half a file, and
    nothing is written through a symlink planted in the run directory (runfiles)."""
    runfiles.write_whole(path, write)


def new_npy_memmap(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """np.lib.format.open_memmap(path, "w+") on a file created new (runfiles.create_file):
    it would open `path` by name, twice, following a symlink planted there."""
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
              "shape": shape}
    with runfiles.create_file(path, "w+b") as f:
        try:
            np.lib.format.write_array_header_1_0(f, header)
        except ValueError:   # a header too long for format 1.0
            f.seek(0)
            f.truncate()
            np.lib.format.write_array_header_2_0(f, header)
        # np.memmap sizes the file and maps it through the descriptor (mmap keeps its own).
        return np.memmap(f, dtype=dtype, mode="r+", offset=f.tell(), shape=shape)
