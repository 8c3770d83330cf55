"""Plans the shim repeats on its own, and the result ring their results come back through.

A plan of digests and scans only, taken by rules that want every launch, is the same for
every launch with the same parameter bytes. The controller numbers it and marks it
PlanFlag.REPEAT; the shim keeps it and runs it for later launches without asking, and
cudump's kernel writes their results into the process's result ring (protocol.h). This
module keeps the plans (RepeatTemplate) and drains the rings on one thread, in batches:
a plan's digest records become one template line, written once, and each launch made with
it one short line of its own fields and digests (manifest.py), so that every buffer of
every kernel of a training loop can be digested without the controller falling behind.
Anything out of the ordinary (a failed kernel, a scan that found something) goes the
ordinary way, through collect.Collector.collect (repeat.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from cudump.console import warn
from cudump.controller.process import FuncInfo, LaunchEvent, ProcessState
from cudump.policy.digest import digest_hex, sum_json
from cudump.policy.snapshot.planned import PlannedLaunch
from cudump.rundir.manifest import SnapshotRecord, group_line, template_line
from cudump.wire import protocol as p
from cudump.wire.rings import RingDrain, layout_dtype, leading, window
from cudump.wire.shm import SharedFile

BATCH = 4096
# How long the rings are waited on at the end of a run for results still on the GPU.
GRACE_SECONDS = 2.0

SLOT = np.dtype({
    "names": ["ready", "plan", "ncopies", "launch_rc", "flags", "gate", "event", "results"],
    "formats": ["<u8", "<u4", "<u4", "<i4", "<u4", "<u4", layout_dtype(p.LAUNCH),
                (layout_dtype(p.TOOL_OUT), (p.MAX_REPEAT,))],
    "offsets": [p.RESULT_SLOT.offsets()[f] for f in
                ("ready", "plan", "ncopies", "launch_rc", "flags", "gate", "event.seq",
                 "results[0].words")],
    "itemsize": p.RESULT_SLOT_SIZE,
})

@dataclass
class RepeatCopy:
    """One copy of a repeated plan: what it computes, when, and for a digest how the record
    of the first launch (its digest fields in) that the plan's template line is made from
    is made: once, when the line is written."""

    tool: p.ToolMode
    phase: str
    make_record: Callable[[], SnapshotRecord] | None = None
    sum_of: p.ToolMode | None = None    # a digest's sum of |x|: the element format
    made: SnapshotRecord | None = field(default=None, repr=False)

    @property
    def record(self) -> SnapshotRecord | None:
        if self.made is None and self.make_record is not None:
            self.made = self.make_record()
        return self.made


@dataclass
class RepeatTemplate:
    copies: list[RepeatCopy]
    func: FuncInfo
    first: PlannedLaunch | None   # the first launch's plan, None if no copies
    written: bool = False   # its template line is in the manifest

    def __post_init__(self) -> None:
        self.digests: list[int] = []
        self.sums: list[int] = []         # the digests with a sum of |x|
        self.after_scans: list[int] = []  # a launch is plain when these found nothing
        for k, c in enumerate(self.copies):
            if c.tool == p.ToolMode.DIGEST:
                self.digests.append(k)
                if c.sum_of is not None:
                    self.sums.append(k)
            elif c.phase == "after":
                self.after_scans.append(k)

    def template_line(self, key: str) -> str:
        records = [self.copies[k].record for k in self.digests]
        assert all(r is not None for r in records)
        return template_line(key, records)  # type: ignore[arg-type]


def slot_of(payload: bytes) -> np.void:
    """A result ring slot sent whole (MSG_REPEAT)."""
    if len(payload) != p.RESULT_SLOT_SIZE:
        raise p.ProtocolError("a repeated launch's report of the wrong size")
    return np.frombuffer(payload, dtype=SLOT)[0]


def event_of(slot: np.void) -> LaunchEvent:
    """The launch a result ring slot (or a MSG_REPEAT) describes."""
    ev = slot["event"]
    return LaunchEvent(
        seq=int(ev["seq"]), occurrence=int(ev["occurrence"]), func_id=int(ev["id"]),
        device=int(ev["device"]), grid=tuple(int(v) for v in ev["grid"]),  # type: ignore[arg-type]
        block=tuple(int(v) for v in ev["block"]),  # type: ignore[arg-type]
        smem=int(ev["smem"]), stream=int(ev["stream"]), tid=int(ev["tid"]),
        api=p.api_name(int(ev["api"])), flags=int(ev["flags"]), rc=0)


# (process, template, slot) -> handled the ordinary way (repeat.Repeater)
Unusual = Callable[[ProcessState, RepeatTemplate, np.void], None]
Asked = Callable[[ProcessState, int], None]


@dataclass
class FiniteWatch:
    """Told of plain launches (every scan after them found their buffers finite) where
    `watching(pid)`: `finite(pid, template, launch)`, for the plan's latest such launch of
    each batch (nan.NanWatch: NaN/Inf that was there is gone)."""

    watching: Callable[[int], bool]
    finite: Callable[[int, RepeatTemplate, int], None]


@dataclass
class _Taken:
    """The fields of a batch of ring slots the drain reads, copied out of the ring."""

    event: np.ndarray
    plan: np.ndarray
    flags: np.ndarray
    launch_rc: np.ndarray
    results: np.ndarray     # (slots, the widest plan's results)


@dataclass
class _Ring:
    proc: ProcessState
    shared: SharedFile
    slots: np.ndarray
    templates: dict[int, RepeatTemplate]
    tail: int = 0
    # Held while its slots are taken: by the drain thread, or by a thread catching up on
    # them (catch_up).
    lock: threading.Lock = field(default_factory=threading.Lock)


class ResultDrain(RingDrain[_Ring]):
    """Consumes every process's result ring on one thread, in batches."""

    def __init__(self, write_lines: Callable[[list[str]], None], unusual: Unusual,
                 counted: Callable[[int, int], None], asked: Asked,
                 finite: FiniteWatch | None = None) -> None:
        self._write_lines = write_lines
        self._finite = finite
        self._inside = threading.local()   # .ring: the ring this thread is taking slots of
        self._unusual = unusual
        self._counted = counted
        self._asked = asked
        self._failed = False
        super().__init__("cudump-results")

    def add(self, proc: ProcessState, shared: SharedFile,
            templates: dict[int, RepeatTemplate]) -> None:
        if shared.results_slots:
            self._add(_Ring(proc, shared, np.frombuffer(shared.results_bytes(), dtype=SLOT),
                            templates))

    def ahead(self) -> tuple[int, int]:
        """Every process's scans made ahead (shim/ahead.h): used, and void."""
        rings = list(self._each())
        return (sum(r.shared.ahead_used for r in rings), sum(r.shared.ahead_void for r in rings))

    def catch_up(self, pid: int) -> None:
        """Takes what the process's ring holds now, on this thread: a NaN/Inf report about
        to say which launch left an input non-finite first learns of the launches before it
        that found their buffers finite. Nothing, where this thread is taking the ring's
        slots already (the report is one of them: those before it are taken)."""
        for ring in self._each():
            if ring.proc.pid == pid and getattr(self._inside, "ring", None) is not ring:
                self._drain(ring)

    def _drain(self, ring: _Ring) -> int:
        with ring.lock:
            self._inside.ring = ring
            try:
                return self._take(ring)
            finally:
                self._inside.ring = None

    def _take(self, ring: _Ring) -> int:
        """Takes the slots that are ready, in order. A slot is 16 KB, mostly results that
        no plan uses: only the fields read and the results in use are copied, and only of
        the slots the shim has finished writing, so that a window of launches still on
        the GPU costs a few bytes each per look."""
        positions, index = window(len(ring.slots), ring.tail, ring.shared.results_head, BATCH)
        tag = positions + np.uint64(1)
        count = leading(ring.slots["ready"][index] == tag)
        if count == 0:
            return 0
        index, tag = index[:count], tag[:count]
        ncopies = ring.slots["ncopies"][index]
        width = min(int(ncopies.max()), p.MAX_REPEAT)
        results = ring.slots["results"][:, :width][index]
        # Every result in use is done (its kernel wrote it) or failed (none will come).
        used = np.arange(width)[None, :] < ncopies[:, None]
        settled = (~used | (results["rc"] != 0) | (results["done"] == tag[:, None])).all(axis=1)
        # A launch whose stream is held for the shim (a scan found something) is the
        # shim's to report; it is passed only once the shim has opened the gate.
        gate = ring.slots["gate"][index]
        settled &= (gate != p.Gate.HELD) & (gate != p.Gate.SERVING)
        count = leading(settled)
        if count == 0:
            return 0
        index = index[:count]
        # Out of the ring before it is reused: the fields read, and whole slots for the
        # launches that go the ordinary way.
        taken = _Taken(ring.slots["event"][index], ring.slots["plan"][index],
                       ring.slots["flags"][index], ring.slots["launch_rc"][index],
                       results[:count])
        lines, plain_launches, digests = self._handle(ring, taken, index)
        ring.tail += count
        ring.shared.set_results_tail(ring.tail)
        if lines and not self._failed:
            try:
                self._write_lines(lines)
            except OSError as err:
                self._failed = True   # once: the program carries on, the manifest stays whole
                warn(f"digests are no longer written: {err.strerror or err}")
        self._counted(plain_launches, digests if not self._failed else 0)
        return count

    def _handle(self, ring: _Ring, taken: _Taken, index: np.ndarray
                ) -> tuple[list[str], int, int]:
        """Each plain launch (it and every tool ran, no scan found anything) becomes one
        manifest line if it has digests; anything else goes the ordinary way. Returns the
        lines, the plain launches and their digests."""
        lines: list[str] = []
        plain_launches = digests = 0
        event = taken.event
        seqs, occurrences = event["seq"].tolist(), event["occurrence"].tolist()
        grids, blocks = event["grid"].tolist(), event["block"].tolist()
        streams, devices = event["stream"].tolist(), event["device"].tolist()
        plans, flags, launch_rcs = (taken.plan.tolist(), taken.flags.tolist(),
                                    taken.launch_rc.tolist())
        codes = taken.results["rc"].tolist()
        words = taken.results["words"][:, :, 0].tolist()
        second = taken.results["words"][:, :, 1]   # digests' sums of |x|, as float64 bits
        pid = ring.proc.pid
        watch = self._finite is not None and self._finite.watching(pid)
        # plan -> (the plan, its latest plain launch with scans after it)
        finite: dict[int, tuple[RepeatTemplate, int]] = {}
        for i, plan in enumerate(plans):
            if flags[i] & p.ResultFlag.TAKEN:
                continue   # reported with MSG_REPEAT
            asked = bool(flags[i] & p.ResultFlag.ASKED)
            if asked:
                self._asked(ring.proc, seqs[i])   # its plan's first launch: counted as asked
            template = ring.templates.get(plan)
            if template is None:
                continue
            rcs, found = codes[i], words[i]
            if (launch_rcs[i] != 0 or any(rcs[k] for k in range(len(template.copies)))
                    or any(found[k] for k in template.after_scans)):
                self._tell_finite(pid, finite)   # what came before it, first
                self._unusual(ring.proc, template, ring.slots[index[i]].copy())
                continue
            plain_launches += not asked
            if watch and template.after_scans:
                finite[plan] = (template, seqs[i])
            if not template.digests:
                continue
            key = f"{pid}.{plan}"
            if not template.written:
                lines.append(template.template_line(key))
                template.written = True
            lines.append(group_line(key, seqs[i], occurrences[i], grids[i], blocks[i],
                                    streams[i], devices[i],
                                    [digest_hex(found[k]) for k in template.digests],
                                    self._sums(template, second[i])))
            digests += len(template.digests)
        self._tell_finite(pid, finite)
        return lines, plain_launches, digests

    @staticmethod
    def _sums(template: RepeatTemplate, second: np.ndarray) -> list[float | str | None] | None:
        """A launch's sums of |x|, in the template's digest order (None for a digest without
        one); None where none of its digests has one."""
        if not template.sums:
            return None
        values = second.view(np.float64)
        return [sum_json(float(values[k])) if k in template.sums else None
                for k in template.digests]

    def _tell_finite(self, pid: int, finite: dict[int, tuple[RepeatTemplate, int]]) -> None:
        if self._finite is not None:
            for template, seq in finite.values():
                self._finite.finite(pid, template, seq)
        finite.clear()

    def _skip_ahead(self, ring: _Ring) -> int:
        """At the end, a slot the shim reserved for scans ahead (shim/ahead.h: marked taken
        from the start) that no launch came to use nor void: the process ended first."""
        with ring.lock:
            if ring.tail >= ring.shared.results_head:
                return 0
            slot = ring.slots[ring.tail & (len(ring.slots) - 1)]
            if int(slot["ready"]) == ring.tail + 1 or not int(slot["flags"]) & p.ResultFlag.TAKEN:
                return 0
            ring.tail += 1
            ring.shared.set_results_tail(ring.tail)
            return 1

    def close(self) -> None:
        """Takes what is left in every ring (waiting a little for the GPU), then stops."""
        self._stop_thread()
        deadline = time.monotonic() + GRACE_SECONDS
        while True:
            moved = self.drain_once() + sum(self._skip_ahead(r) for r in self._each())
            left = sum(r.shared.results_head - r.tail for r in self._each())
            if not left:
                return
            if not moved:
                if time.monotonic() > deadline:
                    warn(f"{left} launches' digests or scans never came back from the GPU "
                         "(the process ended, or its context failed, before they ran)")
                    return
                time.sleep(0.01)
