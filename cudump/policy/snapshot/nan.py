"""The NaN/Inf policy of snapshots (--check-nan, `format: check-nan`, --break-on-nan).

Which buffers are scanned (floating-point elements, from the signature, the rule, or the
one float type the kernel's name mentions), what a scan's result says, and what follows
when a launch leaves NaN or Inf in a buffer that held none before: a warning and a manifest
record for each such buffer, the finding kept for --break-on-nan, and, for the first
launch of each kernel that does so, a snapshot of every buffer as the launch left them,
taken by a rule made on the spot.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from cudump.console import say
from cudump.controller.process import FuncInfo, LaunchEvent
from cudump.kernels.elements import BF16_NOTE, float_type_in_name
from cudump.kernels.geometry import CopyPlan
from cudump.policy.digest import SCAN_ELEMENT_SIZE, SCAN_MODES, Scan
from cudump.policy.rules import FORMATS, Rule, option_rule
from cudump.policy.snapshot.planned import Place, PlannedCopy, PlannedLaunch, RuleCopies
from cudump.policy.snapshot.state import SnapshotState
from cudump.wire import protocol as p

# Kernels whose first NaN producer has every buffer snapshotted, at most.
MAX_SNAPSHOTTED_KERNELS = 8

# (kernel node, argument, byte offset of the pointer) -> phase -> the scan copy and what it
# found (the node is 0 outside graph launches, whose kernel nodes share one plan)
Scans = dict[tuple[int, int, int], dict[str, tuple[PlannedCopy, Scan]]]


class NanFound(NamedTuple):
    """A launch found to leave NaN/Inf, for --break-on-nan."""

    func: FuncInfo
    event: LaunchEvent
    reason: str


def scan_mode(plan: CopyPlan, func: FuncInfo) -> p.ToolMode | None:
    """What a scan of this buffer's floating-point elements runs as (from the signature,
    the rule, or else the one float type the kernel's name mentions, as PyTorch's
    `CUDAFunctor_add<float>`), or None: not floating point, nothing to scan."""
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


def whole_elements(plan: CopyPlan, tool: p.ToolMode) -> CopyPlan:
    """A scan reads whole elements: rows cut down to a multiple of the element size."""
    size = SCAN_ELEMENT_SIZE.get(tool)
    if size is None or plan.width_bytes % size == 0:
        return plan
    return replace(plan, width_bytes=plan.width_bytes - plan.width_bytes % size)


def add_scan(scans: Scans, copy: PlannedCopy, result: bytes) -> None:
    """What cudump's kernel found scanning one buffer (its two result words)."""
    found = Scan.from_words(int.from_bytes(result[:8], "little"),
                            int.from_bytes(result[8:16], "little"))
    node = copy.ctx.event.node if copy.ctx is not None and copy.ctx.in_graph else 0
    scans.setdefault((node, copy.plan.arg, copy.at), {})[copy.phase] = (copy, found)


def follow_up_rule() -> Rule:
    """The rule that snapshots every buffer a NaN producer left, after it."""
    rule = option_rule("--check-nan", FORMATS)
    rule.when = frozenset({"after"})
    return rule


class NanWatch:
    """NaN/Inf producers: reported, kept for --break-on-nan, and snapshotted once per
    kernel. `rule_copies` and `place` are the planner's."""

    def __init__(self, state: SnapshotState, rule_copies: RuleCopies, place: Place) -> None:
        self.state = state
        self.rule_copies = rule_copies
        self.place = place
        self.snapshotted: set[str] = set()   # kernels whose NaN producer was snapshotted
        # (pid, launch) -> the launch and what it did, for --break-on-nan (taken by the session)
        self.found: dict[tuple[int, int], NanFound] = {}

    def producers(self, pending: PlannedLaunch, scans: Scans) -> PlannedLaunch | None:
        """Buffers this launch left NaN or Inf in that held none before: each is reported
        (a warning and a manifest record); the first launch of each kernel that does so
        has every buffer snapshotted now, as the launch left them. Not a kernel node of a
        graph launch: the graph has run on past it by the time its scans are read."""
        found = False
        for phases in scans.values():
            if "after" not in phases or "before" not in phases:
                continue
            copy, after = phases["after"]
            _, before = phases["before"]
            if after.count == 0 or before.count != 0:
                continue
            found = True
            self._report(pending, copy, after)
        ctx = pending.ctx
        if not found or ctx is None or ctx.in_graph:
            return None
        state = self.state
        with state.lock:
            if (ctx.func.mangled in self.snapshotted
                    or len(self.snapshotted) >= MAX_SNAPSHOTTED_KERNELS):
                return None
            self.snapshotted.add(ctx.func.mangled)
        # Named apart from the launch's other snapshots (a rule's, or a capture's).
        copies = self.rule_copies(ctx, follow_up_rule(), pending.args, pending.values,
                                  pending.stems)
        for copy in copies:
            copy.record.extra["nan_producer"] = True
        follow = self.place(copies, pending.staging_size, 0, True)
        if follow is not None:
            state.proc(ctx.proc.pid).pending[ctx.event.seq] = follow
        return follow

    def _report(self, pending: PlannedLaunch, copy: PlannedCopy, after: Scan) -> None:
        record = copy.record
        elements = copy.plan.width_bytes * copy.plan.height // max(
            1, np.dtype(copy.plan.dtype).itemsize)
        record.extra.update(nonfinite=after.count, first_nonfinite=after.first,
                            nonfinite_before=0, elements=elements)
        record.extra["nan_producer"] = True
        state = self.state
        with state.lock:
            state.manifest.append(record)
            if state.tally.nan_producers == 0:
                state.tally.first_nan_rank = record.rank
            state.tally.nan_producers += 1
        inside = f" (the pointer at byte {record.extra['offset']})" \
            if record.extra.get("offset") else ""
        rank = f", rank {record.rank}" if record.rank is not None else ""
        extra = record.extra
        where = (f"graph {extra['graph']}, replay {extra['replay']}, node {extra['node']}"
                 if "graph" in extra else f"occurrence {record.occurrence}")
        say(f"cudump: NaN/Inf: launch {record.launch} of {record.kernel} ({where}, "
            f"process {record.pid}{rank}) left {after.count} of {elements} "
            f"elements of arg {record.arg}{inside} non-finite, the first at index "
            f"{after.first}; there were none before it")
        # A graph launch's kernel nodes share one plan: the producer is the copy's node.
        # (A repeated plan's copies keep the launch they were first planned for.)
        ctx = copy.ctx if copy.ctx is not None and copy.ctx.in_graph else pending.ctx
        if ctx is not None:
            with state.lock:
                self.found.setdefault((record.pid, record.launch), NanFound(
                    ctx.func, ctx.event,
                    f"NaN/Inf in arg {record.arg}{inside}: {after.count} of {elements} "
                    f"elements, the first at index {after.first}"))

    def take(self, pid: int, launch: int) -> NanFound | None:
        """The NaN/Inf this launch was found to produce, if any (once)."""
        with self.state.lock:
            return self.found.pop((pid, launch), None)
