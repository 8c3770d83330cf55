"""What a plan holds: the copies of one launch, their pieces, and the MSG_PLAN payload."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from cudump.kernels.args import ArgValue, Number
from cudump.kernels.geometry import CopyPlan
from cudump.kernels.pattern import name_forms
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.policy.rules import Rule
from cudump.rundir.manifest import SnapshotRecord
from cudump.wire import protocol as p

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_SUPPORTED = 801
# The shim's word for copies of a launch held on the GPU that could not be made while it
# was held (the GPU queued them behind it): it let the stream go, so they would show a
# later state of the buffers.
CUDA_ERROR_TIMEOUT = 909
STALLED_COPY = ("not taken: the GPU did not make the copy while the launch's stream was "
                "held, so cudump let the stream go (the buffers may have changed since)")
# A NaN/Inf producer's snapshot when the hold was not served in time (the shim was busy,
# or the program waited on the GPU meanwhile), or the stream was never held.
HOLD_NOT_SERVED = ("not taken: the launch's held stream could not be served in time, so cudump "
                   "let the stream go (the program comes first)")
NOT_HELD = "not taken: the launch's stream was not held, and went on before its scans were read"

_PHASE_BEFORE, _PHASE_AFTER = int(p.Phase.BEFORE), int(p.Phase.AFTER)
_TOOL_FLAG, _PIECE_FLAG = int(p.CopyFlag.TOOL), int(p.CopyFlag.PIECE)


def safe_name(text: str, limit: int = 60) -> str:
    """A readable file-name fragment: no <>:*/ or spaces from template names."""
    name = _UNSAFE.sub("_", text).strip("_.")
    return name[:limit] or "kernel"


def base_name(func: FuncInfo) -> str:
    base = name_forms(func.demangled)[3]   # cached: a PyTorch name takes ~1 ms to parse
    return func.mangled if base == func.demangled.strip() and "(" in base else base


@dataclass
class LaunchContext:
    """The launch being planned: its process, function and event."""

    proc: ProcessState
    func: FuncInfo
    event: LaunchEvent

    @functools.cached_property
    def file_name(self) -> str:
        """The kernel's part of its snapshots' file names."""
        return safe_name(base_name(self.func))

    @functools.cached_property
    def in_graph(self) -> bool:
        return bool(self.event.flags & p.LaunchFlag.GRAPH)


class Buffer(NamedTuple):
    """What a rule reads of one buffer: the plan (None: nothing), how its extent was found,
    and what cudump's kernel computes over it (buffers.read_of)."""

    plan: CopyPlan | None
    extent: str | None
    tool: p.ToolMode | None


NOTHING = Buffer(None, None, None)


@dataclass(frozen=True)
class Piece:
    """Rows [row, row + rows) of a 2-D copy (or bytes of a 1-D one) streamed on their own."""

    src: int
    width: int
    height: int
    pitch: int
    dst: int            # byte offset in the snapshot's array
    offset: int         # in the staging area


@dataclass
class PlannedCopy:
    """One copy (or digest, or scan) of one buffer around a launch.

    Its manifest record is made when first asked for (`record`): a launch the shim asks
    about waits while it is planned, and a scan that finds nothing, or a plan the shim
    makes with results that come back through the ring, never needs the records of its
    hundreds of buffers."""

    plan: CopyPlan
    phase: str          # "before" | "after"
    offset: int         # in the staging area (whole copies)
    rule: Rule
    make_record: Callable[[], SnapshotRecord]
    pieces: list[Piece] | None = None   # streamed through staging instead of whole
    target: np.ndarray | None = None    # the .npy being filled piece by piece
    failed: str | None = None
    tool: p.ToolMode | None = None      # cudump's kernel runs over the buffer instead
    extent: str | None = None           # how its end was found, where it was guessed
    sum_of: p.ToolMode | None = None    # a digest's sum of |x|: the element format
    at: int = 0         # byte offset of the pointer inside its argument (a by-value struct)
    made: SnapshotRecord | None = field(default=None, repr=False)
    # the launch it was planned for (a graph launch's copies are of several kernel nodes)
    ctx: LaunchContext | None = field(default=None, repr=False)

    @property
    def record(self) -> SnapshotRecord:
        made = self.made
        if made is None:
            made = self.made = self.make_record()
        return made

    @property
    def staging_bytes(self) -> int:
        return p.TOOL_RESULT if self.tool is not None else self.plan.nbytes

    def with_record(self, record: SnapshotRecord) -> PlannedCopy:
        """The same copy with another record (a shallow copy: plans are not changed)."""
        new = object.__new__(PlannedCopy)
        new.__dict__.update(self.__dict__)
        new.made = record
        return new

    def wire(self) -> list[bytes]:
        phase = _PHASE_BEFORE if self.phase == "before" else _PHASE_AFTER
        pl = self.plan
        pack = p.COPY.pack_in_order   # phase, flags, src, width, height, pitch, offset
        if self.tool is not None:
            flags = _TOOL_FLAG | int(self.tool) << p.TOOL_MODE_SHIFT
            if self.sum_of is not None:
                flags |= int(self.sum_of) << p.TOOL_SUM_SHIFT
            return [pack(phase, flags, pl.address, pl.width_bytes, pl.height, pl.pitch,
                         self.offset)]
        if self.pieces is None:
            return [pack(phase, 0, pl.address, pl.width_bytes, pl.height, pl.pitch,
                         self.offset)]
        return [pack(phase, _PIECE_FLAG, c.src, c.width, c.height, c.pitch, c.offset)
                for c in self.pieces]


@dataclass
class PlannedLaunch:
    """What one launch's plan holds: copies, and which copy each wire entry belongs to."""

    copies: list[PlannedCopy]
    entries: list[tuple[PlannedCopy, Piece | None]]
    used: int = 0       # staging bytes taken by whole copies (where the next node starts)
    # what the plan was made from, for copies that follow once the launch has run
    ctx: LaunchContext | None = None
    staging_size: int = 0
    args: list[ArgValue] = field(default_factory=list)
    values: dict[str, Number] = field(default_factory=dict)
    capture: list[PlannedCopy] | None = None   # the copies of a launch captured for replay
    stems: set[str] = field(default_factory=set)   # its snapshots' file names (less .npy)

    def wire(self) -> bytes:
        return b"".join(w for c in self.copies for w in c.wire())


@dataclass(frozen=True)
class Repeat:
    """A plan the shim may repeat: its number, and the byte ranges of the parameters it
    depends on (offset, size; none: all of them)."""

    plan_id: int
    keys: tuple[tuple[int, int], ...] = ()


def plan_payload(planned: PlannedLaunch | None, flags: int = 0,
                 repeat: Repeat | None = None) -> bytes:
    """The MSG_PLAN payload: its copies (none without a plan), flags (p.PlanFlag) and, for
    a plan the shim may repeat, its number and keys."""
    count = len(planned.entries) if planned is not None else 0
    keys = repeat.keys if repeat is not None else ()
    return (p.PLAN.pack(flags=int(flags), ncopies=count,
                        id=repeat.plan_id if repeat is not None else 0, nkeys=len(keys))
            + (planned.wire() if planned else b"")
            + b"".join(p.KEY.pack_in_order(o, n) for o, n in keys))   # offset, size


class ReadStaging(Protocol):
    def __call__(self, offset: int, nbytes: int) -> memoryview: ...


# The copies one rule takes of one launch's buffers (plan.Planner.rule_copies).
RuleCopies = Callable[[LaunchContext, Rule, list[ArgValue], dict[str, Number], set[str]],
                      list[PlannedCopy]]
# Copies placed in staging from `base` (place.Placer.place): staging size, base, stream.
Place = Callable[[list[PlannedCopy], int, int, bool], "PlannedLaunch | None"]
