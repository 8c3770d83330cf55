"""The copies of one launch: from each rule that takes it, what it reads of each buffer,
before and/or after, within the byte budget, placed in staging."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from cudump.kernels.args import ArgValue, Number, arg_values, decode_args
from cudump.kernels.geometry import Allocation, CopyPlan, GeometryError
from cudump.kernels.signature import parse_signature
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.policy.rules import Rule
from cudump.policy.snapshot.buffers import (
    Target,
    check_is_pointer,
    override_field,
    pointer_values,
    read_of,
    targets,
    tensormap_buffer,
)
from cudump.policy.snapshot.capture import Captures
from cudump.policy.snapshot.failures import Failures, Notices
from cudump.policy.snapshot.nan import sum_format
from cudump.policy.snapshot.place import Placer
from cudump.policy.snapshot.planned import Buffer, LaunchContext, PlannedCopy, PlannedLaunch
from cudump.policy.snapshot.records import make_record, stem
from cudump.policy.snapshot.replan import Replanner
from cudump.policy.snapshot.select import Selection
from cudump.policy.snapshot.state import Budget, KnownBuffers, ProcessSnapshots, SnapshotState
from cudump.wire import protocol as p

# What planning a buffer may raise: the reason its record gives.
PLAN_ERRORS = (GeometryError, ArithmeticError, RecursionError)
NO_LAYOUT = ("the driver gave no parameter layout for this kernel (cuFuncGetParamInfo needs "
             "driver 12.4 or newer)")


class BufferRead(NamedTuple):
    """What a rule would read of one buffer of a launch (`plan`), or why it cannot (`error`):
    the pointer at byte `where` of argument `index`, in `alloc`."""

    index: int
    where: int
    plan: CopyPlan | None
    alloc: Allocation | None
    error: str | None


class Planner:
    """Plans launches (remembered in their process's `pending` until collected)."""

    def __init__(self, state: SnapshotState, selection: Selection, budget: Budget,
                 failures: Failures, notices: Notices, placer: Placer,
                 captures: Captures, replanner: Replanner) -> None:
        self.state = state
        self.replanner = replanner
        self.selection = selection
        self.budget = budget
        self.failures = failures
        self.notices = notices
        self.placer = placer
        self.captures = captures

    def plan(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent,
             staging_size: int, extra: Sequence[Rule] = ()) -> PlannedLaunch | None:
        """The copies to make around this launch (remembered until `collect`), for the rules
        that take it and the `extra` rules, which take it whatever they match (--inject's).

        The kernel nodes of one graph launch share its number and are planned one after
        the other: their copies follow each other in the staging area, none streamed
        (a graph's copy nodes run without the controller), and one MSG_END reports all."""
        in_graph = bool(event.flags & p.LaunchFlag.GRAPH)
        state = self.state
        ps = state.proc(proc.pid)
        with state.lock:
            state.tally.asked += 1
            state.tally.asked_kernels[func.demangled] += 1
        if event.flags & p.LaunchFlag.UNSAFE_GRAPH:
            self.notices.unsafe_graph(proc, func, event)
            return None
        earlier = ps.pending.get(event.seq) if in_graph else None
        base = earlier.used if earlier is not None else 0
        planned = self._plan(proc, func, event, staging_size, base, not in_graph, extra)
        if planned is None:
            return None
        if earlier is not None:
            earlier.copies.extend(planned.copies)
            earlier.entries.extend(planned.entries)
            earlier.used = planned.used
        else:
            ps.pending[event.seq] = planned
        return planned

    def _plan(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent, staging_size: int,
              base: int, stream: bool, extra: Sequence[Rule]) -> PlannedLaunch | None:
        """Buffers are placed whole in the staging area (from `base`) while they fit; the rest
        are streamed through what is left of it in pieces, each handed over before the
        next, where `stream` allows."""
        ps = self.state.proc(proc.pid)
        fr = ps.rules.get(func.id)
        taken = [*(self.selection.taken(ps, fr, event, event.where(proc)) if fr is not None
                   else ()), *extra]
        if not taken or self.state.stopped:
            return None
        ctx = LaunchContext(proc, func, event)
        if event.raw_args is None:
            for rule in taken:
                self.failures.error(ctx, None, "before", rule, NO_LAYOUT)
            return None
        args, values = self._arguments(ps, func, event.raw_args, event)
        copies: list[PlannedCopy] = []
        capture: list[PlannedCopy] | None = None
        stems: set[str] = set()
        for rule in taken:
            made = self.rule_copies(ctx, rule, args, values, stems)
            if rule.replay and not event.flags & p.LaunchFlag.GRAPH:
                capture = (capture or []) + made
                for copy in made:
                    copy.record.extra["capture"] = True
            copies.extend(made)
        planned = self.placer.place(copies, staging_size, base, stream)
        if planned is not None:
            planned.ctx, planned.staging_size = ctx, staging_size
            planned.args, planned.values = args, values
            planned.capture, planned.stems = capture, stems
        elif capture is not None:
            self.captures.write(ctx, args, capture, {})
        return planned

    def rule_copies(self, ctx: LaunchContext, rule: Rule, args: list[ArgValue],
                    values: dict[str, Number], stems: set[str]) -> list[PlannedCopy]:
        """The copies (or digests, or scans) one rule takes of one launch's buffers."""
        func, event = ctx.func, ctx.event
        error = self.failures.error
        copies: list[PlannedCopy] = []
        found, untracked = targets(rule, args, event)
        for index in untracked:
            self.notices.untracked(ctx, rule, args[index])
        absent = [] if rule.args == "pointers" else [i for i in rule.args if i >= len(args)]
        if absent:
            self.notices.no_such_args(ctx, rule, absent, len(args))
        elif not found and not untracked:
            self.notices.no_buffer(ctx, rule)
        ps = self.state.proc(ctx.proc.pid)
        fr = ps.rules.get(func.id)
        # Kept for the function's own rules (a rule made for one launch may share the id
        # of one made earlier).
        known = fr.buffers if fr is not None and any(r is rule for r in fr.rules) else None
        phases = [phase for phase in ("before", "after") if phase in rule.when]
        for target in found:
            # What is read does not depend on the phase: found once for both.
            try:
                buffer = self._read(ctx, rule, args, values, target, known)
            except PLAN_ERRORS as err:
                for phase in phases:
                    error(ctx, args[target.index], phase, rule, str(err))
                continue
            plan, extent, tool = buffer
            if plan is None:
                continue
            where = target.where
            sums = sum_format(plan, ctx.func) if tool == p.ToolMode.DIGEST else None
            for phase in phases:
                if tool is None and not self.budget.take(plan.nbytes):
                    error(ctx, args[target.index], phase, rule, f"{self.budget.name} reached")
                    continue
                # A digest or a scan writes no file, so its name takes none from `stems`.
                name = None if tool is not None else stem(ctx, plan.arg, phase, where, stems)
                make = functools.partial(make_record, ctx, plan.arg, phase, plan, None, name,
                                         rule, where, extent)
                copies.append(PlannedCopy(plan, phase, 0, rule, make, tool=tool, at=where,
                                          ctx=ctx, sum_of=sums, extent=extent))
        return copies

    def _read(self, ctx: LaunchContext, rule: Rule, args: list[ArgValue],
              values: dict[str, Number], target: Target, known: KnownBuffers | None) -> Buffer:
        """What `rule` reads of one buffer it takes; raises one of PLAN_ERRORS."""
        index, arg, where, override, tmap = target
        func, event = ctx.func, ctx.event
        if tmap is not None:
            return tensormap_buffer(func, rule, tmap)
        if arg is None:
            raise GeometryError(f"argument {index} has {len(args[index].raw)} bytes, so there "
                                f"is no pointer at byte {where}")
        alloc = event.pointers.get((index, where))
        if alloc is None and override_field(override) is None:
            check_is_pointer(ctx.func, args[index])
        address = arg.value
        traced, next_start = False, None
        ps = self.state.proc(ctx.proc.pid)
        if alloc is not None and isinstance(address, int):
            traced, next_start = True, ps.starts.next_after(address, alloc)
        if known is None or override is not None or not traced:
            return read_of(func, rule, arg, alloc, override, values, next_start)
        # Without an override, what is read follows from the pointer, its allocation and
        # where the next known buffer in it begins: a launch asked about again because some
        # of its tensors moved plans only those.
        key = (id(rule), index, where, address, alloc, next_start)
        buffer = known.get(key)
        if buffer is None:
            buffer = read_of(func, rule, arg, alloc, None, values, next_start)
            ps.keep_buffer(known, key, buffer)
        return buffer

    def _arguments(self, ps: ProcessSnapshots, func: FuncInfo, raw: list[bytes],
                   event: LaunchEvent) -> tuple[list[ArgValue], dict[str, Number]]:
        """The launch's arguments decoded (by the signature its rules keep, else its
        name's) and their values by name; where its pointers point is learnt, and kept plans
        whose guessed extents a new start cuts are made again (replan.py)."""
        fr = ps.rules.get(func.id)
        args = decode_args(fr.signature if fr is not None else parse_signature(func.demangled),
                           raw)
        self.replanner.learnt(ps.guessed, ps.starts.learn(pointer_values(args, event)))
        return args, arg_values(args)

    def reads(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent,
              rule: Rule) -> list[BufferRead]:
        """What `rule` would read of each buffer of this launch, planning no copy: a launch
        checked before anything is done to it (--inject). GeometryError when the driver gave
        no parameter layout."""
        if event.raw_args is None:
            raise GeometryError(NO_LAYOUT)
        args, values = self._arguments(self.state.proc(proc.pid), func, event.raw_args, event)
        ctx = LaunchContext(proc, func, event)
        reads = []
        for target in targets(rule, args, event)[0]:
            alloc = event.pointers.get((target.index, target.where))
            try:
                plan = self._read(ctx, rule, args, values, target, None).plan
            except PLAN_ERRORS as err:
                reads.append(BufferRead(target.index, target.where, None, alloc, str(err)))
                continue
            reads.append(BufferRead(target.index, target.where, plan, alloc, None))
        return reads
