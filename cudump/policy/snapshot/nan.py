"""The NaN/Inf policy of snapshots (--check-nan, `format: check-nan`, --break-on-nan).

Which buffers are scanned (floating-point elements, from the signature, the rule, or the
one float type the kernel's name mentions), what a scan's result says, and what follows
when a launch leaves NaN or Inf in a buffer that held none before: a warning and a manifest
record for each such buffer and the finding kept for --break-on-nan (nanreport.py), and,
for the first launch of each kernel that does so, a snapshot of every buffer as the launch
left them, taken by a rule made on the spot. Each report says whether the launch produced
the NaN/Inf or propagated an input's (origin.py), and where an input's was written by the
host (a host-to-device copy or a memset, hostwrites.py), that write is the producer. Every
copy strategy's scans reach this through one route (route.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from cudump.kernels.elements import BF16_NOTE, float_type_in_name
from cudump.kernels.geometry import CopyPlan
from cudump.launches.process import FuncInfo
from cudump.policy.rules import Rule, option_rule
from cudump.policy.snapshot.nanreport import NanReporter
from cudump.policy.snapshot.origin import Maker, Makers, Scanned
from cudump.policy.snapshot.planned import Place, PlannedCopy, PlannedLaunch, RuleCopies
from cudump.policy.snapshot.state import SnapshotState
from cudump.policy.snapshot.templates import RepeatTemplate
from cudump.rundir import formats as file_formats
from cudump.wire import protocol as p
from cudump.wire.digest import SCAN_ELEMENT_SIZE, SCAN_MODES, Scan

# Kernels whose first NaN producer has every buffer snapshotted, at most.
MAX_SNAPSHOTTED_KERNELS = 8

# (kernel node, argument, byte offset of the pointer) -> phase -> the scan copy and what it
# found (the node is 0 outside graph launches, whose kernel nodes share one plan)
Scans = dict[tuple[int, int, int], dict[str, tuple[PlannedCopy, Scan]]]
# Takes a process's result ring up to now, on the calling thread (results.ResultDrain).
CatchUp = Callable[[int], None]


def scan_mode(plan: CopyPlan, func: FuncInfo) -> p.ToolMode | None:
    """What a scan of this buffer's floating-point elements runs as (from the signature,
    the rule, what the kernel's compiler said of an untyped argument (FuncInfo.arg_overrides),
    or else the one float type the kernel's name mentions, as PyTorch's
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


def sum_format(plan: CopyPlan, func: FuncInfo) -> p.ToolMode | None:
    """The element format a digest of this buffer also sums |x| over (the scan's, where its
    elements are aligned to their size), or None: not floating point, or not aligned."""
    mode = scan_mode(plan, func)
    size = SCAN_ELEMENT_SIZE.get(mode) if mode is not None else None
    if size is None or plan.address % size or plan.height > 1 and plan.pitch % size:
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


def span(plan: CopyPlan) -> tuple[int, int]:
    """The device address range a copy plan reads: [start, end)."""
    return plan.address, plan.address + (plan.height - 1) * plan.pitch + plan.width_bytes


def by_node(scans: Scans) -> list[Scans]:
    """A launch's scans by kernel node, in node order (one group outside a graph)."""
    groups: dict[int, Scans] = {}
    for key, phases in scans.items():
        groups.setdefault(key[0], {})[key] = phases
    return [groups[node] for node in sorted(groups)]


def scanned_buffers(scans: Scans) -> list[Scanned]:
    """The buffers of a launch scanned before it ran, and what the scans found."""
    out = []
    for (_, arg, at), phases in scans.items():
        if "before" not in phases:
            continue
        copy, before = phases["before"]
        after = phases["after"][1].count if "after" in phases else None
        start, end = span(copy.plan)
        out.append(Scanned(arg, at, start, end, before.count, after))
    return out


def follow_up_rule() -> Rule:
    """The rule that snapshots every buffer a NaN producer left, after it."""
    rule = option_rule("--check-nan", file_formats.names())
    rule.when = frozenset({"after"})
    return rule


class NanWatch:
    """Weighs a launch's NaN/Inf scans: the buffers it turned non-finite are reported
    (nanreport.NanReporter), what turned which buffer non-finite is kept (origin.Makers), and
    the first launch of each kernel that leaves NaN/Inf has every buffer snapshotted once.
    `rule_copies` and `place` are the planner's; `sync` takes a process's host writes made
    up to now (hostwrites.HostWriteDrain.catch_up), so that what a launch's scans say is
    weighed against every write made before it."""

    def __init__(self, state: SnapshotState, rule_copies: RuleCopies, place: Place,
                 makers: Makers, report: NanReporter, sync: Callable[[int], None]) -> None:
        self.state = state
        self.rule_copies = rule_copies
        self.place = place
        self.makers = makers     # which launch turned which buffer non-finite
        self.report = report
        self.sync = sync
        self.snapshotted: set[str] = set()   # kernels whose NaN producer was snapshotted

    def known(self, pid: int) -> bool:
        """Whether anything is kept for the process, once its host writes up to now are
        taken (cheap where there are none)."""
        self.sync(pid)
        return self.makers.known(pid)

    def producers(self, pending: PlannedLaunch, scans: Scans, catch_up: CatchUp
                  ) -> PlannedLaunch | None:
        """Buffers this launch left NaN or Inf in that held none before: each is reported
        (a warning and a manifest record, saying whether the launch produced it or carried
        on an input's); the first launch of each kernel that does so has every buffer
        snapshotted, as the launch left them: the copies returned, placed in staging. The
        kernel nodes of a graph launch are taken one by one, in the order they ran; none is
        snapshotted after it: the graph has run on past it by the time its scans are read.
        `catch_up` takes the process's result ring up to now (results.ResultDrain.catch_up),
        so that plain repeated launches that found buffers finite are known of before a
        report names the launch that left an input non-finite."""
        found = seen = False
        for node_scans in by_node(scans):
            reports = [(phases["after"][0], phases["after"][1])
                       for phases in node_scans.values()
                       if "after" in phases and "before" in phases
                       and phases["after"][1].count and not phases["before"][1].count]
            self._learn(pending, node_scans, reports, catch_up)
            found = found or bool(reports)
            seen = seen or any("after" in phases and phases["after"][1].count
                               for phases in node_scans.values())
        if seen and pending.ctx is not None:
            # An exact scan saw NaN/Inf (new or not): what a window found is confirmed.
            self.report.confirmed(pending.ctx.proc.pid)
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
        return self.place(copies, pending.staging_size, 0, True)

    def _learn(self, pending: PlannedLaunch, scans: Scans,
               reports: list[tuple[PlannedCopy, Scan]], catch_up: CatchUp) -> None:
        """Classifies and reports the buffers turned non-finite, and keeps which launch
        turned which buffer non-finite (and forgets buffers found finite again)."""
        ctx = pending.ctx
        first = reports[0][0].record if reports else None
        pid = ctx.proc.pid if ctx is not None else first.pid if first is not None else 0
        # known() first takes the host writes the process made up to now (before this launch).
        known = self.known(pid)
        if not reports and not known:
            return   # the usual case: nothing found, nothing kept
        seq = ctx.event.seq if ctx is not None else first.launch if first is not None else 0
        scanned = scanned_buffers(scans)
        if reports and any(s.before for s in scanned) and known:
            catch_up(pid)
        origin = self.makers.origin(pid, seq, scanned) if reports else None
        for s in scanned:
            if not s.before:
                self.makers.finite(pid, s.start, s.end, seq)
            if s.after == 0:
                self.makers.finite(pid, s.start, s.end, seq, after=True)
        for copy, after in reports:
            assert origin is not None
            self.report.launch(pending, copy, after, origin)
            start, end = span(copy.plan)
            self.makers.turned(pid, start, end, Maker(seq, copy.record.kernel))

    def plain(self, pid: int, template: RepeatTemplate, launch: int) -> None:
        """A launch made with a repeated plan whose every scan after it found nothing: the
        buffers it scanned are finite after it."""
        first = template.first
        if first is None:
            return
        for copy in first.copies:
            if copy.phase == "after" and copy.tool not in (None, p.ToolMode.DIGEST):
                start, end = span(copy.plan)
                self.makers.finite(pid, start, end, launch, after=True)

    def freed(self, pid: int, base: int, size: int) -> None:
        """An allocation of the process is gone: what turned it non-finite is forgotten."""
        if self.known(pid):
            self.makers.freed(pid, base, base + size)
