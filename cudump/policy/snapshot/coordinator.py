"""`Snapshots`: the snapshot policy of one run as the session sees it. It builds the parts
(select, plan, place, collect, repeat, nan, route, capture, writer) over one shared state,
each after what it needs and given it when made, and hands each call to the part that
does it."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from cudump.kernels.geometry import Allocation
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.policy.rules import Rule
from cudump.policy.snapshot.capture import Captures, ImageStore
from cudump.policy.snapshot.collect import Collector
from cudump.policy.snapshot.failures import Failures, Notices
from cudump.policy.snapshot.hostwrites import HostWriteDrain, HostWriteWatch
from cudump.policy.snapshot.nan import NanWatch
from cudump.policy.snapshot.nanreport import NanFound, NanReporter
from cudump.policy.snapshot.origin import Makers
from cudump.policy.snapshot.place import Placer
from cudump.policy.snapshot.plan import BufferRead, Planner
from cudump.policy.snapshot.planned import PlannedLaunch, ReadStaging, Repeat
from cudump.policy.snapshot.repeat import Repeater
from cudump.policy.snapshot.replan import Replanner
from cudump.policy.snapshot.results import FiniteWatch
from cudump.policy.snapshot.route import ResultRoute
from cudump.policy.snapshot.select import Selection
from cudump.policy.snapshot.state import Budget, SnapshotState
from cudump.policy.snapshot.writer import Release, SnapshotWriter
from cudump.rundir.manifest import ManifestWriter
from cudump.rundir.summary import RunSummary
from cudump.wire import protocol as p
from cudump.wire.shm import SharedFile


def _no_host_writes(pid: int) -> None:
    """No host-write ring to take (no NaN/Inf scans)."""


class Snapshots:
    """Which launches, which copies, and writing them, for one run."""

    def __init__(self, rules: list[Rule], run_dir: Path, max_bytes: int | None,
                 manifest: ManifestWriter, budget_is_default: bool = False,
                 bump: Callable[[], int] | None = None) -> None:
        self.state = state = SnapshotState(run_dir, manifest)
        # `bump`: the control generation (every process drops its kept plans)
        self.replanner = Replanner(bump, state.guessed_extents)
        self.selection = Selection(state, rules)
        self.failures = Failures(state)
        self.captures = Captures(run_dir)
        self.writer = SnapshotWriter(state, self.failures)
        placer = Placer(run_dir, self.failures)
        self.planner = Planner(state, self.selection, Budget(state, max_bytes, budget_is_default),
                               self.failures, Notices(state), placer, self.captures,
                               self.replanner)
        # The NaN/Inf watch, over what the host wrote where (under NaN/Inf scans, the
        # program's host-to-device copies and memsets too), reporting through one place.
        makers = Makers()
        self.report = NanReporter(state)
        self.hosts = (HostWriteDrain(HostWriteWatch(makers, self.report).took)
                      if any(r.is_scan for r in rules) else None)
        self.nan = NanWatch(state, self.planner.rule_copies, placer.place, makers, self.report,
                            self.hosts.catch_up if self.hosts is not None else _no_host_writes)
        # Every strategy's results take one route: plain and behind (collector), repeated
        # (repeater, whose result ring the others catch up on before weighing scans).
        route = ResultRoute(state, self.failures, placer, self.writer, self.nan)
        self.repeater = Repeater(state, self.failures, route,
                                 FiniteWatch(self.nan.known, self.nan.plain),
                                 self.replanner.repeating)
        self.collector = Collector(state, placer, self.captures, route,
                                   self.repeater.results.catch_up)

    @property
    def records_host_writes(self) -> bool:
        """Whether each process is asked for its host writes (a host-write ring)."""
        return self.hosts is not None

    @property
    def images(self) -> ImageStore:
        """The module images the shim sends for launches captured for replay."""
        return self.captures.images

    def attach(self, proc: ProcessState, shared: SharedFile) -> None:
        """A new process: its result ring (and host-write ring) are drained from now on."""
        self.repeater.attach(proc, shared)
        if self.hosts is not None:
            self.hosts.add(proc, shared)

    def freed(self, proc: ProcessState, alloc: Allocation) -> None:
        """An allocation of the process is gone: buffers are no longer cut where its own
        began (extents.py), and what turned it NaN/Inf is forgotten."""
        self.state.proc(proc.pid).starts.forget(alloc)
        self.nan.freed(proc.pid, alloc.base, alloc.size)

    # -- decisions ----------------------------------------------------------------

    def wants(self, proc: ProcessState, func: FuncInfo) -> bool:
        return self.selection.wants(proc, func)

    def selectors(self, proc: ProcessState, func: FuncInfo) -> tuple[list[p.Selector], bool]:
        return self.selection.selectors(proc, func)

    def captures_launches(self, proc: ProcessState, func: FuncInfo) -> bool:
        return self.selection.captures_launches(proc, func)

    def thread_failures(self) -> int:
        """Failures recorded so far by the calling thread."""
        return self.failures.thread_failures()

    def plan(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent,
             staging_size: int, extra: Sequence[Rule] = ()) -> PlannedLaunch | None:
        return self.planner.plan(proc, func, event, staging_size, extra)

    def reads(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent,
              rule: Rule) -> list[BufferRead]:
        """What `rule` would read of each buffer of the launch, planning nothing."""
        return self.planner.reads(proc, func, event, rule)

    def repeat_id(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent,
                  planned: PlannedLaunch | None, failures_before: int) -> Repeat | None:
        return self.repeater.repeat_id(proc, func, event, planned, failures_before)

    # -- results ------------------------------------------------------------------

    def piece(self, proc: ProcessState, seq: int, index: int, rc: int,
              read: ReadStaging) -> None:
        self.collector.piece(proc, seq, index, rc, read)

    def collect(self, proc: ProcessState, seq: int, launch_rc: int, sync_rc: int,
                codes: list[int], read: ReadStaging) -> PlannedLaunch | None:
        return self.collector.collect(proc, seq, launch_rc, sync_rc, codes, read)

    def collect_behind(self, proc: ProcessState, seq: int, end: dict[str, int],
                       codes: list[int], where: list[int], shared: SharedFile) -> None:
        """Launch `seq`'s copies lie in `shared`'s write-behind area (`where`): written from
        there; then, on the writer thread after them whatever became of them, the shim is
        told that their bytes are free."""
        number = end["behind"]
        try:
            self.collector.collect_behind(proc, seq, end["launch_rc"], end["sync_rc"], codes,
                                          where, shared.behind)
        finally:
            self.writer.put(Release(lambda: shared.set_behind_done(number)))

    def repeat_report(self, proc: ProcessState, slot: np.void) -> PlannedLaunch | None:
        return self.repeater.repeat_report(proc, slot)

    def take_nan(self, pid: int, launch: int) -> NanFound | None:
        """The NaN/Inf this launch was found to produce, if any (once)."""
        return self.report.take(pid, launch)

    def fill(self, summary: RunSummary) -> None:
        tally = self.state.tally
        summary.snapshots = tally.written
        summary.snapshot_errors = tally.failed
        summary.snapshot_bytes = tally.bytes_written
        summary.digests = tally.digests
        summary.nan_reports = tally.nan_reports
        summary.nan_producers = tally.nan_producers
        summary.nan_produced = tally.nan_produced
        summary.watch_fallbacks = tally.watch_fallbacks
        summary.graph_nodes_left_out = tally.graph_nodes_left_out
        summary.first_nan_producer = tally.first_producer   # first_nan_rank is its rank
        summary.first_nan_report = tally.first_report
        summary.repeated_launches = tally.repeated
        summary.planned_launches = tally.asked
        summary.planned_kernels = collections.Counter(tally.asked_kernels)
        summary.scans_ahead, summary.scans_ahead_void = self.repeater.results.ahead()
        launcher = self.repeater.results.tool_launches()
        summary.handed_off, summary.handed_back = launcher.handed_off, launcher.handed_back
        summary.launcher_trials, summary.launcher_won = launcher.trials, launcher.won
        summary.tools_waiting = launcher.waiting
        summary.tool_launches = launcher.launches
        summary.graph_replays_watched, summary.graph_replays_instrumented = \
            self.repeater.results.graph_replays()
        summary.replay_captures = self.captures.count
        summary.host_writes = self.hosts.taken if self.hosts is not None else None

    def close(self) -> None:
        self.repeater.close()
        if self.hosts is not None:   # after the results: their reports took what they read
            self.hosts.close()
        self.writer.close()
