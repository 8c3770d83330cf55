"""Plans the shim repeats on its own, and the result ring their results come back through.

A plan of digests and scans only, taken by rules that want every launch, is the same for
every launch with the same parameter bytes. The controller numbers it and marks it
PlanFlag.REPEAT; the shim keeps it and runs it for later launches without asking, and
cudump's kernel writes their results into the process's result ring (protocol.h). This
module keeps the plans (RepeatTemplate) and drains the rings on one thread, in batches:
a digest becomes its manifest line from a template made once per plan, so that every
buffer of every kernel of a training loop can be digested without the controller falling
behind. Anything out of the ordinary (a failed kernel, a scan that found something) goes
the ordinary way, through Snapshotter.collect.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cudump import protocol as p
from cudump.console import warn
from cudump.digest import digest_hex
from cudump.drain import RingDrain, layout_dtype, leading, window
from cudump.manifest import SnapshotRecord
from cudump.process import FuncInfo, LaunchEvent, ProcessState
from cudump.shared import SharedFile

BATCH = 4096
# How long the rings are waited on at the end of a run for results still on the GPU.
GRACE_SECONDS = 2.0

SLOT = np.dtype({
    "names": ["ready", "plan", "ncopies", "launch_rc", "flags", "event", "results"],
    "formats": ["<u8", "<u4", "<u4", "<i4", "<u4", layout_dtype(p.LAUNCH),
                (layout_dtype(p.TOOL_OUT), (p.MAX_REPEAT,))],
    "offsets": [p.RESULT_SLOT.offsets()[f] for f in
                ("ready", "plan", "ncopies", "launch_rc", "flags", "event.seq",
                 "results[0].words")],
    "itemsize": p.RESULT_SLOT_SIZE,
})

# Fields of a record that differ from launch to launch of one repeated plan.
_DYNAMIC = ("launch", "occurrence", "grid", "block", "stream", "device", "digest")


def _line_format(record: SnapshotRecord) -> str:
    """The record's manifest line as a str.format template over _DYNAMIC."""
    data = json.loads(record.to_json())
    marks = {name: f"\ue000{name}" for name in _DYNAMIC}
    data.update(marks)
    text = json.dumps(data, separators=(",", ":")).replace("{", "{{").replace("}", "}}")
    for name, mark in marks.items():
        text = text.replace(json.dumps(mark), "{" + name + "}")
    return text


@dataclass
class RepeatCopy:
    """One copy of a repeated plan: what it computes, when, and for a digest the record of
    the first launch (its digest fields in) that its manifest lines are made from."""

    tool: p.ToolMode
    phase: str
    record: SnapshotRecord | None = None
    _line: str | None = None

    @property
    def is_digest(self) -> bool:
        return self.tool == p.ToolMode.DIGEST

    @property
    def line(self) -> str:
        """The line template, made when a launch first repeats the plan."""
        if self._line is None:
            assert self.record is not None
            self._line = _line_format(self.record)
        return self._line


@dataclass
class RepeatTemplate:
    copies: list[RepeatCopy]
    func: FuncInfo
    first: object       # the first launch's PlannedLaunch (snapshots.py), None if no copies


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


def digest_line(copy: RepeatCopy, slot: np.void, words: int) -> str:
    ev = slot["event"]
    g, b = ev["grid"], ev["block"]
    device = int(ev["device"])
    return copy.line.format(
        launch=int(ev["seq"]), occurrence=int(ev["occurrence"]),
        grid=f"[{g[0]},{g[1]},{g[2]}]", block=f"[{b[0]},{b[1]},{b[2]}]",
        stream=f'"0x{int(ev["stream"]):x}"', device=device if device >= 0 else "null",
        digest=f'"{digest_hex(words)}"')


# (process, template, slot) -> handled the ordinary way (Snapshotter.collect)
Unusual = Callable[[ProcessState, RepeatTemplate, np.void], None]


@dataclass
class _Ring:
    proc: ProcessState
    shared: SharedFile
    slots: np.ndarray
    templates: dict[int, RepeatTemplate]
    tail: int = 0


class ResultDrain(RingDrain[_Ring]):
    """Consumes every process's result ring on one thread, in batches."""

    def __init__(self, write_lines: Callable[[list[str]], None], unusual: Unusual,
                 counted: Callable[[int, int], None]) -> None:
        self._write_lines = write_lines
        self._unusual = unusual
        self._counted = counted
        self._failed = False
        super().__init__("cudump-results")

    def add(self, proc: ProcessState, shared: SharedFile,
            templates: dict[int, RepeatTemplate]) -> None:
        if shared.results_slots:
            self._add(_Ring(proc, shared, np.frombuffer(shared.results_bytes(), dtype=SLOT),
                            templates))

    def _drain(self, ring: _Ring) -> int:
        positions, index = window(len(ring.slots), ring.tail, ring.shared.results_head, BATCH)
        view = ring.slots[index]
        tag = positions + np.uint64(1)
        ready = view["ready"] == tag
        # Every result in use is done (its kernel wrote it) or failed (none will come).
        results = view["results"]
        used = np.arange(p.MAX_REPEAT)[None, :] < view["ncopies"][:, None]
        settled = (~used | (results["rc"] != 0) | (results["done"] == tag[:, None])).all(axis=1)
        count = leading(ready & settled)
        if count == 0:
            return 0
        taken = ring.slots[index[:count]].copy()   # out of the ring before it is reused
        ring.tail += count
        ring.shared.set_results_tail(ring.tail)
        self._handle(ring, taken)
        return count

    def _handle(self, ring: _Ring, taken: np.ndarray) -> None:
        lines: list[str] = []
        plain_launches = 0
        for slot in taken:
            if int(slot["flags"]) & p.ResultFlag.TAKEN:
                continue   # reported with MSG_REPEAT
            template = ring.templates.get(int(slot["plan"]))
            if template is None:
                continue
            results = slot["results"]
            launch_rc = int(slot["launch_rc"])
            plain = launch_rc == 0 and all(
                int(results[k]["rc"]) == 0 and (c.is_digest or c.phase == "before"
                                                or int(results[k]["words"][0]) == 0)
                for k, c in enumerate(template.copies))
            if not plain:
                self._unusual(ring.proc, template, slot)
                continue
            plain_launches += 1
            for k, copy in enumerate(template.copies):
                if copy.is_digest:
                    lines.append(digest_line(copy, slot, int(results[k]["words"][0])))
        written = 0
        if lines and not self._failed:
            try:
                self._write_lines(lines)
                written = len(lines)
            except OSError as err:
                self._failed = True   # once: the program carries on, the manifest stays whole
                warn(f"digests are no longer written: {err.strerror or err}")
        self._counted(plain_launches, written)

    def close(self) -> None:
        """Takes what is left in every ring (waiting a little for the GPU), then stops."""
        self._stop_thread()
        deadline = time.monotonic() + GRACE_SECONDS
        while True:
            moved = self.drain_once()
            left = sum(r.shared.results_head - r.tail for r in self._each())
            if not left:
                return
            if not moved:
                if time.monotonic() > deadline:
                    warn(f"{left} launches' digests or scans never came back from the GPU "
                         "(the process ended, or its context failed, before they ran)")
                    return
                time.sleep(0.01)
