"""The writer thread: each snapshot's files (one per format its rule names that can hold the
data: .npy, .png; cudump.rundir.formats) and its manifest record, written while the
program runs on (PNG encoding never happens while the target waits). The files of a
launch written behind the program are written side by side, by a few threads: one thread
writes one file at about the rate np.save does (2 GB/s into tmpfs on the hosts measured),
which is what holds back a program that snapshots large buffers in a loop. Their manifest
records still come in the order their jobs came (Turns)."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from cudump.console import warn
from cudump.policy.snapshot.failures import Failures
from cudump.policy.snapshot.state import SnapshotState
from cudump.rundir import files as runfiles
from cudump.rundir import formats as file_formats
from cudump.rundir.blobs import BLOB_FIELD
from cudump.rundir.formats import Picture, SnapshotFormat
from cudump.rundir.manifest import SnapshotRecord


@dataclass
class WriteJob:
    record: SnapshotRecord
    array: np.ndarray | None    # None: made by `target` first
    formats: frozenset[str]     # the rule's (rundir.formats names)
    value_range: tuple[float, float] | None
    streamed: bool = False   # the array is the .npy itself, filled piece by piece
    # Pieces still to put into a streamed .npy first: (byte offset in it, their bytes), read
    # from the write-behind area; and how to make that .npy where there is none yet.
    fill: list[tuple[int, memoryview]] = field(default_factory=list)
    target: Callable[[], np.ndarray] | None = None
    behind: bool = False     # its bytes lie in the write-behind area until a Release


class _NoFile(Exception):
    """A snapshot's file could not be made: that snapshot fails, the others go on."""


@dataclass(frozen=True)
class Release:
    """After the jobs of a launch written behind the program: its bytes may be reused."""

    done: Callable[[], None]


# Threads writing the files of a launch written behind the program at once.
BEHIND_WRITERS = 4


class Turns:
    """The order in which jobs written side by side put their records in the manifest: the
    order they came in. Each job takes a turn where it is queued, records in it (waiting for
    the jobs before it), and ends it whatever became of it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._given = 0     # taken by the writer thread only
        self._next = 0      # the turn whose records may go in now

    def take(self) -> int:
        turn, self._given = self._given, self._given + 1
        return turn

    @contextmanager
    def recording(self, turn: int) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: self._next == turn)
        yield

    def end(self, turn: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._next == turn)
            self._next = turn + 1
            self._cond.notify_all()


class SnapshotWriter:
    """Writes queued snapshots on its own thread, a launch's written behind the program side
    by side; stops writing (once) if the disk fails."""

    def __init__(self, state: SnapshotState, failures: Failures) -> None:
        self.state = state
        self.failures = failures
        self.run_dir = state.run_dir
        self.disk_failed: str | None = None
        self._disk_lock = threading.Lock()
        self.jobs: queue.Queue[WriteJob | Release | None] = queue.Queue(maxsize=64)
        # A pool's threads start its jobs in the order they came: a job waiting for its
        # turn only ever waits for jobs that have begun.
        self._side = ThreadPoolExecutor(BEHIND_WRITERS, thread_name_prefix="cudump-writer")
        self._writing: list[Future[None]] = []
        self._turns = Turns()
        self.thread = threading.Thread(target=self._loop, name="cudump-writer", daemon=True)
        self.thread.start()

    def put(self, job: WriteJob | Release) -> None:
        self.jobs.put(job)

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if isinstance(job, WriteJob) and job.behind:
                self._writing.append(self._side.submit(self._beside, job, self._turns.take()))
                continue
            # Anything else comes after the files side by side before it: a launch's bytes
            # are released once its files are whole, and files come in the order they came.
            for writing in self._writing:
                writing.result()
            self._writing.clear()
            if job is None:
                return
            if isinstance(job, Release):
                try:
                    job.done()
                except Exception as err:  # the writer goes on whatever a release does
                    warn(f"the write-behind area could not be released: {err}")
                continue
            self._handle(job)

    def _beside(self, job: WriteJob, turn: int) -> None:
        try:
            self._handle(job, turn)
        finally:
            self._turns.end(turn)

    def _in_turn(self, turn: int | None) -> AbstractContextManager[None]:
        return nullcontext() if turn is None else self._turns.recording(turn)

    def _handle(self, job: WriteJob, turn: int | None = None) -> None:
        """Writes one job; whatever goes wrong is that snapshot's failure, or the disk's.
        `turn`: a job written side by side, whose record waits for those before it."""
        if self.disk_failed is not None:
            self._discard_part(job)
            with self._in_turn(turn):
                self._drop(job.record, f"not written: {self.disk_failed}")
            return
        try:
            self._write(job, turn)
        except _NoFile as err:
            with self._in_turn(turn):
                self.failures.fail(job.record, str(err))
        except FileExistsError as err:
            # Something (a symlink?) is in the run directory under this snapshot's
            # temporary name: this one is not written; the others go on (runfiles).
            file_formats.forget_files(job.record)
            with self._in_turn(turn):
                self.failures.fail(job.record, f"could not write the snapshot: "
                                   f"{err.filename} is in the way")
        except OSError as err:
            # The disk is full or the directory went away: stop writing (once, with one
            # warning); the program carries on and the manifest stays true.
            with self._disk_lock:
                first = self.disk_failed is None
                if first:
                    self.disk_failed = (f"writing snapshots stopped: "
                                        f"{runfiles.write_error(err)}")
                    self.state.stopped = True
            if first:
                warn(f"{self.disk_failed} ({self.run_dir}); no more snapshots, the program "
                     "carries on")
            with self._in_turn(turn):
                self._drop(job.record, str(self.disk_failed))
        except Exception as err:  # a bad write must not stop the others
            file_formats.forget_files(job.record)
            with self._in_turn(turn):
                self.failures.fail(job.record, f"could not write the snapshot: {err}")

    def _discard_part(self, job: WriteJob) -> None:
        """The temporary file of a streamed snapshot that will not be written, removed."""
        if job.streamed and job.record.file is not None:
            runfiles.temporary_name(self.run_dir / job.record.file).unlink(missing_ok=True)

    def _drop(self, record: SnapshotRecord, reason: str) -> None:
        """A snapshot that cannot be written: recorded if the manifest still can be."""
        record.status, record.reason = "error", reason
        file_formats.forget_files(record)
        state = self.state
        with state.lock:
            state.tally.failed += 1
            try:
                state.manifest.append(record)
            except OSError:
                pass  # the manifest keeps only whole lines (see ManifestWriter)

    def _write(self, job: WriteJob, turn: int | None) -> None:
        record = job.record
        assert record.file is not None
        # The copy's planned name (its .npy, where a streamed copy is filled): each format's
        # file is that name with the format's suffix.
        planned = record.file
        npy = self.run_dir / planned
        written: list[Path] = []
        try:
            if job.array is None:
                assert job.target is not None
                try:
                    job.array = job.target()
                except FileExistsError:
                    raise                 # something in the way: said so below
                except OSError as err:    # this snapshot's file, not the disk's end
                    raise _NoFile(f"cannot create its file: {runfiles.write_error(err)}"
                                  ) from None
            array = job.array
            if job.streamed:
                part = runfiles.temporary_name(npy)
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
            picture = Picture(job.value_range, {
                "kernel": record.kernel, "arg": str(record.arg), "phase": record.phase,
                "launch": str(record.launch)})
            for fmt in file_formats.in_order():
                if fmt.name not in job.formats or not fmt.holds(array.dtype, array.shape):
                    fmt.set_file(record, None)
                    continue
                name = str(Path(planned).with_suffix(fmt.suffix))
                path = self.run_dir / name
                if job.streamed and fmt is file_formats.NPY:
                    os.replace(part, path)     # the array is that file, filled in place
                else:
                    self._save(fmt, path, array, picture, record)
                fmt.set_file(record, name)
                if not (fmt is file_formats.NPY and self.state.blobs is not None
                        and self._to_blob(path, record)):
                    written.append(path)
            state = self.state
            with self._in_turn(turn), state.lock:
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
                runfiles.temporary_name(npy).unlink(missing_ok=True)

    def _to_blob(self, path: Path, record: SnapshotRecord) -> bool:
        """Under --job: the .npy stored once in the job's blobs (rundir.blobs), named by
        the record (True); where the store cannot be written, the file stays in the run
        directory (False). A failure later on removes nothing of a blob: other records may
        share it."""
        assert self.state.blobs is not None
        try:
            record.extra[BLOB_FIELD] = self.state.blobs.keep(path)
        except OSError as err:
            warn(f"{path.name} kept in the run directory: the job's blobs cannot be written "
                 f"({runfiles.write_error(err)})")
            return False
        return True

    @staticmethod
    def _save(fmt: SnapshotFormat, path: Path, array: np.ndarray, picture: Picture,
              record: SnapshotRecord) -> None:
        """One format's file of a snapshot, written whole (encoded first: a picture is drawn
        before its file is made)."""
        encoded = fmt.encode(array, picture)
        save_whole(path, encoded.write)
        if encoded.value_range is not None:
            record.range = encoded.value_range

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join()
        self._side.shutdown()
        # Whatever a failed write left under this run's temporary names (a full disk, a
        # file size limit) is not part of the run: each such snapshot has its error record.
        runfiles.remove_own_temporaries(self.run_dir)


def save_npy(f: IO[bytes], array: np.ndarray) -> None:
    """An array as a .npy file, into an open file (rundir.formats.NPY)."""
    file_formats.NPY.encode(array, Picture()).write(f)


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
            try:
                np.lib.format.write_array_header_1_0(f, header)
            except ValueError:   # a header too long for format 1.0
                f.seek(0)
                f.truncate()
                np.lib.format.write_array_header_2_0(f, header)
            offset = f.tell()
            # The file's blocks reserved now (a full disk fails this snapshot here, rather
            # than as SIGBUS when the mapping is filled).
            runfiles.reserve(f.fileno(),
                             offset + dtype.itemsize * int(np.prod(shape, dtype=np.int64)))
            # np.memmap sizes the file and maps it through the descriptor (mmap keeps its
            # own).
            return np.memmap(f, dtype=dtype, mode="r+", offset=offset, shape=shape)
        except BaseException:
            path.unlink(missing_ok=True)     # this call's own file: no header without data
            raise
