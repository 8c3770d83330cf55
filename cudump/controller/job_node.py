"""A run that is one node of a job (`cudump --job JOB`): its snapshot bytes go to the job's
blobs, it writes the job's trigger when it fails or finds NaN/Inf, and (with --flight) it
watches the other nodes' triggers and writes its flight recorder when one appears.

The run's directory is JOB/nodes/NODE (rundir.job); the node's name is its folder's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from cudump.analysis.flight import error_name
from cudump.console import say, warn
from cudump.controller.flight import write_now
from cudump.launches.process import ProcessState
from cudump.rundir import triggers
from cudump.rundir.blobs import BlobStore
from cudump.rundir.layout import FLIGHT_FILE
from cudump.rundir.summary import plural
from cudump.rundir.triggers import Trigger, TriggerWatch
from cudump.sizes import human_bytes
from cudump.wire.shm import FlightRing

# The processes' flight rings as they are now; and the first CUDA error a process has seen
# (the process and the error's number), if any.
Rings = Callable[[], list[tuple[ProcessState, FlightRing]]]
FirstError = Callable[[], tuple[ProcessState, int] | None]


class NodeOfJob:
    def __init__(self, job: Path, run_dir: Path, rings: Rings | None,
                 first_error: FirstError) -> None:
        self.job = job
        self.run_dir = run_dir
        self.name = run_dir.name
        self.blobs = BlobStore(job)
        self._rings = rings
        self._first_error = first_error
        self._lock = threading.Lock()
        self.triggered: Trigger | None = None
        self.flights_written = 0        # flight.jsonl written on another node's trigger
        # --flight: the other nodes' triggers are watched
        self.watch = (TriggerWatch(job, self.name, self._seen, self._tick)
                      if rings is not None else None)

    def start(self) -> None:
        if self.watch is not None:
            self.watch.start()

    def stop(self) -> None:
        """Before the processes' shared memory goes: no ring is read after this."""
        if self.watch is not None:
            self.watch.stop()
        self._tick()

    def trigger(self, what: str, detail: str, *, rank: int | None = None,
                pid: int | None = None, launch: int | None = None,
                kernel: str | None = None) -> None:
        """This node's trigger, written once (its first reason)."""
        with self._lock:
            if self.triggered is not None:
                return
            self.triggered = Trigger(self.name, what, detail, triggers.now(), rank, pid,
                                     launch, kernel)
            trigger = self.triggered
        try:
            path = triggers.write_trigger(self.job, trigger)
        except OSError as err:
            warn(f"could not write the job's trigger in {self.job}: {err.strerror or err}")
            return
        if path is not None:
            say(f"cudump: job: {trigger.text()}; the other nodes write their flight "
                f"recorders (--flight): {path}")

    def nan(self, pid: int, rank: int | None, launch: int | None, kernel: str | None,
            detail: str) -> None:
        self.trigger("NaN/Inf", detail, rank=rank, pid=pid, launch=launch, kernel=kernel)

    def ended(self, status: int, rank: int | None) -> None:
        """The program's end: a CUDA error a process saw (the more telling reason), else
        a non-zero status is the node's trigger."""
        self._tick()
        if status != 0:
            self.trigger(f"exit status {status}", f"the program exited with status {status}",
                         rank=rank)

    def blob_lines(self) -> list[str]:
        """What storing snapshots by content did, for the end of the run."""
        tally = self.blobs.tally
        if not tally.stored and not tally.reused:
            return []
        return [f"cudump: job: {plural(tally.stored + tally.reused, 'snapshot')} stored in "
                f"{self.blobs.root}: {tally.stored} new, {tally.reused} already there "
                f"({human_bytes(tally.bytes_saved)} not written again)"]

    def _tick(self) -> None:
        found = self._first_error()
        if found is not None and self.triggered is None:
            proc, error = found
            self.trigger("CUDA error", f"a call returned {error_name(error)}", rank=proc.rank,
                         pid=proc.pid)

    def _seen(self, trigger: Trigger) -> None:
        """Another node's trigger: this node's last launches, written now."""
        assert self._rings is not None
        rings = self._rings()
        if not rings:
            return
        try:
            path = write_now(rings, self.run_dir, f"written when {trigger.text()}")
        except OSError as err:
            warn(f"could not write {self.run_dir / FLIGHT_FILE}: {err.strerror or err}")
            return
        self.flights_written += 1
        say(f"cudump: flight: {trigger.text()}; this node's last launches are in {path}")
