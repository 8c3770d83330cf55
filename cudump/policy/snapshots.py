"""Snapshots of kernel argument buffers: plans copies for the shim and writes what comes back.

For each launch of a function some rule wants, the shim sends the raw
parameter bytes and the allocation behind each pointer-sized value. This
module decides, per rule, whether this launch is taken (skip/count/every),
plans the copies (geometry.py), places them in the process's staging file,
and once the shim reports the copies done, takes the bytes out of the staging
file and hands them to a writer thread that writes the .npy, the PNG and the
manifest record. PNG encoding never happens while the target waits.
"""

from __future__ import annotations

import collections
import functools
import os
import queue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from cudump.console import say, warn
from cudump.controller.process import FuncInfo, LaunchEvent, ProcessState
from cudump.kernels.args import ArgValue, Number, arg_values, decode_args
from cudump.kernels.elements import BF16_NOTE, float_type_in_name
from cudump.kernels.extents import KnownStarts, cap_guess, cut_at_next
from cudump.kernels.geometry import Allocation, CopyPlan, GeometryError, plan_copy
from cudump.kernels.signature import Signature, parse_signature
from cudump.policy.capture import (
    CapturedBuffer,
    CaptureWriter,
    ImageStore,
    launch_problems,
    pointer_json,
)
from cudump.policy.digest import ALGORITHM as DIGEST_ALGORITHM
from cudump.policy.digest import SCAN_ELEMENT_SIZE, SCAN_MODES, Scan, digest_hex
from cudump.policy.pattern import name_forms
from cudump.policy.repeat import RepeatCopy, RepeatTemplate, ResultDrain, event_of
from cudump.policy.rules import FORMATS, ArgOverride, Rule, option_rule
from cudump.rundir import files as runfiles
from cudump.rundir.imaging import is_image_like, render, save_png
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord
from cudump.rundir.summary import RunSummary
from cudump.wire import protocol as p
from cudump.wire.shm import SharedFile

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_SUPPORTED = 801


def safe_name(text: str, limit: int = 60) -> str:
    """A readable file-name fragment: no <>:*/ or spaces from template names."""
    name = _UNSAFE.sub("_", text).strip("_.")
    return name[:limit] or "kernel"


_PHASE_BEFORE, _PHASE_AFTER = int(p.Phase.BEFORE), int(p.Phase.AFTER)
_TOOL_FLAG, _PIECE_FLAG = int(p.CopyFlag.TOOL), int(p.CopyFlag.PIECE)
# Buffers of one process whose plans are kept (FuncRules.buffers), before they are forgotten
MAX_KNOWN_BUFFERS = 65536


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
    at: int = 0         # byte offset of the pointer inside its argument (a by-value struct)
    made: SnapshotRecord | None = field(default=None, repr=False)

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
    ctx: _Launch | None = None
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


# The shim's word for copies of a launch held on the GPU that could not be made while it
# was held (the GPU queued them behind it): it let the stream go, so they would show a
# later state of the buffers.
CUDA_ERROR_TIMEOUT = 909
STALLED_COPY = ("not taken: the GPU did not make the copy while the launch's stream was "
                "held, so cudump let the stream go (the buffers may have changed since)")


def _aligned(nbytes: int) -> int:
    return -(-nbytes // p.STAGING_ALIGN) * p.STAGING_ALIGN


def _stream_window(room: int) -> int:
    """What of `room` bytes of staging is kept for streamed pieces when not every copy fits
    whole: a quarter, in whole alignment units, and at least one unit."""
    return max(p.STAGING_ALIGN, room // 4 // p.STAGING_ALIGN * p.STAGING_ALIGN)


def split_pieces(plan: CopyPlan, offset: int, free: int) -> list[Piece] | None:
    """Pieces of at most `free` bytes (whole rows), or None if not one row fits."""
    if plan.height == 1:
        step = free
        return [Piece(plan.address + start, min(step, plan.width_bytes - start), 1,
                      min(step, plan.width_bytes - start), start, offset)
                for start in range(0, plan.width_bytes, step)] if step > 0 else None
    rows = free // plan.width_bytes
    if rows < 1:
        return None
    return [Piece(plan.address + row * plan.pitch, plan.width_bytes, min(rows, plan.height - row),
                  plan.pitch, row * plan.width_bytes, offset)
            for row in range(0, plan.height, rows)]


# What a rule reads of one buffer: the plan (None: nothing), how its extent was found, and
# what cudump's kernel computes over it (Snapshotter._buffer).
Buffer = tuple[CopyPlan | None, str | None, p.ToolMode | None]
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
    known_buffers: int = 0   # entries of every function's FuncRules.buffers


@dataclass
class WriteJob:
    record: SnapshotRecord
    array: np.ndarray
    formats: frozenset[str]
    value_range: tuple[float, float] | None
    streamed: bool = False   # the array is the .npy itself, filled piece by piece


class Snapshotter:
    """The snapshot policy of one run: which launches, which copies, and writing them."""

    def __init__(self, rules: list[Rule], run_dir: Path, max_bytes: int | None,
                 manifest: ManifestWriter, budget_is_default: bool = False) -> None:
        self.rules = [r for r in rules if r.action == "snapshot"]
        self.run_dir = run_dir
        self.max_bytes = max_bytes
        # Named in the warning and in the records of snapshots past the budget.
        self.budget_name = (f"the byte budget {max_bytes} (by default half the disk space free "
                            "at the start; --max-bytes sets it)" if budget_is_default
                            else f"--max-bytes {max_bytes}")
        self.lock = threading.Lock()
        self.processes: dict[int, ProcessSnapshots] = {}
        self.planned_bytes = 0
        self.stopped = False
        self.written = 0
        self.failed = 0
        self.disk_failed: str | None = None
        self.unsafe_warned: set[tuple[int, int]] = set()
        self.said_no_buffer: set[tuple[int, str]] = set()
        # id(rule) -> its slot in the control page's rule_counts, for rules that take only
        # some of the launches they match: the shim counts those launches itself
        self.counters: dict[int, int] = {}
        self.said_failures: set[tuple[str, str, str]] = set()
        # Failures recorded by each thread: whether planning one launch recorded any is
        # told apart from failures other threads record meanwhile (the result drain's).
        self._thread_failures = threading.local()
        self.bytes_written = 0
        self.digests = 0
        self.nan_producers = 0
        self.repeated = 0
        self.asked = 0      # launches planned here, each a round trip (MSG_BEGIN)
        self.nan_snapshotted: set[str] = set()   # kernels whose NaN producer was snapshotted
        # (pid, launch) -> the launch and what it did, for --break-on-nan (taken by the session)
        self.nan_found: dict[tuple[int, int], tuple[FuncInfo, LaunchEvent, str]] = {}
        self.manifest = manifest
        self.images = ImageStore(run_dir)
        self.captures = CaptureWriter(run_dir)
        self.results = ResultDrain(manifest.append_lines, self._unusual, self._count,
                                   self._made_as_planned)
        self.jobs: queue.Queue[WriteJob | None] = queue.Queue(maxsize=64)
        self.writer = threading.Thread(target=self._write_loop, name="cudump-writer", daemon=True)
        self.writer.start()

    def _proc(self, pid: int) -> ProcessSnapshots:
        with self.lock:
            return self.processes.setdefault(pid, ProcessSnapshots())

    def freed(self, proc: ProcessState, alloc: Allocation) -> None:
        """An allocation of the process is gone: buffers are no longer cut where its own
        began (extents.py)."""
        self._proc(proc.pid).starts.forget(alloc)

    def attach(self, proc: ProcessState, shared: SharedFile) -> None:
        """A new process: its result ring is drained from now on."""
        self.results.add(proc, shared, self._proc(proc.pid).templates)

    # -- decisions ----------------------------------------------------------------

    def wants(self, proc: ProcessState, func: FuncInfo) -> bool:
        matched = [r for r in self.rules if r.matches(func.demangled, func.mangled)]
        if not matched:
            return False
        self._proc(proc.pid).rules[func.id] = FuncRules(parse_signature(func.demangled), matched)
        return True

    def selectors(self, proc: ProcessState, func: FuncInfo) -> tuple[list[p.Selector], bool]:
        """The rules of this function (after `wants`) that take only some of the launches
        they match (skip, every, count), as the shim counts them, and whether those are all
        its rules: then the shim asks only about the launches one of them takes. A rule past
        the control page's MAX_COUNTERS, or a kernel with more than MAX_SELECTORS of them,
        is counted here, launch by launch, as before."""
        fr = self._proc(proc.pid).rules.get(func.id)
        if fr is None:
            return [], False
        selectors = []
        for rule in fr.rules:
            counter = self._counter(rule)
            if counter is not None:
                selectors.append(p.Selector(counter, rule.every, rule.skip,
                                            p.NO_LIMIT if rule.count is None else rule.count))
        every = len(selectors) == len(fr.rules) and len(selectors) <= p.MAX_SELECTORS
        return selectors[:p.MAX_SELECTORS], every

    def _counter(self, rule: Rule) -> int | None:
        if rule.takes_every_launch:
            return None   # nothing to count
        with self.lock:
            counter = self.counters.get(id(rule))
            if counter is None and len(self.counters) < p.MAX_COUNTERS:
                counter = self.counters[id(rule)] = len(self.counters)
            return counter

    def captures_launches(self, proc: ProcessState, func: FuncInfo) -> bool:
        """Whether a rule captures this function's launches for replay (after `wants`)."""
        fr = self._proc(proc.pid).rules.get(func.id)
        return fr is not None and any(r.replay for r in fr.rules)

    def plan(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent,
             staging_size: int) -> PlannedLaunch | None:
        """The copies to make around this launch (remembered until `collect`).

        The kernel nodes of one graph launch share its number and are planned one after
        the other: their copies follow each other in the staging area, none streamed
        (a graph's copy nodes run without the controller), and one MSG_END reports all."""
        in_graph = bool(event.flags & p.LaunchFlag.GRAPH)
        ps = self._proc(proc.pid)
        with self.lock:
            self.asked += 1
        if event.flags & p.LaunchFlag.UNSAFE_GRAPH:
            if (proc.pid, event.graph) not in self.unsafe_warned:
                self.unsafe_warned.add((proc.pid, event.graph))
                warn(f"graph {event.graph} of process {proc.pid} has memory-allocation or "
                     f"conditional nodes: cudump runs it unchanged, and takes no snapshots of "
                     f"its kernels (here {func.demangled})")
            return None
        earlier = ps.pending.get(event.seq) if in_graph else None
        base = earlier.used if earlier is not None else 0
        planned = self._plan(proc, func, event, staging_size, base, not in_graph)
        if planned is None:
            return None
        if earlier is not None:
            earlier.copies.extend(planned.copies)
            earlier.entries.extend(planned.entries)
            earlier.used = planned.used
        else:
            ps.pending[event.seq] = planned
        return planned

    def repeat_id(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent,
                  planned: PlannedLaunch | None, failures_before: int) -> Repeat | None:
        """Whether the shim may repeat this launch's plan on its own (p.PlanFlag.REPEAT) for
        launches with the same parameter bytes: digests and scans only, every rule of the
        function taking every launch, nothing that failed while planning it (on this
        thread: `failures_before` is thread_failures() before the plan) or streams.
        Without overrides the plan depends only on the pointer words: those are its keys,
        and a seed or step count elsewhere may change."""
        ps = self._proc(proc.pid)
        fr = ps.rules.get(func.id)
        unusual = (p.LaunchFlag.GRAPH | p.LaunchFlag.STOP_ONLY | p.LaunchFlag.INTERRUPTED
                   | p.LaunchFlag.UNSAFE_GRAPH)
        if (fr is None or event.flags & unusual or event.raw_args is None or self.stopped
                or self.thread_failures() != failures_before
                or not all(r.takes_every_launch for r in fr.rules)):
            return None
        copies = planned.copies if planned is not None else []
        if (len(copies) > p.MAX_REPEAT or any(c.tool is None for c in copies)
                or (planned is not None and len(planned.entries) != len(copies))):
            return None
        digest = p.ToolMode.DIGEST
        made = [RepeatCopy(c.tool, c.phase,  # type: ignore[arg-type]
                           functools.partial(_digest_record, c.make_record, c.plan)
                           if c.tool == digest else None)
                for c in copies]
        first = None
        if planned is not None:
            # The same copies: a later launch's records are made afresh from them
            # (repeat_report), not from this launch's, which its results fill in.
            first = PlannedLaunch(list(copies), list(planned.entries), ctx=planned.ctx,
                                  staging_size=planned.staging_size, args=planned.args,
                                  values=planned.values)
        ps.last_template += 1
        plan_id = ps.last_template
        ps.templates[plan_id] = RepeatTemplate(made, func, first)
        # The shim keeps a few plans per function; the controller keeps twice as many.
        kept_ids = ps.template_ids.setdefault(func.id, collections.deque())
        kept_ids.append(plan_id)
        if len(kept_ids) > 2 * p.REPEAT_WAYS:
            ps.templates.pop(kept_ids.popleft(), None)
        if any(r.overrides for r in fr.rules):
            return Repeat(plan_id)
        return Repeat(plan_id, _repeat_keys(event))

    def repeat_report(self, proc: ProcessState, slot: np.void) -> PlannedLaunch | None:
        """A launch made with a repeated plan, taken the ordinary way (a scan found something,
        or a kernel failed): its records and findings, and copies to follow it, if any."""
        asked = bool(int(slot["flags"]) & p.ResultFlag.ASKED)
        if asked:   # made with its plan: its ordinary copies are not reported
            self._made_as_planned(proc, int(slot["event"]["seq"]))
        template = self._proc(proc.pid).templates.get(int(slot["plan"]))
        if template is None:
            return None
        if not asked:   # an asked launch is counted as asked
            with self.lock:
                self.repeated += 1
        first, func = template.first, template.func
        if first is None:
            return None
        assert isinstance(first, PlannedLaunch) and first.ctx is not None
        event = event_of(slot)
        ctx = _Launch(proc, func, replace(event, raw_args=first.ctx.event.raw_args,
                                          pointers=first.ctx.event.pointers))
        copies = []
        for k, copy in enumerate(first.copies):
            # Made afresh: the first launch's own record holds its results.
            record = copy.make_record()
            record.launch, record.occurrence = event.seq, event.occurrence
            record.grid, record.block = list(event.grid), list(event.block)
            record.stream = event.stream_hex
            record.device = event.device if event.device >= 0 else None
            placed = copy.with_record(record)
            placed.offset = k * p.TOOL_RESULT
            copies.append(placed)
        launch = PlannedLaunch(copies, [(c, None) for c in copies], ctx=ctx,
                               staging_size=first.staging_size, args=first.args,
                               values=first.values)
        self._proc(proc.pid).pending[event.seq] = launch
        results = slot["results"]
        codes = [int(results[k]["rc"]) for k in range(len(copies))]
        data = results.tobytes()
        return self.collect(proc, event.seq, int(slot["launch_rc"]), 0, codes,
                            lambda offset, nbytes: memoryview(data)[offset:offset + nbytes])

    def _unusual(self, proc: ProcessState, template: RepeatTemplate, slot: np.void) -> None:
        seq = int(slot["event"]["seq"])
        try:
            self.repeat_report(proc, slot)
        except Exception as err:
            warn(f"results of launch {seq} are lost: {err}")
        self._proc(proc.pid).pending.pop(seq, None)   # too late for copies to follow it

    def _made_as_planned(self, proc: ProcessState, seq: int) -> None:
        """The launch asked about was made with its plan's repeatable form: its results came
        through the ring, and its ordinary copies will not be reported (no Kind.END)."""
        self._proc(proc.pid).pending.pop(seq, None)

    def _count(self, launches: int, digests: int) -> None:
        with self.lock:
            self.repeated += launches
            self.digests += digests

    def _plan(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent, staging_size: int,
              base: int, stream: bool) -> PlannedLaunch | None:
        """Buffers are placed whole in the staging area (from `base`) while they fit; the rest
        are streamed through what is left of it in pieces, each handed over before the
        next, where `stream` allows."""
        ps = self._proc(proc.pid)
        fr = ps.rules.get(func.id)
        if fr is None:
            return None
        taken: list[Rule] = []
        for rule in fr.rules:
            counter = self.counters.get(id(rule))
            if counter is not None and counter in event.counted:
                n = event.counted[counter]   # counted by the shim, across all its kernels
            else:
                n = ps.matches.get(id(rule), 0) + 1
                ps.matches[id(rule)] = n
            if rule.selects(n):
                taken.append(rule)
        if not taken or self.stopped:
            return None
        ctx = _Launch(proc, func, event)
        if event.raw_args is None:
            for rule in taken:
                self._error(ctx, None, "before", rule,
                            "the driver gave no parameter layout for this kernel "
                            "(cuFuncGetParamInfo needs driver 12.4 or newer)")
            return None
        args = decode_args(fr.signature, event.raw_args)
        values = arg_values(args)
        ps.starts.learn(_pointer_values(args, event))
        copies: list[PlannedCopy] = []
        capture: list[PlannedCopy] | None = None
        stems: set[str] = set()
        for rule in taken:
            made = self._rule_copies(ctx, rule, args, values, stems)
            if rule.replay and not event.flags & p.LaunchFlag.GRAPH:
                capture = (capture or []) + made
                for copy in made:
                    copy.record.extra["capture"] = True
            copies.extend(made)
        planned = self._place(ctx, copies, staging_size, base, stream)
        if planned is not None:
            planned.ctx, planned.staging_size = ctx, staging_size
            planned.args, planned.values = args, values
            planned.capture, planned.stems = capture, stems
        elif capture is not None:
            self._write_capture(ctx, args, capture, {})
        return planned

    def _rule_copies(self, ctx: _Launch, rule: Rule, args: list[ArgValue],
                     values: dict[str, Number], stems: set[str]) -> list[PlannedCopy]:
        """The copies (or digests, or scans) one rule takes of one launch's buffers."""
        func, event = ctx.func, ctx.event
        copies: list[PlannedCopy] = []
        targets, untracked = self._targets(rule, args, event)
        for index in untracked:
            self._untracked(ctx, rule, args[index])
        absent = [] if rule.args == "pointers" else [i for i in rule.args if i >= len(args)]
        if absent:
            self._no_such_args(ctx, rule, absent, len(args))
        elif not targets and not untracked:
            self._no_buffer(ctx, rule)
        ps = self._proc(ctx.proc.pid)
        fr = ps.rules.get(func.id)
        # Kept for the function's own rules (a rule made for one launch may share the id
        # of one made earlier).
        known = fr.buffers if fr is not None and any(r is rule for r in fr.rules) else None
        phases = [phase for phase in ("before", "after") if phase in rule.when]
        for index, arg, where, override in targets:
            # What is read does not depend on the phase: found once for both.
            try:
                if arg is None:
                    raise GeometryError(
                        f"argument {index} has {len(args[index].raw)} bytes, so there "
                        f"is no pointer at byte {where}")
                alloc = event.pointers.get((index, where))
                if alloc is None and override_field(override) is None:
                    _check_is_pointer(ctx.func, args[index])
                address = arg.value
                traced, next_start = False, None
                if alloc is not None and isinstance(address, int):
                    traced, next_start = True, ps.starts.next_after(address, alloc)
                if known is not None and override is None and traced:
                    # Without an override, what is read follows from the pointer, its
                    # allocation and where the next known buffer in it begins: a launch
                    # asked about again because some of its tensors moved plans only those.
                    key = (id(rule), index, where, address, alloc, next_start)
                    buffer = known.get(key)
                    if buffer is None:
                        buffer = self._buffer(ctx, rule, arg, alloc, None, values, next_start)
                        self._keep_buffer(ps, known, key, buffer)
                else:
                    buffer = self._buffer(ctx, rule, arg, alloc, override, values, next_start)
            except (GeometryError, ArithmeticError, RecursionError) as err:
                for phase in phases:
                    self._error(ctx, args[index], phase, rule, str(err))
                continue
            plan, extent, tool = buffer
            if plan is None:
                continue
            for phase in phases:
                if tool is None and not self._budget(plan.nbytes):
                    self._error(ctx, args[index], phase, rule,
                                f"{self.budget_name} reached")
                    continue
                # A digest or a scan writes no file, so its name takes none from `stems`.
                stem = None if tool is not None else self._stem(ctx, plan.arg, phase, where,
                                                                stems)
                make = functools.partial(self._record, ctx, plan.arg, phase, plan, None, stem,
                                         rule, where, extent)
                copies.append(PlannedCopy(plan, phase, 0, rule, make, tool=tool, at=where))
        return copies

    @staticmethod
    def _keep_buffer(ps: ProcessSnapshots, known: KnownBuffers, key: tuple[object, ...],
                     buffer: Buffer) -> None:
        """Keeps what is read of a buffer, forgetting every kernel's once the process has
        kept MAX_KNOWN_BUFFERS."""
        if ps.known_buffers >= MAX_KNOWN_BUFFERS:
            for fr in ps.rules.values():
                fr.buffers.clear()
            ps.known_buffers = 0
        known[key] = buffer
        ps.known_buffers += 1

    @staticmethod
    def _buffer(ctx: _Launch, rule: Rule, arg: ArgValue, alloc: Allocation | None,
                override: ArgOverride | None, values: dict[str, Number],
                next_start: int | None) -> Buffer:
        """What the rule reads of one buffer: the plan (None: nothing, as a scan of integers),
        how its extent was found where it runs to the end of its allocation or to the next
        buffer, and what cudump's kernel computes over it. `next_start`: where the next
        known buffer after the pointer begins in its allocation. Raises GeometryError."""
        plan = plan_copy(arg, alloc, override, values)
        rest = (override is None or override.count is None and not override.is_2d) \
            and alloc is not None and alloc.kind != "pitched"
        extent = None
        if rest:
            # Another buffer further into the same allocation (a caching allocator's
            # neighbouring tensor) ends this one.
            cut = cut_at_next(plan, next_start)
            extent = "allocation-rest" if cut is plan else "to-next-buffer"
            capped = cap_guess(cut, alloc)
            extent = extent if capped is cut else "capped"
            plan = capped
        tool = _tool_of(rule, plan, ctx.func)
        if rule.is_scan and tool is None:
            return None, None, None   # not floating point: nothing to scan
        if tool is not None:
            plan = _whole_elements(plan, tool)
            if plan.nbytes == 0:
                # Shorter than one element (cut where the next buffer begins): nothing to
                # scan, and the shim refuses a plan with an empty copy in it.
                return None, None, None
        return plan, extent, tool

    @staticmethod
    def _targets(rule: Rule, args: list[ArgValue], event: LaunchEvent
                 ) -> tuple[list[tuple[int, ArgValue | None, int, ArgOverride | None]], list[int]]:
        """(argument, the pointer value, byte offset inside the argument, override) of every
        buffer the rule takes, and the typed pointers `args: pointers` passed over because
        they point outside tracked memory. `args: pointers` takes typed pointers, untyped
        8-byte words in a tracked allocation, and every pointer-sized word inside a by-value
        argument (a struct such as PyTorch's std::array<char*, N>) that falls in a tracked
        allocation. A null pointer there is an argument left out (a bias, a mask), and a
        typed pointer outside tracked memory (cuBLAS's alpha and beta in host memory) is not
        a buffer cudump can read; a rule that names the argument still gets an error."""
        targets: list[tuple[int, ArgValue | None, int, ArgOverride | None]] = []
        untracked: list[int] = []
        for index in rule.selected_args(args):
            override = rule.overrides.get(index)
            if rule.args == "pointers" and override is None and (index, 0) not in event.pointers:
                if (args[index].type is not None and args[index].value
                        and rule.option is None):
                    untracked.append(index)
                continue  # a word that points nowhere is not a buffer
            arg, where = _pointer_of(args[index], override)
            targets.append((index, arg, where, override))
        if rule.args != "pointers":
            return targets, untracked
        taken = {t[0] for t in targets}
        # Arguments whose words are not looked into: those taken above, those a rule
        # overrides, and typed pointers (a by-value struct has many words).
        skipped = {i: i in taken or i in rule.overrides or a.looks_like_pointer
                   for i, a in enumerate(args)}
        for (index, where) in sorted(event.pointers):
            if skipped.get(index, True):
                continue
            raw = args[index].raw[where:where + 8]
            if len(raw) != 8:
                continue
            word = ArgValue(index, None, raw, int.from_bytes(raw, "little"))
            targets.append((index, word, where, None))
        return targets, untracked

    def _untracked(self, ctx: _Launch, rule: Rule, arg: ArgValue) -> None:
        """A typed pointer `args: pointers` passes over: said once per kernel and argument."""
        key = (id(rule), f"{ctx.func.mangled}/{arg.index}")
        with self.lock:
            if key in self.said_no_buffer:
                return
            self.said_no_buffer.add(key)
        type_text = arg.type.text if arg.type is not None else "?"
        warn(f"rule {rule.name} ({rule.path}:{rule.line}): {ctx.func.demangled} arg "
             f"{arg.index} ({type_text}) holds {int(arg.value or 0):#x}, which is in no tracked "
             "allocation (host memory, or memory cudump does not see); args: pointers "
             f"passes over it (name it with args: [{arg.index}] to be told at every launch)")

    def _no_such_args(self, ctx: _Launch, rule: Rule, absent: list[int], nargs: int) -> None:
        """A rule naming arguments past the kernel's last says so once per kernel."""
        key = (id(rule), f"{ctx.func.mangled}/args")
        with self.lock:
            if key in self.said_no_buffer:
                return
            self.said_no_buffer.add(key)
        which = ", ".join(f"arg {i}" for i in absent)
        have = f" (arg 0 to arg {nargs - 1})" if nargs > 1 else ""
        warn(f"rule {rule.name} ({rule.path}:{rule.line}): {_base_name(ctx.func)} has "
             f"{nargs} argument{'' if nargs == 1 else 's'}{have}; args: {list(rule.args)} "
             f"names {which}, which it does not have")

    def _no_buffer(self, ctx: _Launch, rule: Rule) -> None:
        """A rule that matches launches but finds nothing to copy says so once per kernel."""
        if rule.option is not None:
            return  # --digest and the like take what there is, and say nothing of the rest
        key = (id(rule), ctx.func.mangled)
        with self.lock:
            if key in self.said_no_buffer:
                return
            self.said_no_buffer.add(key)
        warn(f"rule {rule.name} ({rule.path}:{rule.line}) matches {ctx.func.demangled} but "
             "finds no buffer in its arguments (no pointer into a tracked allocation); name "
             "one with args: [N] and an override such as {N: {field: 0, dtype: float32, "
             "count: argK}}")

    def _place(self, ctx: _Launch, copies: list[PlannedCopy], staging_size: int, base: int,
               stream: bool) -> PlannedLaunch | None:
        offset = base
        whole: list[PlannedCopy] = []
        streamed: list[PlannedCopy] = []
        # Where some copies cannot all be placed whole, a window is kept free for streaming
        # the rest in pieces: whole copies that filled the area would leave none, and a
        # buffer as large as the area (before and after) would fail.
        limit = staging_size
        if stream and base + sum(_aligned(c.staging_bytes) for c in copies) > staging_size:
            limit = max(base, staging_size - _stream_window(staging_size - base))
        for copy in copies:
            nbytes = copy.staging_bytes
            if offset + nbytes <= (staging_size if copy.tool is not None else limit):
                copy.offset = offset
                offset += _aligned(nbytes)
                whole.append(copy)
            elif copy.tool is not None:
                self._fail(copy.record, "no staging left for its result; raise --staging")
            else:
                streamed.append(copy)
        free = staging_size - min(offset, staging_size)
        entries: list[tuple[PlannedCopy, Piece | None]] = [(c, None) for c in whole]
        kept = list(whole)
        for copy in streamed:
            if not stream:
                self._fail(copy.record, f"{copy.plan.nbytes} bytes do not fit the "
                           f"{free} bytes of staging left for this graph launch (inside a "
                           "graph a buffer is copied whole); raise --staging")
                continue
            pieces = split_pieces(copy.plan, offset, free)
            if pieces is None or len(entries) + len(pieces) > p.MAX_COPIES:
                why = (f"a row of {copy.plan.width_bytes} bytes does not fit the "
                       f"{free} bytes of staging left" if pieces is None else
                       f"it needs {len(pieces)} pieces, more than a launch can take")
                self._fail(copy.record, f"{why}; raise --staging")
                continue
            try:
                copy.target = self._open_target(copy)
            except OSError as err:
                self._fail(copy.record, f"cannot create its file: {err.strerror or err}")
                continue
            copy.pieces = pieces
            entries.extend((copy, piece) for piece in pieces)
            kept.append(copy)
        if len(entries) > p.MAX_COPIES:
            for copy, _ in entries[p.MAX_COPIES:]:
                self._fail(copy.record, f"more than {p.MAX_COPIES} buffers in one launch; "
                           "narrow the rule's args")
            entries = entries[:p.MAX_COPIES]
            kept = [c for c in kept if any(e[0] is c for e in entries)]
        if not entries:
            return None
        return PlannedLaunch(kept, entries, offset)

    def _open_target(self, copy: PlannedCopy) -> np.ndarray:
        """The .npy a streamed copy is written into, piece by piece (under a temporary name)."""
        assert copy.record.file is not None
        return _new_npy_memmap(self.run_dir / f".{copy.record.file}.part",
                               np.dtype(copy.plan.dtype), tuple(copy.plan.shape))

    def piece(self, proc: ProcessState, seq: int, index: int, rc: int,
              read: ReadStaging) -> None:
        """One piece of a streamed copy is in staging: take it before the shim reuses it."""
        pending = self._proc(proc.pid).pending.get(seq)
        if pending is None or not 0 <= index < len(pending.entries):
            return
        copy, piece = pending.entries[index]
        if piece is None or copy.target is None or copy.failed:
            return
        if rc != 0:
            copy.failed = STALLED_COPY if rc == CUDA_ERROR_TIMEOUT else \
                f"the copy failed with CUDA error {rc}"
            return
        nbytes = piece.width * piece.height
        flat = copy.target.reshape(-1).view(np.uint8)
        try:
            flat[piece.dst:piece.dst + nbytes] = np.frombuffer(read(piece.offset, nbytes),
                                                               dtype=np.uint8)
        except OSError as err:
            copy.failed = f"could not write the snapshot: {err.strerror or err}"

    def _budget(self, nbytes: int) -> bool:
        with self.lock:
            if self.stopped:
                return False
            if self.max_bytes is not None and self.planned_bytes + nbytes > self.max_bytes:
                self.stopped = True
                warn(f"{self.budget_name} reached; no more snapshots (the program "
                     "carries on)")
                return False
            self.planned_bytes += nbytes
            return True

    # -- results ------------------------------------------------------------------

    def collect(self, proc: ProcessState, seq: int, launch_rc: int, sync_rc: int,
                codes: list[int], read: ReadStaging) -> PlannedLaunch | None:
        """The shim finished the copies of launch `seq`: take the bytes, queue the writes.
        Returns copies to make now, after the launch, if what came back asks for them."""
        pending = self._proc(proc.pid).pending.pop(seq, None)
        if pending is None:
            return None
        scans: dict[tuple[int, int], dict[str, tuple[PlannedCopy, Scan]]] = {}
        results: dict[int, int] = {}
        outcomes: dict[int, str | None] = {}   # id(copy) -> why it failed (None: it did not)
        for i, (copy, _) in enumerate(pending.entries):
            rc = codes[i] if i < len(codes) else -1
            if results.get(id(copy), 0) == 0:
                results[id(copy)] = rc  # the first failure of any piece decides
        for copy in pending.copies:
            rc = results.get(id(copy), -1)
            failure = None
            if rc == -1:
                failure = (f"the launch failed with CUDA error {launch_rc}, so there is "
                           "nothing after it to copy") if launch_rc else "the copy was not made"
            elif rc == CUDA_ERROR_TIMEOUT or sync_rc == CUDA_ERROR_TIMEOUT:
                failure = STALLED_COPY
            elif rc != 0:
                failure = f"the copy failed with CUDA error {rc}"
            elif sync_rc != 0:
                failure = f"waiting for the copy failed with CUDA error {sync_rc}"
            elif copy.failed:
                failure = copy.failed
            outcomes[id(copy)] = failure
            if failure is not None:
                self._discard_target(copy)
                self._fail(copy.record, _tool_failure(copy, rc, failure))
                continue
            if copy.tool is not None and copy.tool != p.ToolMode.DIGEST:
                result = bytes(read(copy.offset, p.TOOL_RESULT))
                found = Scan.from_words(int.from_bytes(result[:8], "little"),
                                        int.from_bytes(result[8:16], "little"))
                scans.setdefault((copy.plan.arg, copy.at), {})[copy.phase] = (copy, found)
                continue
            if copy.tool is not None:
                self._tool_result(copy, bytes(read(copy.offset, p.TOOL_RESULT)))
                continue
            record = copy.record
            override = copy.rule.overrides.get(copy.plan.arg)
            value_range = override.range if override is not None else None
            if copy.target is not None:
                self.jobs.put(WriteJob(record, copy.target, copy.rule.formats, value_range,
                                       streamed=True))
                continue
            plan = copy.plan
            data = np.frombuffer(read(copy.offset, plan.nbytes), dtype=np.uint8)
            array = data.view(np.dtype(plan.dtype)).reshape(plan.shape).copy()
            del data
            self.jobs.put(WriteJob(record, array, copy.rule.formats, value_range))
        if pending.capture is not None and pending.ctx is not None:
            self._write_capture(pending.ctx, pending.args, pending.capture, outcomes)
        return self._nan_producers(pending, scans) if scans else None

    def _write_capture(self, ctx: _Launch, args: list[ArgValue], copies: list[PlannedCopy],
                       outcomes: dict[int, str | None]) -> None:
        """One line of captures.jsonl: what a replay of this launch needs, and what of it
        is missing."""
        ev, func = ctx.event, ctx.func
        image = self.images.of(ctx.proc.pid, func.id)
        problems = launch_problems(ev.api, ev.flags)
        if image.problem is not None:
            problems.append(f"no module image: {image.problem}")
        buffers: dict[tuple[int, int], CapturedBuffer] = {}
        for copy in copies:
            rec, plan = copy.record, copy.plan
            where = int(rec.extra.get("offset", 0))
            failure = outcomes.get(id(copy), rec.reason or "it was not copied")
            if failure is not None:
                at = f" (the pointer at byte {where})" if where else ""
                problems.append(f"arg {plan.arg}{at}: no {copy.phase} snapshot: {failure}")
                continue
            buf = buffers.setdefault((plan.arg, where), CapturedBuffer(
                plan.arg, where, plan.address, plan.width_bytes, plan.height, plan.pitch,
                plan.dtype, list(plan.shape)))
            setattr(buf, copy.phase, rec.file)
        raw = ev.raw_args or []
        pointers = []
        for (index, where), alloc in sorted(ev.pointers.items()):
            if index < len(raw) and where + 8 <= len(raw[index]):
                value = int.from_bytes(raw[index][where:where + 8], "little")
                pointers.append(pointer_json(index, where, value, alloc))
        for arg in args:
            if (arg.type is not None and arg.looks_like_pointer and isinstance(arg.value, int)
                    and arg.value and (arg.index, 0) not in ev.pointers):
                problems.append(f"arg {arg.index} points to 0x{arg.value:x}, outside every "
                                "allocation cudump tracks, so its memory was not captured")
        self.captures.append({
            "pid": ctx.proc.pid, "launch": ev.seq, "occurrence": ev.occurrence,
            "kernel": func.demangled, "mangled": func.mangled, "grid": list(ev.grid),
            "block": list(ev.block), "smem": ev.smem, "api": ev.api,
            "device": ev.device if ev.device >= 0 else None, "stream": ev.stream_hex,
            "image": image.file, "image_format": image.format,
            "params": b"".join(raw).hex(),
            "layout": [list(x) for x in func.params] if func.params is not None else None,
            "pointers": pointers,
            "buffers": [b.to_json() for b in buffers.values()],
            "problems": problems,
        })

    def _nan_producers(self, pending: PlannedLaunch,
                       scans: dict[tuple[int, int], dict[str, tuple[PlannedCopy, Scan]]]
                       ) -> PlannedLaunch | None:
        """Buffers this launch left NaN or Inf in that held none before: each is reported
        (a warning and a manifest record); the first launch of each kernel that does so
        has every buffer snapshotted now, as the launch left them."""
        found = False
        for phases in scans.values():
            if "after" not in phases or "before" not in phases:
                continue
            copy, after = phases["after"]
            _, before = phases["before"]
            if after.count == 0 or before.count != 0:
                continue
            found = True
            record = copy.record
            elements = copy.plan.width_bytes * copy.plan.height // max(
                1, np.dtype(copy.plan.dtype).itemsize)
            record.extra.update(nonfinite=after.count, first_nonfinite=after.first,
                                nonfinite_before=0, elements=elements)
            record.extra["nan_producer"] = True
            with self.lock:
                self.manifest.append(record)
                self.nan_producers += 1
            inside = f" (the pointer at byte {record.extra['offset']})" \
                if record.extra.get("offset") else ""
            say(f"cudump: NaN/Inf: launch {record.launch} of {record.kernel} (occurrence "
                 f"{record.occurrence}, process {record.pid}) left {after.count} of {elements} "
                 f"elements of arg {record.arg}{inside} non-finite, the first at index "
                 f"{after.first}; there were none before it")
            if pending.ctx is not None:
                with self.lock:
                    self.nan_found.setdefault((record.pid, record.launch), (
                        pending.ctx.func, pending.ctx.event,
                        f"NaN/Inf in arg {record.arg}{inside}: {after.count} of {elements} "
                        f"elements, the first at index {after.first}"))
        ctx = pending.ctx
        if not found or ctx is None:
            return None
        with self.lock:
            if ctx.func.mangled in self.nan_snapshotted or len(self.nan_snapshotted) >= 8:
                return None
            self.nan_snapshotted.add(ctx.func.mangled)
        rule = option_rule("--check-nan", FORMATS)
        rule.when = frozenset({"after"})
        # Named apart from the launch's other snapshots (a rule's, or a capture's).
        copies = self._rule_copies(ctx, rule, pending.args, pending.values, pending.stems)
        for copy in copies:
            copy.record.extra["nan_producer"] = True
        follow = self._place(ctx, copies, pending.staging_size, 0, True)
        if follow is not None:
            self._proc(ctx.proc.pid).pending[ctx.event.seq] = follow
        return follow

    def take_nan(self, pid: int, launch: int) -> tuple[FuncInfo, LaunchEvent, str] | None:
        """The NaN/Inf this launch was found to produce, if any (once)."""
        with self.lock:
            return self.nan_found.pop((pid, launch), None)

    def _tool_result(self, copy: PlannedCopy, result: bytes) -> None:
        """What cudump's kernel computed over a buffer, into its manifest record."""
        record, plan = copy.record, copy.plan
        if copy.tool == p.ToolMode.DIGEST:
            record.extra.update(_digest_fields(plan, int.from_bytes(result[:8], "little")))
        with self.lock:
            self.manifest.append(record)
            self.digests += 1

    def _discard_target(self, copy: PlannedCopy) -> None:
        if copy.target is not None and copy.record.file is not None:
            copy.target = None
            (self.run_dir / f".{copy.record.file}.part").unlink(missing_ok=True)

    @staticmethod
    def _stem(ctx: _Launch, arg: int, phase: str, offset: int, stems: set[str]) -> str:
        """The file name (less .npy) of a snapshot of one buffer around one launch."""
        ev = ctx.event
        where = f"-g{ev.graph}r{ev.replay}n{ev.node}" if ctx.in_graph else ""
        inside = f"-off{offset}" if offset else ""
        stem = f"{ev.seq:06d}-{ctx.proc.pid}{where}-{ctx.file_name}-arg{arg}{inside}-{phase}"
        # Two rules on the same buffer: each snapshot gets its own file.
        base, n = stem, 2
        while stem in stems:
            stem, n = f"{base}-{n}", n + 1
        stems.add(stem)
        return stem

    @staticmethod
    def _record(ctx: _Launch, arg: int, phase: str, plan: CopyPlan | None,
                type_text: str | None = None, stem: str | None = None,
                rule: Rule | None = None, offset: int = 0,
                extent: str | None = None) -> SnapshotRecord:
        """The manifest record of one copy (`stem`: the file it is written to, if any), or
        of one that could not be planned (no `plan`)."""
        ev, func = ctx.event, ctx.func
        record = SnapshotRecord(
            kernel=func.demangled, mangled=func.mangled, launch=ev.seq,
            occurrence=ev.occurrence, pid=ctx.proc.pid, grid=list(ev.grid),
            block=list(ev.block), stream=ev.stream_hex, arg=arg,
            type=plan.type_text if plan is not None else type_text, phase=phase,
            address=f"0x{plan.address:x}" if plan is not None else "",
            dtype=plan.dtype if plan is not None else None,
            shape=list(plan.shape) if plan is not None else None,
            file=f"{stem}.npy" if stem is not None else None,
            device=ev.device if ev.device >= 0 else None,
        )
        if plan is not None and plan.note:
            record.extra["note"] = plan.note
        if offset:
            record.extra["offset"] = offset   # byte offset of the pointer inside the argument
        if ctx.in_graph:
            record.extra.update(graph=ev.graph, replay=ev.replay, node=ev.node)
        if rule is not None:
            record.extra["rule"] = rule.origin
        if extent is not None:
            # From the pointer to the end of its allocation (or to the next buffer): with a
            # caching allocator that may run past the tensor; a rule's count narrows it.
            record.extra["extent"] = extent
        return record

    def _error(self, ctx: _Launch, arg: ArgValue | None, phase: str, rule: Rule,
               reason: str) -> None:
        index = arg.index if arg is not None else None
        record = self._record(ctx, index if index is not None else 0, phase, None,
                              arg.type.text if arg is not None and arg.type else None)
        if index is None:
            record.extra["arg_unknown"] = True
        if arg is not None and isinstance(arg.value, int):
            record.address = f"0x{arg.value:x}"
        record.extra["rule"] = rule.origin
        self._fail(record, reason)

    def thread_failures(self) -> int:
        """Failures recorded so far by the calling thread."""
        return int(getattr(self._thread_failures, "count", 0))

    def _fail(self, record: SnapshotRecord, reason: str) -> None:
        record.status = "error"
        record.reason = reason
        record.file = None
        self._thread_failures.count = self.thread_failures() + 1
        what = f"arg {record.arg}" if not record.extra.get("arg_unknown") else "its arguments"
        with self.lock:
            self.failed += 1
            # Said once per kernel, argument and reason (a rule on every launch of a kernel
            # would say it thousands of times); the manifest has every one.
            said = (record.kernel, what, reason)
            first = said not in self.said_failures
            if first and len(self.said_failures) < 100_000:
                self.said_failures.add(said)
        if first:
            warn(f"no snapshot of {record.kernel} {what} ({record.phase}, launch "
                 f"{record.launch}): {reason}")
        with self.lock:
            self.manifest.append(record)

    # -- writing ------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            if self.disk_failed is not None:
                self._drop(job.record, f"not written: {self.disk_failed}")
                continue
            try:
                self._write(job)
            except FileExistsError as err:
                # Something (a symlink?) is in the run directory under this snapshot's
                # temporary name: this one is not written; the others go on (runfiles).
                job.record.png = None
                self._fail(job.record, f"could not write the snapshot: {err.filename} is "
                           "in the way")
            except OSError as err:
                # The disk is full or the directory went away: stop writing (once, with
                # one warning); the program carries on and the manifest stays true.
                self.disk_failed = f"writing snapshots stopped: {err.strerror or err}"
                self.stopped = True
                warn(f"{self.disk_failed} ({self.run_dir}); no more snapshots, the program "
                     "carries on")
                self._drop(job.record, self.disk_failed)
            except Exception as err:  # a bad write must not stop the others
                job.record.png = None
                self._fail(job.record, f"could not write the snapshot: {err}")

    def _drop(self, record: SnapshotRecord, reason: str) -> None:
        """A snapshot that cannot be written: recorded if the manifest still can be."""
        record.status, record.reason, record.file, record.png = "error", reason, None, None
        with self.lock:
            self.failed += 1
            try:
                self.manifest.append(record)
            except OSError:
                pass  # the manifest keeps only whole lines (see ManifestWriter)

    def _write(self, job: WriteJob) -> None:
        record = job.record
        assert record.file is not None
        npy = self.run_dir / record.file
        png = npy.with_suffix(".png")
        written: list[Path] = []
        try:
            if job.streamed:
                part = npy.with_name(f".{npy.name}.part")
                job.array.flush()  # type: ignore[attr-defined]
                if "npy" in job.formats:
                    os.replace(part, npy)
                    written.append(npy)
                else:
                    record.file = None
            elif "npy" in job.formats:
                _save_whole(npy, lambda tmp: _save_npy(tmp, job.array))
                written.append(npy)
            else:
                record.file = None
            if "png" in job.formats and is_image_like(job.array.dtype, job.array.shape):
                rendered = render(job.array, value_range=job.value_range)
                info = {"kernel": record.kernel, "arg": str(record.arg),
                        "phase": record.phase, "launch": str(record.launch)}
                _save_whole(png, lambda f: save_png(rendered, f, info))
                written.append(png)
                record.png = png.name
                if rendered.value_range is not None and job.array.dtype.kind == "f":
                    record.range = [float(rendered.value_range[0]),
                                    float(rendered.value_range[1])]
            with self.lock:
                self.manifest.append(record)
                self.written += 1
                self.bytes_written += job.array.nbytes
        except BaseException:
            # No file without its manifest line, and no line without its file.
            for path in written:
                path.unlink(missing_ok=True)
            raise
        finally:
            if job.streamed:
                npy.with_name(f".{npy.name}.part").unlink(missing_ok=True)

    def fill(self, summary: RunSummary) -> None:
        summary.snapshots = self.written
        summary.snapshot_errors = self.failed
        summary.snapshot_bytes = self.bytes_written
        summary.digests = self.digests
        summary.nan_producers = self.nan_producers
        summary.repeated_launches = self.repeated
        summary.planned_launches = self.asked
        summary.replay_captures = self.captures.count

    def close(self) -> None:
        self.results.close()
        self.jobs.put(None)
        self.writer.join()


def _save_npy(f: IO[bytes], array: np.ndarray) -> None:
    np.save(f, array)  # a file object: np.save would add ".npy" to a name


def _save_whole(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Writes through a temporary name and renames: a reader never sees half a file, and
    nothing is written through a symlink planted in the run directory (runfiles)."""
    runfiles.write_whole(path, write)


def _new_npy_memmap(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
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


class ReadStaging(Protocol):
    def __call__(self, offset: int, nbytes: int) -> memoryview: ...


@dataclass
class _Launch:
    proc: ProcessState
    func: FuncInfo
    event: LaunchEvent

    @functools.cached_property
    def file_name(self) -> str:
        """The kernel's part of its snapshots' file names."""
        return safe_name(_base_name(self.func))

    @functools.cached_property
    def in_graph(self) -> bool:
        return bool(self.event.flags & p.LaunchFlag.GRAPH)


def _digest_record(make: Callable[[], SnapshotRecord], plan: CopyPlan) -> SnapshotRecord:
    """A repeated plan's digest record (made once, for its template line): the first
    launch's record, with the digest fields."""
    record = make()
    record.extra.update(_digest_fields(plan, 0))
    return record


def _repeat_keys(event: LaunchEvent) -> tuple[tuple[int, int], ...]:
    """Byte ranges of the launch's parameters (one after the other) a plan without
    overrides depends on: every pointer word it found. Scalars are not among them: without
    overrides no extent or type comes from a value, so an optimizer's step count or a
    dropout seed may change from launch to launch."""
    assert event.raw_args is not None
    starts = [0]
    for raw in event.raw_args:
        starts.append(starts[-1] + len(raw))
    keys = {(starts[i] + where, 8) for i, where in event.pointers
            if i < len(event.raw_args) and where + 8 <= len(event.raw_args[i])}
    ordered = tuple(sorted(keys))
    return ordered if len(ordered) <= p.MAX_KEYS else ()


def _digest_fields(plan: CopyPlan, words: int) -> dict[str, object]:
    """What a digest record holds beyond the snapshot fields."""
    return {"digest": digest_hex(words), "bytes": plan.width_bytes * plan.height,
            "row_bytes": plan.width_bytes, "rows": plan.height, "algorithm": DIGEST_ALGORITHM}


def _pointer_values(args: list[ArgValue], event: LaunchEvent) -> list[tuple[int, Allocation]]:
    """Every address the launch's arguments hold that lies in a known allocation, with it."""
    values = []
    for (index, where), alloc in event.pointers.items():
        if index < len(args):
            raw = args[index].raw[where:where + 8]
            if len(raw) == 8:
                values.append((int.from_bytes(raw, "little"), alloc))
    return values


def _tool_of(rule: Rule, plan: CopyPlan, func: FuncInfo) -> p.ToolMode | None:
    """What cudump's kernel computes for this buffer, if anything: a digest, or a scan of
    floating-point elements (from the signature, the rule, or else the one float type
    the kernel's name mentions, as PyTorch's `CUDAFunctor_add<float>`)."""
    if rule.is_digest:
        return p.ToolMode.DIGEST
    if not rule.is_scan:
        return None
    dtype, note = plan.dtype, plan.note
    guessed = None
    if dtype == "uint8" and plan.type_text is None:
        guessed = float_type_in_name(func.demangled)
        if guessed is None:
            return None
        dtype, note = guessed.dtype, guessed.note
    mode = SCAN_MODES.get("bfloat16" if dtype == "uint16" and note == BF16_NOTE else dtype)
    size = SCAN_ELEMENT_SIZE.get(mode) if mode is not None else None
    if guessed is not None and size and (plan.address % size
                                         or plan.height > 1 and plan.pitch % size):
        # Not aligned to the type the name mentions: not a buffer of that type (a mask
        # or an index array of the same kernel), so there is nothing to scan.
        return None
    return mode


def _whole_elements(plan: CopyPlan, tool: p.ToolMode) -> CopyPlan:
    """A scan reads whole elements: rows cut down to a multiple of the element size."""
    size = SCAN_ELEMENT_SIZE.get(tool)
    if size is None or plan.width_bytes % size == 0:
        return plan
    return replace(plan, width_bytes=plan.width_bytes - plan.width_bytes % size)


def _tool_failure(copy: PlannedCopy, rc: int, failure: str) -> str:
    """Why cudump's kernel did not run, in the words of what it was asked to do."""
    if copy.tool is None:
        return failure
    if rc == CUDA_ERROR_INVALID_VALUE:
        return ("the buffer does not lie inside one allocation cudump knows (or is not "
                "aligned to its elements), so cudump's kernel does not read it")
    if rc == CUDA_ERROR_NOT_SUPPORTED and copy.record.extra.get("graph") is not None:
        return "digests and scans of kernels inside graph launches are not supported"
    return failure.replace("the copy", "cudump's kernel")


def override_field(override: ArgOverride | None) -> int | None:
    """The byte offset of the pointer inside a by-value argument an override names, or None."""
    return override.field if override is not None else None


def _check_is_pointer(func: FuncInfo, arg: ArgValue) -> None:
    """GeometryError naming the type when a rule asks for the buffer of an argument that the
    signature says is no pointer (and whose value is in no tracked allocation)."""
    ptype = arg.type
    if ptype is None or ptype.is_pointer or ptype.reference:
        return
    article = "an" if ptype.text[:1].lower() in "aeiou" else "a"
    inside = ("; for a pointer inside it give an override's field: BYTE"
              if arg.value is None and len(arg.raw) >= 8 else "")
    raise GeometryError(f"arg {arg.index} of {_base_name(func)} is {article} {ptype.text}, "
                        f"not a pointer{inside}")


def _pointer_of(arg: ArgValue, override: ArgOverride | None) -> tuple[ArgValue | None, int]:
    """The argument itself, or the pointer at `field` inside a by-value struct argument."""
    field_offset = override.field if override is not None else None
    if field_offset is None:
        return arg, 0
    raw = arg.raw[field_offset:field_offset + 8]
    if len(raw) != 8:
        return None, field_offset
    return ArgValue(arg.index, None, raw, int.from_bytes(raw, "little")), field_offset


def _base_name(func: FuncInfo) -> str:
    base = name_forms(func.demangled)[3]   # cached: a PyTorch name takes ~1 ms to parse
    return func.mangled if base == func.demangled.strip() and "(" in base else base
