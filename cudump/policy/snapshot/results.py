"""Plans the shim repeats on its own, and the result ring their results come back through.

A plan of digests and scans only, taken by rules that want every launch, is the same for
every launch with the same parameter bytes. The controller numbers it and marks it
PlanFlag.REPEAT; the shim keeps it and runs it for later launches without asking, and
cudump's kernel writes their results into the process's result ring (protocol.h). This
module keeps the plans (RepeatTemplate) and drains the rings on one thread, in batches read
with numpy (plan_columns.py): a plan's digest records become one template line, written
once, and the digests of the launches made with it binary records, a batch at a time
(rundir/digest_batches.py), so that every buffer of every kernel of a training loop or a
model's forward can be digested without the controller falling behind.
Anything out of the ordinary (a failed kernel, a scan that found something) has its slot's
results handed to the one route every strategy's results take (repeat.py, route.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from cudump.console import warn
from cudump.launches.process import LaunchEvent, ProcessState
from cudump.policy.snapshot.plan_columns import PlanColumns
from cudump.policy.snapshot.templates import RepeatTemplate
from cudump.rundir import files as runfiles
from cudump.rundir.digest_batches import DIGEST, HAS_SUM, LAUNCH, DigestBatch
from cudump.wire import protocol as p
from cudump.wire.rings import RingDrain, layout_dtype, leading, window
from cudump.wire.shm import SharedFile

BATCH = 4096
# How long the rings are waited on at the end of a run for results still on the GPU.
GRACE_SECONDS = 2.0

_SLOT_OFFSETS = p.RESULT_SLOT.offsets()
SLOT = np.dtype({
    "names": ["ready", "plan", "ncopies", "launch_rc", "flags", "gate", "event", "results"],
    "formats": ["<u8", "<u4", "<u4", "<i4", "<u4", "<u4", layout_dtype(p.LAUNCH),
                (layout_dtype(p.TOOL_OUT), (p.MAX_REPEAT,))],
    "offsets": [_SLOT_OFFSETS[f] for f in
                ("ready", "plan", "ncopies", "launch_rc", "flags", "gate", "event.seq",
                 "results[0].words")],
    "itemsize": p.RESULT_SLOT_SIZE,
})

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
        api=p.api_name(int(ev["api"])), flags=int(ev["flags"]), rc=0,
        scope=int(ev["scope"]), step=int(ev["step"]), source=int(ev["source"]))


# (process, template, slot) -> its results handed to the route, late (repeat.Repeater)
Unusual = Callable[[ProcessState, RepeatTemplate, np.void], None]
Asked = Callable[[ProcessState, int], None]
# (template lines, a batch of digests) -> both in the run directory (ManifestWriter)
WriteDigests = Callable[[list[str], DigestBatch | None], None]


@dataclass(frozen=True)
class ToolLaunchCounts:
    """How cudump's kernel was launched in a run: by the launcher thread (shim/handoff.h,
    shim/handtune.h), and with programmatic stream serialization (shim/toollaunch.h)."""
    handed_off: int     # launches of cudump's kernel it made while the program went on
    handed_back: int    # those the program's thread made where the launcher was off
    trials: int         # trials of the launcher on against off, decided
    won: int            # of them, those the launcher won
    waiting: int        # launches of cudump's kernel made with programmatic stream
                        # serialization, to wait on the GPU (shim/toollaunch.h)
    launches: int = 0   # launches of cudump's kernel from the host, however made


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
    columns: PlanColumns = field(default_factory=PlanColumns)   # its plans, as arrays
    # Held while its slots are taken: by the drain thread, or by a thread catching up on
    # them (catch_up).
    lock: threading.Lock = field(default_factory=threading.Lock)


class ResultDrain(RingDrain[_Ring]):
    """Consumes every process's result ring on one thread, in batches."""

    def __init__(self, write: WriteDigests, unusual: Unusual,
                 counted: Callable[[int, int], None], asked: Asked,
                 finite: FiniteWatch | None = None) -> None:
        self._write = write
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

    def graph_replays(self) -> tuple[int, int]:
        """Every process's graph replays run watched (--watch-nan's copy, not waited for)
        and instrumented (waited for)."""
        counts = [r.shared.graph_replays for r in self._each()]
        return sum(w for w, _ in counts), sum(i for _, i in counts)

    def tool_launches(self) -> ToolLaunchCounts:
        """Every process's launches of cudump's kernel made by the launcher thread
        (shim/handoff.h), and its trials (shim/handtune.h)."""
        rings = [r.shared for r in self._each()]
        trials = [s.handoff_trials for s in rings]
        return ToolLaunchCounts(handed_off=sum(s.handed_off for s in rings),
                              handed_back=sum(s.handed_back for s in rings),
                              trials=sum(t for t, _ in trials), won=sum(w for _, w in trials),
                              waiting=sum(s.tools_waiting for s in rings),
                              launches=sum(s.tool_launches for s in rings))

    def catch_up(self, pid: int) -> None:
        """Takes what the process's ring holds now, on this thread: a NaN/Inf report about
        to say which launch left an input non-finite first learns of the launches before it
        that found their buffers finite. Nothing, where this thread is taking the ring's
        slots already (the report is one of them: those before it are taken)."""
        for ring in self._each():
            if ring.proc.pid == pid and getattr(self._inside, "ring", None) is not ring:
                self._drain(ring, heard=True)

    def _drain(self, ring: _Ring, heard: bool = False) -> int:
        """Takes the ring's slots reserved so far, once the process's connection has read
        what the shim wrote on the socket before them (launches/heard.py): their scope
        nodes, the collectives before them. Not where `heard` (a connection's own thread,
        which has read them)."""
        head = ring.shared.results_head
        if head == ring.tail:
            return 0        # nothing reserved: no numpy call
        if not heard:
            ring.proc.heard.wait_caught_up()
        with ring.lock:
            self._inside.ring = ring
            try:
                return self._take(ring, head)
            finally:
                self._inside.ring = None

    def _take(self, ring: _Ring, head: int) -> int:
        """Takes the slots that are ready, in order. A slot is 16 KB, mostly results that
        no plan uses: only the fields read and the results in use are copied, and only of
        the slots the shim has finished writing, so that a window of launches still on
        the GPU costs a few bytes each per look."""
        if head <= ring.tail:
            return 0        # taken meanwhile, up to `head` or past it (catch_up, under the lock)
        positions, index = window(len(ring.slots), ring.tail, head, BATCH)
        tag = positions + np.uint64(1)
        count = leading(ring.slots["ready"][index] == tag)
        if count == 0:
            return 0
        index, tag = index[:count], tag[:count]
        ncopies = ring.slots["ncopies"][index]
        width = min(int(ncopies.max()), p.MAX_REPEAT)
        view = ring.slots["results"][:, :width]
        # `done` is read before the words: cudump's kernel writes them first and `done`
        # after, and x86 keeps loads in order, so words read after a `done` that says so
        # are that launch's (a copy of whole results reads each one's words first, and
        # could pair old words with a new `done`).
        done = view["done"][index]
        results = view[index]
        # Every result in use is done (its kernel wrote it) or failed (none will come).
        used = np.arange(width)[None, :] < ncopies[:, None]
        settled = (~used | (results["rc"] != 0) | (done == tag[:, None])).all(axis=1)
        # A launch whose stream is held for the shim (a scan found something) is the
        # shim's to report; it is passed only once the shim has opened the gate.
        gate = ring.slots["gate"][index]
        settled &= (gate != p.Gate.HELD) & (gate != p.Gate.SERVING) & (gate != p.Gate.COPY)
        count = leading(settled)
        if count == 0:
            return 0
        index = index[:count]
        # Out of the ring before it is reused: the fields read, and whole slots for the
        # launches that go the ordinary way.
        taken = _Taken(ring.slots["event"][index], ring.slots["plan"][index],
                       ring.slots["flags"][index], ring.slots["launch_rc"][index],
                       results[:count])
        lines, batch, plain_launches, digests = self._handle(ring, taken, index)
        ring.tail += count
        ring.shared.set_results_tail(ring.tail)
        if (lines or batch is not None) and not self._failed:
            try:
                self._write(lines, batch)
            except OSError as err:
                self._failed = True   # once: the program carries on, the manifest stays whole
                warn(f"digests are no longer written: {runfiles.write_error(err)}")
        self._counted(plain_launches, digests if not self._failed else 0)
        return count

    def _handle(self, ring: _Ring, taken: _Taken, index: np.ndarray
                ) -> tuple[list[str], DigestBatch | None, int, int]:
        """The batch's plain launches (each tool ran, no scan found anything), with numpy:
        their digests become one DigestBatch, after the template lines of plans not written
        yet; anything else goes the ordinary way, in order. Returns the lines, the batch
        (None if no digests), the plain launches and their digests."""
        pid = ring.proc.pid
        seqs = taken.event["seq"]
        live = (taken.flags & p.ResultFlag.TAKEN) == 0      # not reported with MSG_REPEAT
        asked = live & ((taken.flags & p.ResultFlag.ASKED) != 0)
        for seq in seqs[asked].tolist():
            self._asked(ring.proc, seq)   # its plan's first launch: counted as asked
        table = ring.columns
        rows = np.where(live, table.rows(taken.plan, ring.templates), 0)
        width = min(taken.results.shape[1], table.width)
        codes = taken.results["rc"][:, :width]
        found = taken.results["words"][:, :width, 0]
        used = np.arange(width)[None, :] < table.ncopies[rows][:, None]
        unusual = (rows > 0) & ((taken.launch_rc != 0) | ((codes != 0) & used).any(axis=1)
                                | ((found != 0) & table.after[rows, :width]).any(axis=1))
        # A launch with digests in a scope (or a step, or with a source line) goes the
        # ordinary way too: digests.bin's records have no room for where it came from, and
        # diff and bisect align runs by it. So does the place among its process's
        # collectives (launches/collectives.py), where the process has any. Runs without
        # scopes keep the batches, and so do scans that found nothing, which leave no
        # record to say where they were (going the ordinary way, each launch of a model
        # under --layers cost the controller's time, and the program waited for it).
        ev = taken.event
        digests = table.digest[rows, :width].any(axis=1)
        unusual |= (rows > 0) & digests & ((ev["scope"] != 0) | (ev["step"] != 0)
                                           | (ev["source"] != 0)
                                           | bool(ring.proc.collectives.kernels))
        plain = (rows > 0) & ~unusual
        watch = self._finite is not None and self._finite.watching(pid)
        start = 0
        for cut in [*np.flatnonzero(unusual).tolist(), len(rows)]:
            if watch:   # what came before it, first
                self._tell_finite(pid, table, rows[start:cut], plain[start:cut],
                                  seqs[start:cut])
            if cut < len(rows):
                self._unusual(ring.proc, table.template(int(rows[cut])),
                              ring.slots[index[cut]].copy())
            start = cut + 1
        plain_launches = int((plain & ~asked).sum())
        wanted = table.digest[rows, :width] & plain[:, None]
        if not wanted.any():
            return [], None, plain_launches, 0
        lines = []
        for row in np.unique(rows[wanted.any(axis=1)]).tolist():
            template = table.template(row)
            if not template.written:
                lines.append(template.template_line(f"{pid}.{table.plan(row)}"))
                template.written = True
        batch = self._batch(pid, taken, table, rows, wanted)
        return lines, batch, plain_launches, len(batch.digests)

    @staticmethod
    def _batch(pid: int, taken: _Taken, table: PlanColumns, rows: np.ndarray,
               wanted: np.ndarray) -> DigestBatch:
        """The digests `wanted` marks (launch, column), as records."""
        has = wanted.any(axis=1)
        which = np.flatnonzero(has)
        event = taken.event[which]
        launches = np.zeros(len(which), LAUNCH)
        launches["launch"] = event["seq"]
        launches["stream"] = event["stream"]
        launches["pid"] = pid
        launches["plan"] = taken.plan[which]
        launches["occurrence"] = event["occurrence"]
        launches["device"] = event["device"]
        launches["grid"] = event["grid"]
        launches["block"] = event["block"]
        launch, column = np.nonzero(wanted)
        words = taken.results["words"]
        digests = np.zeros(len(launch), DIGEST)
        digests["digest"] = words[launch, column, 0]
        with_sum = table.has_sum[rows[launch], column]
        digests["sum"] = np.where(with_sum, words[launch, column, 1].view(np.float64), 0.0)
        digests["row"] = (np.cumsum(has) - 1)[launch]
        digests["copy"] = table.rank[rows[launch], column]
        digests["flags"] = np.where(with_sum, HAS_SUM, 0)
        return DigestBatch(launches, digests)

    def _tell_finite(self, pid: int, table: PlanColumns, rows: np.ndarray, plain: np.ndarray,
                     seqs: np.ndarray) -> None:
        """Tells the watch, for each plan with scans after its launches, of its latest plain
        launch among these."""
        assert self._finite is not None
        scanned = plain & table.scans_after[rows]
        if not scanned.any():
            return
        latest: dict[int, int] = {}   # row -> its latest plain launch, rows in launch order
        for row, seq in zip(rows[scanned].tolist(), seqs[scanned].tolist(), strict=True):
            latest[row] = seq
        for row, seq in latest.items():
            self._finite.finite(pid, table.template(row), seq)

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
