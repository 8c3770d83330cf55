"""The donor of a transplant: one launch of a run directory, with its "before" snapshots (the
inputs to write) and its "after" snapshots (what the outputs are compared with).

`RUN:LAUNCH` names launch LAUNCH (the per-process launch number) of RUN's only process that
made it; `RUN:PID_OR_RANK:LAUNCH` picks one process where several did: by its pid in RUN, or
by its rank. Everything is checked here, before any program runs: a bad name, a run that
holds digests only, a snapshot file that cannot be read, is a one-line UsageError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cudump.errors import CudumpError, UsageError
from cudump.rundir.runs import Run, Snapshot, is_run_dir, short_kernel_name

_FORMS = "RUN:LAUNCH or RUN:PID_OR_RANK:LAUNCH"


@dataclass(frozen=True)
class InjectSpec:
    """RUN[:PID_OR_RANK][:LAUNCH] as given (`text`), split."""

    text: str
    run: Path
    who: int | None = None       # a pid of RUN, or a rank
    launch: int | None = None

    @property
    def source(self) -> str:
        """RUN as the user wrote it, for the report lines."""
        return str(self.run)


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def parse_spec(text: str, option: str = "--inject", launch_required: bool = True
               ) -> InjectSpec:
    """`RUN:LAUNCH`, `RUN:PID_OR_RANK:LAUNCH` (and, unless `launch_required`, `RUN` alone).
    RUN may itself hold colons: the longest run directory that leaves numbers wins."""
    if not launch_required and is_run_dir(text):
        return InjectSpec(text, Path(text))
    head, colon, last = text.rpartition(":")
    launch = _number(last)
    if colon and launch is not None and head:
        if is_run_dir(head):
            return _checked(InjectSpec(text, Path(head), None, launch), option)
        run, colon2, middle = head.rpartition(":")
        who = _number(middle)
        if colon2 and who is not None and run and is_run_dir(run):
            return _checked(InjectSpec(text, Path(run), who, launch), option)
    if is_run_dir(text):
        raise UsageError(f"{option} {text}: which launch? give {_FORMS}")
    if colon and launch is not None and head:
        run, colon2, middle = head.rpartition(":")
        folder = run if colon2 and _number(middle) is not None and not Path(head).exists() \
            else head
        raise UsageError(f"{option} {text}: {folder} is not a cudump run directory (no "
                         "manifest.jsonl)")
    forms = _FORMS if launch_required else f"RUN, {_FORMS}"
    raise UsageError(f"{option} {text}: expected {forms} (RUN a run directory, LAUNCH a "
                     "launch number as `cudump ls` shows it)")


def _checked(spec: InjectSpec, option: str) -> InjectSpec:
    if spec.launch == 0:
        raise UsageError(f"{option} {spec.text}: launches are numbered from 1")
    return spec


@dataclass
class DonorBuffer:
    """One buffer of the donor launch: its snapshot in RUN, of argument `arg` (the pointer at
    byte `offset` of it)."""

    arg: int
    offset: int
    snapshot: Snapshot

    @property
    def label(self) -> str:
        return f"arg {self.arg}" if not self.offset else f"arg {self.arg} (+{self.offset})"

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.snapshot.record.dtype or "uint8")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.snapshot.record.shape or ())

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def load(self) -> np.ndarray:
        """The snapshot as written (memory-mapped); CudumpError when it cannot be read."""
        return self.snapshot.load()

    def fits(self, rows: int, row_bytes: int, source: str = "RUN") -> str | None:
        """Why the snapshot cannot fill `rows` rows of `row_bytes` bytes (None: it can). Its
        bytes must be as many, and a 2-D buffer's rows as many (an image's padding aside).
        `source` names the donor run in the reason."""
        shape, nbytes = self.shape, self.nbytes
        if nbytes != rows * row_bytes:
            return (f"{source}'s {self.label} is {nbytes:,} bytes ({self.dtype} "
                    f"{list(shape)}), this launch's {rows * row_bytes:,} bytes"
                    + (f" ({rows} rows of {row_bytes:,})" if rows > 1 else ""))
        if rows > 1 and (len(shape) < 2 or shape[0] != rows):
            return (f"{source}'s {self.label} is {self.dtype} {list(shape)}, this launch's "
                    f"{rows} rows of {row_bytes:,} bytes")
        return None


@dataclass
class Donor:
    """One launch of RUN, as a transplant takes it."""

    spec: InjectSpec
    run: Run
    pid: int
    rank: int | None
    position: int              # its process among RUN's that made the launch, from 1
    launch: int
    kernel: str
    mangled: str
    occurrence: int
    inputs: list[DonorBuffer]  # "before" snapshots with data
    outputs: list[DonorBuffer]  # "after" snapshots with data

    @property
    def source(self) -> str:
        return self.spec.source

    @property
    def short_kernel(self) -> str:
        return short_kernel_name(self.kernel)

    def same_kernel(self, demangled: str, mangled: str) -> bool:
        if self.mangled and mangled:
            return self.mangled == mangled
        return self.kernel == demangled


def load_donor(spec: InjectSpec, option: str = "--inject",
               launch: int | None = None) -> Donor:
    """The donor launch `spec` names (`launch` where the spec gives none); UsageError, one
    line, when RUN has no such launch or its snapshots cannot be used."""
    number = spec.launch if spec.launch is not None else launch
    if number is None:
        raise UsageError(f"{option} {spec.text}: which launch? give {_FORMS}")
    try:
        run = Run.open(spec.run)
    except CudumpError as err:
        raise UsageError(f"{option} {spec.text}: {err}") from None
    at = [s for s in run.snapshots if s.record.launch == number]
    if not at:
        raise UsageError(f"{option} {spec.text}: {spec.source} has no snapshot of launch "
                         f"{number} (cudump ls {spec.source} lists its launches)")
    pids = list(dict.fromkeys(s.record.pid for s in sorted(at, key=Snapshot.sort_key)))
    pid = _pick(spec, option, at, pids, number)
    mine = [s for s in at if s.record.pid == pid]
    if any(s.node >= 0 for s in mine):
        raise UsageError(f"{option} {spec.text}: launch {number} of {spec.source} is a CUDA "
                         "graph launch; inputs can be injected into plain launches only")
    first = mine[0].record
    kernels = {s.record.kernel for s in mine}
    if len(kernels) > 1:
        raise UsageError(f"{option} {spec.text}: {spec.source}'s records of launch {number} "
                         "name more than one kernel; is it one run?")
    donor = Donor(spec, run, pid, first.rank, pids.index(pid) + 1, number, first.kernel,
                  first.mangled, first.occurrence, _buffers(spec, option, mine, "before"),
                  _buffers(spec, option, mine, "after"))
    if not donor.inputs:
        raise UsageError(
            f"{option} {spec.text}: {spec.source} holds no 'before' snapshot of launch "
            f"{number} (digests or scans only?): take them with a rule with 'when: both' on "
            "that launch, as `cudump bisect`'s a-snap/ and b-snap/ runs do")
    return donor


def _pick(spec: InjectSpec, option: str, at: list[Snapshot], pids: list[int],
          number: int) -> int:
    """RUN's process the spec means: its pid or rank where given, else the only one."""
    ranks = {s.record.pid: s.record.rank for s in at}
    if spec.who is not None:
        if spec.who in ranks:
            return spec.who
        by_rank = [pid for pid, rank in ranks.items() if rank == spec.who]
        if len(by_rank) == 1:
            return by_rank[0]
        raise UsageError(f"{option} {spec.text}: no process of {spec.source} with pid or rank "
                         f"{spec.who} made launch {number}; {_processes(pids, ranks)}")
    if len(pids) > 1:
        raise UsageError(f"{option} {spec.text}: {len(pids)} processes of {spec.source} made "
                         f"launch {number}; give RUN:PID_OR_RANK:LAUNCH "
                         f"({_processes(pids, ranks)})")
    return pids[0]


def _processes(pids: list[int], ranks: dict[int, int | None]) -> str:
    named = [f"pid {pid}" + (f" (rank {ranks[pid]})" if ranks.get(pid) is not None else "")
             for pid in pids]
    return "these did: " + ", ".join(named)


def _buffers(spec: InjectSpec, option: str, snaps: list[Snapshot],
             phase: str) -> list[DonorBuffer]:
    """The buffers with data of one phase, one per argument and offset (the first, where
    two rules took the same buffer). A "before" snapshot that was not taken is refused: the
    launch's inputs would be incomplete."""
    found: dict[tuple[int, int], DonorBuffer] = {}
    for snap in sorted(snaps, key=Snapshot.sort_key):
        r = snap.record
        if r.phase != phase:
            continue
        offset = r.extra.get("offset", 0)
        offset = offset if isinstance(offset, int) and not isinstance(offset, bool) else 0
        key = (r.arg, offset)
        if key in found:
            continue
        if r.status != "ok" and phase == "before":
            raise UsageError(f"{option} {spec.text}: {spec.source}'s arg {r.arg} before launch "
                             f"{r.launch} was not captured ({r.reason or 'no reason given'}); "
                             "the launch's inputs would be incomplete")
        if r.status != "ok" or r.file is None:
            continue
        buffer = DonorBuffer(r.arg, offset, snap)
        try:
            array = buffer.load()
        except CudumpError as err:
            raise UsageError(f"{option} {spec.text}: {err}") from None
        if array.nbytes != buffer.nbytes or array.dtype.kind not in "uifb":
            raise UsageError(f"{option} {spec.text}: {snap.path} does not hold the "
                             f"{buffer.dtype} {list(buffer.shape)} its record says")
        found[key] = buffer
    return list(found.values())
