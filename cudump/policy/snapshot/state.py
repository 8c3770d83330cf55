"""What the parts of one run's snapshot policy share: one lock, the manifest, each process's
plans and counts, whether snapshots stopped, the byte budget and the run's tallies."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cudump.console import warn
from cudump.kernels.extents import KnownStarts
from cudump.kernels.signature import Signature
from cudump.policy.rules import Rule
from cudump.policy.snapshot.origin import PRODUCED, HostWrite, Origin
from cudump.policy.snapshot.planned import Buffer, PlannedLaunch
from cudump.policy.snapshot.replan import GuessedExtents
from cudump.policy.snapshot.templates import RepeatTemplate
from cudump.rundir.blobs import BlobStore
from cudump.rundir.files import write_error
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord
from cudump.rundir.summary import NanHostWrite, NanLaunch, NanProducer
from cudump.rundir.wheres import record_where

# Buffers of one process whose plans are kept (FuncRules.buffers), before they are forgotten
MAX_KNOWN_BUFFERS = 65536

# (rule, argument, byte offset, pointer, allocation, next known start) -> what is read there
KnownBuffers = dict[tuple[object, ...], Buffer]


@dataclass
class FuncRules:
    signature: Signature
    rules: list[Rule]
    buffers: KnownBuffers = field(default_factory=dict)


@dataclass
class ProcessSnapshots:
    matches: dict[int, int] = field(default_factory=dict)   # id(rule) -> matching launches
    pending: dict[int, PlannedLaunch] = field(default_factory=dict)  # seq -> plan
    rules: dict[int, FuncRules] = field(default_factory=dict)  # function id -> rules
    templates: dict[int, RepeatTemplate] = field(default_factory=dict)  # plan id -> plan
    template_ids: dict[int, collections.deque[int]] = field(default_factory=dict)  # per function
    last_template: int = 0
    starts: KnownStarts = field(default_factory=KnownStarts)  # where buffers begin (extents)
    guessed: GuessedExtents = field(default_factory=GuessedExtents)  # of its kept plans
    known_buffers: int = 0   # entries of every function's FuncRules.buffers

    def keep_buffer(self, known: KnownBuffers, key: tuple[object, ...],
                    buffer: Buffer) -> None:
        """Keeps what is read of a buffer, forgetting every kernel's once the process has
        kept MAX_KNOWN_BUFFERS."""
        if self.known_buffers >= MAX_KNOWN_BUFFERS:
            for fr in self.rules.values():
                fr.buffers.clear()
            self.known_buffers = 0
        known[key] = buffer
        self.known_buffers += 1


@dataclass
class Tally:
    """What the run's summary tells of snapshots (RunSummary)."""

    written: int = 0
    failed: int = 0
    bytes_written: int = 0
    digests: int = 0
    nan_reports: int = 0        # NaN/Inf reports (--check-nan): manifest records, one a buffer
    nan_producers: int = 0      # buffers turned NaN/Inf (--check-nan), however
    nan_produced: int = 0       # of which by a launch whose inputs were finite, or the host
    # The first launch or host write that produced NaN/Inf, and the first report of a
    # launch (which may have read non-finite values the host put there), each with its
    # process's rank
    first_producer: NanProducer | None = None
    first_report: NanLaunch | None = None
    repeated: int = 0
    asked: int = 0      # launches planned here, each a round trip (MSG_BEGIN); by kernel:
    asked_kernels: collections.Counter[str] = field(default_factory=collections.Counter)
    # --watch-nan: processes whose batched scan could not run, switched to exact scans
    watch_fallbacks: int = 0
    # graphs' kernel nodes a replay's plan had no room for (each graph once)
    graph_nodes_left_out: int = 0

    def count_nan(self, record: SnapshotRecord, origin: Origin) -> None:
        """A buffer a launch turned NaN/Inf (under the state's lock)."""
        self.nan_reports += 1
        self.nan_producers += 1
        made = NanLaunch(record.pid, record.launch, record.kernel, record.rank,
                         where=record_where(record.extra))
        if self.first_report is None:
            self.first_report = made
        if origin.kind == PRODUCED:
            self.nan_produced += 1
            self._first(made)

    def count_window(self, made: NanLaunch) -> None:
        """A buffer a window of launches turned NaN/Inf (--watch-nan; under the state's
        lock). Never counted as produced, nor the run's first producer: a window's finding
        is unconfirmed until an exact scan sees it (windows.py)."""
        self.nan_reports += 1
        self.nan_producers += 1
        if self.first_report is None:
            self.first_report = made

    def count_host(self, pid: int, rank: int | None, write: HostWrite) -> None:
        """A write of the host's that left NaN/Inf: a producer (under the state's lock)."""
        self.nan_producers += 1
        self.nan_produced += 1
        self._first(NanHostWrite(write.kind, pid, write.before, write.api, write.address,
                                 write.nbytes, rank, write.position))

    def _first(self, made: NanProducer) -> None:
        """The first producer: the first one found, or an earlier one of the same process
        found later (a host write comes to light only when a launch reads it)."""
        first = self.first_producer
        if first is None or (first.pid == made.pid and made.order < first.order):
            self.first_producer = made


class SnapshotState:
    """The lock every part takes, and what it guards."""

    def __init__(self, run_dir: Path, manifest: ManifestWriter) -> None:
        self.run_dir = run_dir
        self.manifest = manifest
        self.lock = threading.Lock()
        self.processes: dict[int, ProcessSnapshots] = {}
        self.tally = Tally()
        self.stopped = False    # the budget is spent or the disk failed: no more snapshots
        self.manifest_failed: str | None = None   # why the manifest takes no more records
        self.blobs: BlobStore | None = None   # --job: .npy bytes stored once in the job's
        # --job: a NaN/Inf producer found (pid, rank, launch, kernel, what): the job's trigger
        self.on_nan: Callable[[int, int | None, int | None, str | None, str], None] | None \
            = None

    def append_locked(self, record: SnapshotRecord) -> None:
        """A record into the manifest, under the lock. A manifest that can take no more (a
        full disk, the file size limit) is said once; the records after it are lost and
        the run goes on: the error never reaches the thread that was recording (a
        connection's would drop the process, the writer's would stop writing)."""
        try:
            self.manifest.append(record)
        except OSError as err:
            if self.manifest_failed is None:
                self.manifest_failed = write_error(err)
                warn(f"records are no longer written to {self.manifest.path.name}: "
                     f"{self.manifest_failed}; the program carries on")

    def proc(self, pid: int) -> ProcessSnapshots:
        with self.lock:
            return self.processes.setdefault(pid, ProcessSnapshots())

    def guessed_extents(self) -> list[GuessedExtents]:
        """Every process's guessed extents of kept plans (replan.py)."""
        with self.lock:
            return [ps.guessed for ps in self.processes.values()]


class Budget:
    """--max-bytes: the bytes of snapshots planned so far, and stopping once it is reached."""

    def __init__(self, state: SnapshotState, max_bytes: int | None,
                 is_default: bool = False) -> None:
        self.state = state
        self.max_bytes = max_bytes
        self.planned_bytes = 0
        # Named in the warning and in the records of snapshots past the budget.
        self.name = (f"the byte budget {max_bytes} (by default half the disk space free "
                     "at the start; --max-bytes sets it)" if is_default
                     else f"--max-bytes {max_bytes}")

    def take(self, nbytes: int) -> bool:
        state = self.state
        with state.lock:
            if state.stopped:
                return False
            if self.max_bytes is not None and self.planned_bytes + nbytes > self.max_bytes:
                state.stopped = True
                warn(f"{self.name} reached; no more snapshots (the program "
                     "carries on)")
                return False
            self.planned_bytes += nbytes
            return True
