"""Reading what a run wrote: its manifest, its snapshot files, and choosing snapshots.

Shared by the offline commands (`cudump diff`, `ls`, `show`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from cudump.errors import SnapshotError, UsageError
from cudump.kernels.pattern import KernelPattern, PatternError
from cudump.rundir import formats, reading
from cudump.rundir.blobs import BLOB_FIELD, blob_path
from cudump.rundir.layout import MANIFEST_FILE
from cudump.rundir.manifest import SnapshotRecord, read_manifest
from cudump.rundir.wheres import record_where
from cudump.wire.digest import ALGORITHM, SUM_SIZES

PHASE_ORDER = {"before": 0, "after": 1}


DIGEST_TEXT = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class Digest:
    """A buffer's content digest as a digest run records it (see cudump.wire.digest): `value` over
    `bytes` bytes read as rows of `row_bytes`, by `algorithm`."""

    value: str                 # 16 lowercase hex digits
    bytes: int
    row_bytes: int
    rows: int | None
    algorithm: str
    sum_of: str | None = None  # the float format of the elements summed, if any
    abs_sum: float | None = None  # their sum of |x| (cudump.wire.digest)

    @property
    def elements(self) -> int:
        """How many elements the sum of |x| is over (whole elements of each row)."""
        if self.sum_of is None or not self.row_bytes:
            return 0
        size = SUM_SIZES[self.sum_of]
        return self.row_bytes // size * (self.bytes // self.row_bytes)

    @classmethod
    def from_extra(cls, extra: dict[str, Any]) -> Digest | None:
        """The digest of a manifest record's extra keys; None when it has none; SnapshotError
        when the keys are there but malformed."""
        if "digest" not in extra:
            return None
        value = extra.get("digest")
        if not isinstance(value, str) or not DIGEST_TEXT.fullmatch(value):
            raise SnapshotError(f"digest should be 16 lowercase hex digits, got {value!r:.40}")
        size, width, rows = (extra.get(k) for k in ("bytes", "row_bytes", "rows"))
        if not _whole(size, 0):
            raise SnapshotError(f"digest record: 'bytes' should be a whole number >= 0, got "
                                f"{size!r:.40}")
        if width is None:
            width = size
        if not _whole(width, 0) or (size and not width) or (width and size % width):
            raise SnapshotError(f"digest record: 'row_bytes' {width!r:.40} does not divide "
                                f"'bytes' {size}")
        if rows is not None and not _whole(rows, 0):
            raise SnapshotError(f"digest record: 'rows' should be a whole number, got "
                                f"{rows!r:.40}")
        algorithm = extra.get("algorithm", ALGORITHM)
        if not isinstance(algorithm, str):
            raise SnapshotError(f"digest record: 'algorithm' should be a string, got "
                                f"{algorithm!r:.40}")
        sum_of, total = extra.get("sum_of"), extra.get("abs_sum")
        if sum_of is None:
            return cls(value, size, width, rows, algorithm)
        if not isinstance(sum_of, str) or sum_of not in SUM_SIZES:
            raise SnapshotError(f"digest record: 'sum_of' should be one of "
                                f"{', '.join(SUM_SIZES)}, got {sum_of!r:.40}")
        return cls(value, size, width, rows, algorithm, sum_of, _sum(total))


def _sum(value: Any) -> float:
    """A digest record's 'abs_sum': a number >= 0, or "nan" / "inf"."""
    if value in ("nan", "inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise SnapshotError(f"digest record: 'abs_sum' should be a number >= 0, \"nan\" or "
                            f"\"inf\", got {value!r:.40}")
    return float(value)


@dataclass(frozen=True)
class HostSource:
    """A write of the program's from the host that a NaN/Inf report's input came from: a
    host-to-device copy or a memset (`kind`), `nbytes` bytes with the driver call `api`,
    before launch `before`."""

    kind: str
    api: str
    nbytes: int
    before: int

    @classmethod
    def from_field(cls, value: Any) -> HostSource | None:
        """The record's `from_host`, or None where it is missing or malformed."""
        if not isinstance(value, dict):
            return None
        kind, api, nbytes, before = (value.get(k) for k in ("kind", "api", "bytes",
                                                             "before_launch"))
        if (kind not in ("copy", "memset") or not isinstance(api, str)
                or not _whole(nbytes, 0) or not _whole(before, 0)):
            return None
        return cls(kind, api, nbytes, before)

    def short(self) -> str:
        """`host copy before launch 59`."""
        what = "memset" if self.kind == "memset" else "host copy"
        return f"{what} before launch {self.before}"

    def phrase(self) -> str:
        """`a host-to-device copy of 4 bytes (cuMemcpyHtoDAsync) before launch 59`."""
        what = "a memset" if self.kind == "memset" else "a host-to-device copy"
        many = "" if self.nbytes == 1 else "s"
        return f"{what} of {self.nbytes} byte{many} ({self.api}) before launch {self.before}"


@dataclass(frozen=True)
class NanReport:
    """What a NaN/Inf scan (--check-nan, format: check-nan) found in a buffer a launch left:
    `nonfinite` of its `elements` elements, the first at index `first` (None: not said);
    `origin`: "produced" (the launch's inputs were finite) or "propagated" (its argument
    `from_arg` was already non-finite, left so by launch `from_launch` of `from_kernel`
    where one did, or written by the host, `from_host`), None in runs made before cudump
    told them apart."""

    nonfinite: int
    elements: int | None
    first: int | None
    origin: str | None = None
    from_arg: int | None = None
    from_launch: int | None = None
    from_kernel: str | None = None
    from_host: HostSource | None = None     # the host wrote what `from_arg` read

    @classmethod
    def from_extra(cls, extra: dict[str, Any]) -> NanReport | None:
        """The report of a manifest record's extra keys; None when it has none, or when they
        are not whole numbers."""
        count, elements, first = (extra.get(k) for k in ("nonfinite", "elements",
                                                          "first_nonfinite"))
        if not _whole(count, 0):
            return None
        origin = extra.get("origin")
        origin = origin if origin in ("produced", "propagated") else None
        from_arg, from_launch = extra.get("from_arg"), extra.get("from_launch")
        kernel = extra.get("from_kernel")
        host = HostSource.from_field(extra.get("from_host")) if origin == "propagated" else None
        return cls(count, elements if _whole(elements, 0) else None,
                   first if _whole(first, 0) else None, origin,
                   from_arg if origin == "propagated" and _whole(from_arg, 0) else None,
                   from_launch if origin == "propagated" and _whole(from_launch, 0) else None,
                   kernel if origin == "propagated" and isinstance(kernel, str) else None,
                   host)

    def describe(self) -> str:
        """`NaN/Inf: 3000 of 2084864 elements, first at 0`."""
        of = f" of {self.elements}" if self.elements is not None else ""
        at = f", first at {self.first}" if self.first is not None else ""
        return f"NaN/Inf: {self.nonfinite}{of} elements{at}"

    def origin_short(self) -> str:
        """`produced`, `propagated from arg 1 (launch 11)`, or '' (not said)."""
        if self.origin != "propagated":
            return self.origin or ""
        arg = f" from arg {self.from_arg}" if self.from_arg is not None else ""
        launch = f" (launch {self.from_launch})" if self.from_launch is not None else ""
        if self.from_host is not None:
            launch = f" ({self.from_host.short()})"
        return f"propagated{arg}{launch}"

    def origin_text(self) -> str:
        """The origin as a sentence (`show`), or '' (not said)."""
        if self.origin == "produced":
            return "produced: the launch's inputs were finite"
        if self.origin != "propagated":
            return ""
        arg = f"arg {self.from_arg}" if self.from_arg is not None else "an input"
        if self.from_host is not None:
            made = f" (from {self.from_host.phrase()})"
        elif self.from_launch is None:
            made = " (no launch cudump scanned left it so)"
        else:
            of = f" of {self.from_kernel}" if self.from_kernel else ""
            made = f" (from launch {self.from_launch}{of})"
        return f"propagated: {arg} was already non-finite before the launch{made}"


def _whole(value: Any, minimum: int) -> bool:
    """A whole number from `minimum` to 2^63-1: a count or a size cudump can use."""
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value < 1 << 63


def load_array(path: str | Path) -> np.ndarray:
    """A snapshot file as an array, read by the format its suffix names (rundir.formats):
    .npy memory-mapped (read-only), .png decoded."""
    path = Path(path)
    # Only a regular file, opened without blocking (rundir.reading): a FIFO or a device
    # under a snapshot's name is refused, not read; and what is read is the file opened
    # here, never the name looked up again.
    with reading.open_regular(path) as f:
        fmt = formats.by_suffix(path)
        if fmt is None:
            raise SnapshotError(f"{reading.shown(path)}: not a "
                                f"{formats.spelled(formats.suffixes())} file")
        return fmt.read(path, f)


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


def kernel_pattern(text: str | KernelPattern | None) -> KernelPattern | None:
    """A user's `--kernel PATTERN` as the KernelPattern every part of cudump uses.

    See cudump.kernels.pattern: a glob matching the demangled name with or without its return type,
    without its parameters, or the bare function name; `re:` for a regular expression.
    """
    if text is None or isinstance(text, KernelPattern):
        return text
    try:
        return KernelPattern(text)
    except PatternError as err:
        raise UsageError(f"bad kernel pattern: {err}") from None


def is_run_dir(path: str | Path) -> bool:
    return reading.is_regular(Path(path) / MANIFEST_FILE)


def confined(run_dir: Path, relative: str) -> Path:
    """`relative` (a manifest's file or png) as a path inside run_dir; SnapshotError if it
    is absolute, climbs out with `..`, or resolves (through links) to a place outside."""
    if len(relative) > PATH_MAX or any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX
                                       for part in relative.split("/")):
        raise SnapshotError(f"file {_short(relative)} cannot be used: its name is too long")
    try:
        root = run_dir.resolve()
        target = (run_dir / relative).resolve()
    except (OSError, ValueError, RuntimeError) as err:   # NUL bytes, link loops
        raise SnapshotError(f"file {_short(relative)} cannot be used: {err}") from None
    if not target.is_relative_to(root) or target == root:
        raise SnapshotError(f"file {_short(relative)} is outside the run directory; not read")
    return target


def snapshot_file(run_dir: Path, record: SnapshotRecord) -> Path:
    """Where a record's .npy bytes are: its job's blob where the record names one (a run
    of `cudump --job`, rundir.blobs), else its `file` inside the run directory;
    SnapshotError for a name that leads elsewhere."""
    if BLOB_FIELD in record.extra:
        return blob_path(run_dir, record.extra[BLOB_FIELD])
    if record.file is None:
        raise SnapshotError("no file was written")
    return confined(run_dir, record.file)


# The longest name of one folder or file, and of a whole path, Linux takes.
NAME_MAX, PATH_MAX = 255, 4096


def _short(relative: str) -> str:
    """A file name as a message quotes it: shortened where it is very long."""
    text = repr(relative)
    return text if len(text) <= 120 else f"{text[:60]}...({len(relative)} characters)"


@dataclass
class Snapshot:
    """A manifest record with its position in the manifest and the run it belongs to."""

    index: int                 # position in manifest.jsonl, from 0 (as `cudump ls` shows)
    record: SnapshotRecord
    run_dir: Path
    process: int = 0           # the process's place in its run, from 1 (0: unknown)
    job_node: str | None = None   # the node of a job whose run it is in (analysis.job_runs)

    @cached_property
    def digest(self) -> Digest | None:
        """The content digest a digest run recorded instead of a file (malformed: None, and
        `problem` says why)."""
        try:
            return Digest.from_extra(self.record.extra)
        except SnapshotError:
            return None

    @cached_property
    def nan_report(self) -> NanReport | None:
        """What a NaN/Inf scan found in the buffer, where the record is such a report."""
        return NanReport.from_extra(self.record.extra)

    @property
    def report_only(self) -> bool:
        """A NaN/Inf scan's report and no file: a finding, with no data to load."""
        return self.nan_report is not None and self.record.file is None

    @property
    def digest_only(self) -> bool:
        """A digest and no file: compared by digest, never loaded."""
        return self.digest is not None and self.record.file is None

    @cached_property
    def problem(self) -> str | None:
        """Why the snapshot cannot be read (nor compared by digest), or None."""
        r = self.record
        if r.status != "ok":
            return r.reason or "not captured"
        if r.file is None:
            try:
                digest = Digest.from_extra(r.extra)
            except SnapshotError as err:
                return str(err)
            if digest is not None or self.nan_report is not None:
                return None
            return "no file was written"
        try:
            snapshot_file(self.run_dir, r)
        except SnapshotError as err:
            return str(err)
        return None

    @property
    def captured(self) -> bool:
        """The program's run captured it (whether or not its file can be read here)."""
        return self.record.status == "ok"

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def path(self) -> Path | None:
        """The .npy inside the run directory; None when there is none or it lies outside."""
        if self.problem is not None or self.record.file is None:
            return None
        return snapshot_file(self.run_dir, self.record)

    def load(self) -> np.ndarray:
        path = self.path
        if path is None and self.digest_only:
            raise SnapshotError(f"snapshot #{self.index} holds a digest only, no data (run "
                                "with a snapshot rule to get the data)")
        if path is None and self.report_only:
            assert self.nan_report is not None
            raise SnapshotError(f"snapshot #{self.index} is a report ({self.nan_report.describe()}"
                                "), no data")
        if path is None:
            why = self.problem or "no file was written"
            what = "was not captured" if not self.captured else "cannot be read"
            raise SnapshotError(f"snapshot #{self.index} {what}: {why}")
        return load_array(path)

    @property
    def node(self) -> int:
        """The kernel node of a graph launch this snapshot is of (-1: not in a graph)."""
        node = self.record.extra.get("node")
        return node if isinstance(node, int) and not isinstance(node, bool) else -1

    def launch_key(self) -> tuple[int, int, int, int]:
        """Which kernel launch of the run: process, pid, launch number and graph node (the
        kernel nodes of one graph launch share its number)."""
        r = self.record
        return (self.process, r.pid, r.launch, self.node)

    def sort_key(self) -> tuple[int, int, int, int, int, int]:
        """Launch order: processes in the order they first appear in the manifest (by pid
        where unknown), each one's launches in sequence (a graph launch's kernels by node),
        before then after, by argument."""
        r = self.record
        return (*self.launch_key(), PHASE_ORDER.get(r.phase, 2), r.arg)

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
        order: dict[int, int] = {}
        for r in records:
            order.setdefault(r.pid, len(order) + 1)
        return cls(path, [Snapshot(i, r, path, order[r.pid]) for i, r in enumerate(records)])

    @property
    def processes(self) -> list[int]:
        """The run's pids in the order they first appear in its manifest."""
        return list(dict.fromkeys(s.record.pid for s in self.snapshots))

    def select(
        self,
        kernel: str | KernelPattern | None = None,
        *,
        arg: int | None = None,
        phase: str | None = None,
        occurrence: int | None = None,
        launch: int | None = None,
        pid: int | None = None,
        index: int | None = None,
    ) -> list[Snapshot]:
        """Snapshots that satisfy every criterion given (None: any).

        A kernel given as text is a KernelPattern (UsageError when it is not a valid one).
        """
        pattern = kernel_pattern(kernel)
        return [s for s in self.snapshots if _wanted(s, pattern, arg, phase, occurrence,
                                                      launch, pid, index)]

    def by_file(self, file: str | Path) -> Snapshot | None:
        """The snapshot one of whose files (.npy, .png: rundir.formats) is this file, if
        any."""
        target = Path(file).resolve()
        for snap in self.snapshots:
            if BLOB_FIELD in snap.record.extra and snap.path == target:
                return snap
            for rel in formats.files_of(snap.record):
                if not rel:
                    continue
                try:
                    if confined(self.path, rel) == target:
                        return snap
                except SnapshotError:
                    continue
        return None


def _wanted(
    snap: Snapshot,
    kernel: KernelPattern | None,
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
        and (kernel is None or kernel.matches(r.kernel, r.mangled))
        and (kernel is None or kernel.scope is None or kernel.matches_where(record_where(r.extra)))
        and (arg is None or r.arg == arg)
        and (phase is None or r.phase == phase)
        and (occurrence is None or r.occurrence == occurrence)
        and (launch is None or r.launch == launch)
        and (pid is None or r.pid == pid)
    )


def in_launch_order(snapshots: Iterable[Snapshot]) -> list[Snapshot]:
    return sorted(snapshots, key=Snapshot.sort_key)
