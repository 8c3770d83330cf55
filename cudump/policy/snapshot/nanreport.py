"""The one place a NaN/Inf producer is reported: the warning line, the manifest record, the
summary's counts, and the finding kept for --break-on-nan.

A launch's scans reach it through one route (route.py: every copy strategy hands its
results there; nan.NanWatch weighs the scans); a memset whose pattern is NaN/Inf reaches it
from the host-write ring (hostwrites.HostWriteWatch). Nothing else says `cudump: NaN/Inf:`
(tests/test_nan_route.py keeps it so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from cudump.console import say
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.policy.snapshot.layers_hint import HINT, wants_layers_hint
from cudump.policy.snapshot.origin import PRODUCED, HostWrite, Origin
from cudump.policy.snapshot.planned import PlannedCopy, PlannedLaunch
from cudump.policy.snapshot.state import SnapshotState
from cudump.policy.snapshot.windows import WindowReport
from cudump.rundir.manifest import SnapshotRecord
from cudump.rundir.summary import NanLaunch
from cudump.rundir.wheres import record_where
from cudump.wire.digest import SCAN_ELEMENT_SIZE, Scan

# Every report's first words.
PREFIX = "cudump: NaN/Inf: "


class NanFound(NamedTuple):
    """A launch found to leave NaN/Inf, for --break-on-nan."""

    func: FuncInfo
    event: LaunchEvent
    reason: str


class NanReporter:
    """Reports NaN/Inf producers and keeps the launches --break-on-nan stops at."""

    def __init__(self, state: SnapshotState) -> None:
        self.state = state
        # (pid, launch) -> the launch and what it did, for --break-on-nan (taken by the session)
        self.found: dict[tuple[int, int], NanFound] = {}
        # (pid, ring position) of the host writes counted as producers (once each)
        self.counted: set[tuple[int, int]] = set()
        self.hinted = False     # the --layers hint is said once a run
        # pid -> what ends it once an exact scan confirms a NaN/Inf (--watch-nan-then stop)
        self.ending: dict[int, Callable[[], None]] = {}
        self.ended: set[int] = set()     # and those ended so

    def launch(self, pending: PlannedLaunch, copy: PlannedCopy, after: Scan,
               origin: Origin) -> None:
        """A buffer the launch left NaN/Inf in where there was none before (`after`: what the
        scan after it found), and where that came from."""
        record = copy.record
        # In the scan's elements: a buffer whose type comes from the kernel's name is
        # planned as bytes.
        size = SCAN_ELEMENT_SIZE.get(copy.tool) if copy.tool is not None else None
        elements = copy.plan.width_bytes * copy.plan.height // (
            size or max(1, np.dtype(copy.plan.dtype).itemsize))
        record.extra.update(nonfinite=after.count, first_nonfinite=after.first,
                            nonfinite_before=0, elements=elements)
        record.extra["nan_producer"] = True
        record.extra.update(origin.fields())
        state = self.state
        with state.lock:
            state.append_locked(record)
            state.tally.count_nan(record, origin)
            for write in origin.hosts:   # the host wrote what it read: the producer
                self._count_host_locked(record.pid, record.rank, write)
        inside = f" (the pointer at byte {record.extra['offset']})" \
            if record.extra.get("offset") else ""
        rank = f", rank {record.rank}" if record.rank is not None else ""
        extra = record.extra
        which = (f"graph {extra['graph']}, replay {extra['replay']}, node {extra['node']}"
                 if "graph" in extra else f"occurrence {record.occurrence}")
        # The launch in the program's terms: 'in layer3.0.conv1 (forward, step 2) at
        # train.py:57' (the record's where fields, make_record's).
        where = record_where(extra)
        scoped = f" {where.text()}" if where else ""
        launch = (f"{PREFIX}launch {record.launch} of {record.kernel}{scoped} ({which}, "
                  f"process {record.pid}{rank})")
        if origin.kind == PRODUCED:
            say(f"{launch} produced {after.count} of {elements} non-finite elements in arg "
                f"{record.arg}{inside}, the first at index {after.first}; "
                f"{origin.phrase()}")
        else:
            say(f"{launch} left {after.count} of {elements} elements of arg {record.arg}"
                f"{inside} non-finite where there were none, the first at index "
                f"{after.first}; {origin.phrase()}")
        if state.on_nan is not None:
            state.on_nan(record.pid, record.rank, record.launch, record.kernel,
                         f"NaN/Inf in arg {record.arg}, {after.count} of {elements} elements"
                         f"{scoped}")
        # A graph launch's kernel nodes share one plan: the producer is the copy's node.
        # (A repeated plan's copies keep the launch they were first planned for.)
        ctx = copy.ctx if copy.ctx is not None and copy.ctx.in_graph else pending.ctx
        # (Where the program's own scopes say nothing: its collectives are no layer.)
        if origin.kind == PRODUCED and not where.scoped and not self.hinted \
                and ctx is not None and wants_layers_hint(ctx.proc):
            self.hinted = True
            say(HINT)
        if ctx is not None and origin.is_root:
            # --break-on-nan stops where NaN/Inf begins, not where it is carried on.
            with state.lock:
                self.found.setdefault((record.pid, record.launch), NanFound(
                    ctx.func, ctx.event,
                    f"NaN/Inf in arg {record.arg}{inside}: {after.count} of {elements} "
                    f"elements, the first at index {after.first}"))

    def window(self, proc: ProcessState, report: WindowReport) -> None:
        """What a window of launches found (--watch-nan): each buffer newly non-finite, a
        warning naming its producer exactly or bounding it to the window's launches that
        touched it, and a manifest record."""
        rank = f", rank {proc.rank}" if proc.rank is not None else ""
        for found in report.launches_found:
            func = proc.funcs.get(found.func)
            kernel = func.demangled if func is not None else f"function {found.func}"
            mangled = func.mangled if func is not None else ""
            record = SnapshotRecord(
                kernel=kernel, mangled=mangled, launch=found.last_touch, occurrence=0,
                pid=proc.pid, grid=[], block=[], stream="", arg=-1, type=None,
                phase="after", address=hex(found.address), dtype=found.dtype, shape=None,
                file=None, rank=proc.rank)
            named = report.named(found)
            # "sole": the window's only launch that touched it, unconfirmed (windows.py)
            record.extra.update(
                nan_window=report.window, window_launches=[report.first, report.last],
                producer="sole" if named else "carried" if found.exact else "bounded",
                touched_by=[found.first_touch, found.last_touch], touches=found.touches,
                nonfinite=found.count, first_nonfinite=found.first_index,
                elements=found.elements, nan_producer=named)
            if report.graph:
                record.extra.update(graph=report.graph, nodes=[found.first_node, found.node],
                                    replays=report.replays)
            made = NanLaunch(proc.pid, found.last_touch, kernel, proc.rank)
            with self.state.lock:
                self.state.append_locked(record)
                self.state.tally.count_window(made)
            who = report.who(found, kernel)
            say(f"{PREFIX}{who} (process {proc.pid}{rank}) left {found.count} of "
                f"{found.elements} elements at 0x{found.address:x} non-finite, the first at "
                f"index {found.first_index}; {report.bound(found)}")
        if report.exact_next and report.launches_found:
            say(f"{PREFIX}process {proc.pid}{rank} now scans every launch exactly: a NaN/Inf "
                f"that comes again is named at its launch")

    def end_when_confirmed(self, pid: int, end: Callable[[], None]) -> bool:
        """--watch-nan-then stop: `end` is called once an exact scan of the process (or its
        memset's pattern) confirms a NaN/Inf, never on a window's finding alone. Returns
        whether the process was not waiting for that already."""
        with self.state.lock:
            if pid in self.ending or pid in self.ended:
                return False
            self.ending[pid] = end
            return True

    def confirmed(self, pid: int) -> None:
        """An exact scan of the process saw NaN/Inf: a stop waiting for that is made."""
        with self.state.lock:
            end = self.ending.pop(pid, None)
            if end is not None:
                self.ended.add(pid)
        if end is not None:
            end()

    def memset(self, proc: ProcessState, write: HostWrite, pattern: str) -> None:
        """A memset of the program's whose pattern is NaN/Inf for its element size: a
        producer at once."""
        rank = f", rank {proc.rank}" if proc.rank is not None else ""
        many = "" if write.elements == 1 else "s"
        say(f"{PREFIX}{write.api} before launch {write.before} (process "
            f"{proc.pid}{rank}) wrote {write.elements} element{many} of "
            f"0x{write.value:0{2 * write.elem}x} ({pattern}) at 0x{write.address:x}")
        with self.state.lock:
            self._count_host_locked(proc.pid, proc.rank, write)
        if self.state.on_nan is not None:
            self.state.on_nan(proc.pid, proc.rank, None, None,
                              f"NaN/Inf written by {write.api} before launch {write.before}")
        self.confirmed(proc.pid)

    def _count_host_locked(self, pid: int, rank: int | None, write: HostWrite) -> None:
        """A host write counted as a producer, once however many reports name it (the
        state's lock held)."""
        if (pid, write.position) not in self.counted:
            self.counted.add((pid, write.position))
            self.state.tally.count_host(pid, rank, write)

    def take(self, pid: int, launch: int) -> NanFound | None:
        """The NaN/Inf this launch was found to produce, if any (once)."""
        with self.state.lock:
            return self.found.pop((pid, launch), None)
