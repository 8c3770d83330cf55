"""Plans the shim may repeat on its own (p.PlanFlag.REPEAT), and the launches made with
them: plain ones come back through the result ring (results.py); one out of the ordinary
(a scan found something, a kernel failed) has its results handed to the route (route.py),
whether the shim reported it (MSG_REPEAT) or the ring's reader found it."""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from cudump.console import warn
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.policy.snapshot.failures import Failures
from cudump.policy.snapshot.planned import (
    HOLD_NOT_SERVED,
    NOT_HELD,
    LaunchContext,
    PlannedCopy,
    PlannedLaunch,
    Repeat,
)
from cudump.policy.snapshot.records import digest_record
from cudump.policy.snapshot.results import FiniteWatch, ResultDrain, event_of
from cudump.policy.snapshot.route import (
    Computed,
    Failed,
    Outcome,
    ResultRoute,
    copy_failure,
    tool_failure,
)
from cudump.policy.snapshot.state import SnapshotState
from cudump.policy.snapshot.templates import RepeatCopy, RepeatTemplate
from cudump.rundir.wheres import set_where
from cudump.wire import protocol as p
from cudump.wire.shm import SharedFile


def repeat_keys(event: LaunchEvent) -> tuple[tuple[int, int], ...]:
    """Byte ranges of the launch's parameters (one after the other) a plan without
    overrides depends on: every pointer word it found. Scalars are not among them: without
    overrides no extent or type comes from a value, so an optimizer's step count or a
    dropout seed may change from launch to launch. Every tensor map's 128 bytes are keys
    too."""
    assert event.raw_args is not None
    starts = [0]
    for raw in event.raw_args:
        starts.append(starts[-1] + len(raw))
    keys = {(starts[i] + where, 8) for i, where in event.pointers
            if i < len(event.raw_args) and where + 8 <= len(event.raw_args[i])}
    # A tensor map's bytes say its buffer: a map made anew (another address, another
    # shape) is another plan.
    keys |= {(starts[i] + where, p.TMAP_BYTES) for i, where in event.tensormaps
             if i < len(event.raw_args) and where + p.TMAP_BYTES <= len(event.raw_args[i])}
    ordered = tuple(sorted(keys))
    return ordered if len(ordered) <= p.MAX_KEYS else ()


class Repeater:
    """Numbers and keeps repeatable plans, and drains every process's result ring."""

    def __init__(self, state: SnapshotState, failures: Failures, route: ResultRoute,
                 finite: FiniteWatch | None = None,
                 repeating: Callable[[], None] = lambda: None) -> None:
        self.state = state
        self.repeating = repeating      # launches made with kept plans (replan.py)
        self.failures = failures
        self.route = route
        self.results = ResultDrain(state.manifest.append_digests, self._unusual, self._count,
                                   self._made_as_planned, finite)

    def attach(self, proc: ProcessState, shared: SharedFile) -> None:
        """A new process: its result ring is drained from now on."""
        self.results.add(proc, shared, self.state.proc(proc.pid).templates)

    def repeat_id(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent,
                  planned: PlannedLaunch | None, failures_before: int) -> Repeat | None:
        """Whether the shim may repeat this launch's plan on its own (p.PlanFlag.REPEAT) for
        launches with the same parameter bytes: digests and scans only, every rule of the
        function taking every launch, nothing that failed while planning it (on this
        thread: `failures_before` is thread_failures() before the plan) or streams.
        Without overrides the plan depends only on the pointer words: those are its keys,
        and a seed or step count elsewhere may change."""
        ps = self.state.proc(proc.pid)
        fr = ps.rules.get(func.id)
        unusual = (p.LaunchFlag.GRAPH | p.LaunchFlag.STOP_ONLY | p.LaunchFlag.INTERRUPTED
                   | p.LaunchFlag.UNSAFE_GRAPH)
        if (fr is None or event.flags & unusual or event.raw_args is None or self.state.stopped
                or self.failures.thread_failures() != failures_before
                or not all(r.takes_every_launch for r in fr.rules)):
            return None
        copies = planned.copies if planned is not None else []
        if (len(copies) > p.MAX_REPEAT or any(c.tool is None for c in copies)
                or (planned is not None and len(planned.entries) != len(copies))):
            return None
        digest = p.ToolMode.DIGEST
        made = [RepeatCopy(c.tool, c.phase,  # type: ignore[arg-type]
                           functools.partial(digest_record, c.make_record, c.plan, c.sum_of)
                           if c.tool == digest else None, c.sum_of)
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
        ps.guessed.keep(copies)
        # The shim keeps a few plans per function; the controller keeps twice as many.
        kept_ids = ps.template_ids.setdefault(func.id, collections.deque())
        kept_ids.append(plan_id)
        if len(kept_ids) > 2 * p.REPEAT_WAYS:
            ps.templates.pop(kept_ids.popleft(), None)
        if any(r.overrides for r in fr.rules):
            return Repeat(plan_id)
        return Repeat(plan_id, repeat_keys(event))

    def repeat_report(self, proc: ProcessState, slot: np.void) -> PlannedLaunch | None:
        """A launch made with a repeated plan that the shim reported (MSG_REPEAT: a scan
        found something, or a kernel failed; its stream held, or its thread waiting): its
        records and findings, and copies to follow it, if any."""
        return self._report(proc, slot, None)

    def _unusual(self, proc: ProcessState, template: RepeatTemplate, slot: np.void) -> None:
        """The same, found by the ring's reader: the shim did not report it in time."""
        # Too late for copies to follow it: the launch's stream went on. The snapshots a
        # NaN/Inf producer would have had are recorded as not taken, with the reason.
        late = HOLD_NOT_SERVED if int(slot["gate"]) == p.Gate.RELEASED else NOT_HELD
        try:
            self._report(proc, slot, late)
        except Exception as err:
            warn(f"results of launch {int(slot['event']['seq'])} are lost: {err}")

    def _report(self, proc: ProcessState, slot: np.void, late: str | None
                ) -> PlannedLaunch | None:
        """A repeated launch's results, from its slot, handed to the route (`late`: why no
        copies may follow it)."""
        asked = bool(int(slot["flags"]) & p.ResultFlag.ASKED)
        if asked:   # made with its plan: its ordinary copies are not reported
            self._made_as_planned(proc, int(slot["event"]["seq"]))
        template = self.state.proc(proc.pid).templates.get(int(slot["plan"]))
        if template is None:
            return None
        if not asked:   # an asked launch is counted as asked
            with self.state.lock:
                self.state.tally.repeated += 1
        first, func = template.first, template.func
        if first is None:
            return None
        assert first.ctx is not None
        event = event_of(slot)
        ctx = LaunchContext(proc, func, replace(event, raw_args=first.ctx.event.raw_args,
                                                pointers=first.ctx.event.pointers,
                                                tensormaps=first.ctx.event.tensormaps))
        results = slot["results"]
        data = results.tobytes()
        launch_rc = int(slot["launch_rc"])
        copies: list[PlannedCopy] = []
        outcomes: list[Outcome] = []
        for k, copy in enumerate(first.copies):
            # Made afresh: the first launch's own record holds its results.
            record = copy.make_record()
            record.launch, record.occurrence = event.seq, event.occurrence
            record.grid, record.block = list(event.grid), list(event.block)
            record.stream = event.stream_hex
            record.device = event.device if event.device >= 0 else None
            set_where(record.extra, event.where(proc))
            placed = copy.with_record(record)
            placed.offset = k * p.TOOL_RESULT
            copies.append(placed)
            rc = int(results[k]["rc"])
            failure = copy_failure(rc, launch_rc, 0, placed.failed)
            outcomes.append(Computed(placed, data[placed.offset:placed.offset + p.TOOL_RESULT])
                            if failure is None else
                            Failed(placed, tool_failure(placed, rc, failure)))
        launch = PlannedLaunch(copies, [(c, None) for c in copies], ctx=ctx,
                               staging_size=first.staging_size, args=first.args,
                               values=first.values)
        return self.route.deliver(launch, outcomes, self.results.catch_up, late)

    def _made_as_planned(self, proc: ProcessState, seq: int) -> None:
        """The launch asked about was made with its plan's repeatable form: its results came
        through the ring, and its ordinary copies will not be reported (no Kind.END)."""
        self.state.proc(proc.pid).pending.pop(seq, None)

    def _count(self, launches: int, digests: int) -> None:
        with self.state.lock:
            self.state.tally.repeated += launches
            self.state.tally.digests += digests
        if launches:
            self.repeating()

    def close(self) -> None:
        self.results.close()
