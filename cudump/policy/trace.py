"""The launch events: from each process's trace ring (and single messages) to their sinks.

`--trace` writes one line per launch on stderr and trace.jsonl in the run directory
(TraceWriter); `--timeline` collects the same events into a trace-event file (timeline.py).
Either turns on the same event stream from the shim (Want.TRACE for every function, graph
launches with TRACE_GRAPHS)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from cudump.console import say_lines, warn
from cudump.launches.collectives import CollectivePlace
from cudump.launches.events import EVENT_FIELDS, GraphLaunch
from cudump.launches.process import ProcessState
from cudump.rundir import files as runfiles
from cudump.rundir.layout import TRACE_FILE
from cudump.wire import protocol as p
from cudump.wire.rings import RingDrain, layout_dtype, leading, window
from cudump.wire.shm import SharedFile


def format_graph_launch(record: dict[str, Any]) -> str:
    """The stderr line of a graph-launch record (as written to trace.jsonl)."""
    device = record.get("device")
    dev = f" dev={device}" if isinstance(device, int) and device >= 0 else ""
    rank = f" rank={record['rank']}" if "rank" in record else ""
    return (f"cudump: #{record['launch']} pid={record['pid']}{rank}{dev} graph-launch "
            f"exec={record['graph']} stream={record['stream']}")


_ID, _FLAGS, _RC = (EVENT_FIELDS.index(name) for name in ("id", "flags", "rc"))
_SEQ, _FID = EVENT_FIELDS.index("seq"), _ID
_GRAPH_ID, _NODE = EVENT_FIELDS.index("graph"), EVENT_FIELDS.index("node")
# Plain ints: a row's flags are an int, and an enum's `&` costs more than the rest of a row.
_CAPTURED = int(p.LaunchFlag.CAPTURED)
_GRAPH = int(p.LaunchFlag.GRAPH)
_NOT_DIRECT = _CAPTURED | _GRAPH
def count_launches(proc: ProcessState, rows: Iterable[Sequence[Any]]) -> None:
    """Counts each direct launch that succeeded on its function (what the summary falls back
    on for a process that ends without saying goodbye)."""
    funcs = proc.funcs
    for row in rows:
        if row[_RC] == 0 and not row[_FLAGS] & _NOT_DIRECT:
            func = funcs.get(row[_ID])
            if func is not None:
                func.launches += 1


def hear_collectives(proc: ProcessState, rows: Sequence[Sequence[Any]]) -> None:
    """The collectives among launch events counted, in their process's order (nothing to do
    for a process that announced no collective kernel)."""
    if proc.collectives.kernels:
        # A failed launch, or one captured into a graph (it does not run then), is heard
        # of but counts as none; a graph's kernel node counts at its place in its replay
        # (collectives.py).
        proc.hear_launches((row[_SEQ], row[_FID] if row[_RC] == 0
                            and not row[_FLAGS] & _CAPTURED else -1)
                           for row in rows if not row[_FLAGS] & _GRAPH)
        proc.hear_nodes((row[_SEQ], row[_GRAPH_ID], row[_NODE], row[_FID]) for row in rows
                        if row[_FLAGS] & _GRAPH and row[_RC] == 0)


@dataclass(frozen=True)
class _Tails:
    """What a launch event's record and line say around its sequence number."""

    head: str       # the record up to the number
    record: str     # the record after it
    line: str       # the stderr line after it


def _tails(proc: ProcessState, name: tuple[str, str, str], row: Sequence[Any],
           place: CollectivePlace | None) -> _Tails:
    (_seq, _fid, dev, grid, block, smem, stream, api, flags, _rc, graph, replay, node, _tid,
     scope, step, source) = row
    pid = proc.pid
    # The process's rank, where it has one: in the record after the pid, and on the line.
    rank_json = f',"rank":{proc.rank}' if proc.rank is not None else ""
    rank_text = f" rank={proc.rank}" if proc.rank is not None else ""
    captured = bool(flags & _CAPTURED)
    in_graph = bool(flags & _GRAPH)
    gx, gy, gz = grid
    bx, by, bz = block
    event = "graph-kernel" if in_graph else "launch"
    where = f',"graph":{graph},"replay":{replay},"node":{node}' if in_graph else ""
    # The launch in the user's terms (scopes.py), where the process said anything of it.
    where_ = proc.where(_fid, scope, step, source)
    if place is not None:     # the collectives its process launched before it
        where_ = replace(where_, collective=place.count, collective_op=place.op)
    fields = where_.fields()
    if fields:
        where += "," + json.dumps(fields, separators=(",", ":"))[1:-1]
    device = f" dev={dev}" if dev >= 0 else ""
    node_text = f" graph={graph} replay={replay} node={node}" if in_graph else ""
    return _Tails(
        head=f'{{"event":"{event}","launch":',
        record=(f',"pid":{pid}{rank_json},"device":{dev},'
                f'"kernel":{name[1]},"mangled":{name[2]},"grid":[{gx},{gy},{gz}],'
                f'"block":[{bx},{by},{bz}],"smem":{smem},"stream":"0x{stream:x}",'
                f'"api":"{p.api_name(api)}","captured":{"true" if captured else "false"}'
                f'{where}}}'),
        line=(f" pid={pid}{rank_text}{device}{node_text} {name[0]} "
              f"grid=({gx},{gy},{gz}) block=({bx},{by},{bz}) smem={smem} "
              f"stream=0x{stream:x}" + (" captured" if captured else "")
              + (f" {where_.text()}" if where_ else "")))


def format_events(proc: ProcessState, rows: Iterable[Sequence[Any]]) -> tuple[list[str], list[str]]:
    """The trace.jsonl records and stderr lines of launch events (rows of EVENT_FIELDS), for
    the ring's batches and single MSG_LAUNCH messages alike. Launches that failed are left
    out. A program launches the same kernels the same way over and over: all that its
    events say but the sequence number is formatted once a batch for each way (formatting
    every event anew kept the controller's trace thread busy for most of a forward of
    ResNet-18)."""
    records: list[str] = []
    lines: list[str] = []
    names: dict[int, tuple[str, str, str]] = {}
    tails: dict[tuple[Any, ...], _Tails] = {}
    collectives = proc.collectives if proc.collectives.kernels else None
    for row in rows:
        (seq, fid, dev, grid, block, smem, stream, api, flags, rc, graph, replay, node, _,
         scope, step, source) = row
        if rc != 0:
            continue
        place = None
        if collectives is not None:
            place = (collectives.before(seq, graph=graph, node=node) if flags & _GRAPH
                     else collectives.before(seq))
        key = ((fid, dev, *grid, *block, smem, stream, api, flags, graph, replay, node, scope,
                step, source, place)
               if flags & _GRAPH else (fid, dev, *grid, *block, smem, stream, api, flags, scope,
                                       step, source, place))
        tail = tails.get(key)
        if tail is None:
            func = proc.funcs.get(fid)
            if func is None:
                continue
            name = names.get(fid)
            if name is None:
                name = names[fid] = (func.demangled, json.dumps(func.demangled),
                                     json.dumps(func.mangled))
            tail = tails[key] = _tails(proc, name, row, place)
        records.append(f"{tail.head}{seq}{tail.record}")
        lines.append(f"cudump: #{seq}{tail.line}")
    return records, lines


class LaunchSink(Protocol):
    """What takes launch events: the trace (TraceWriter) and the timeline."""

    def launches(self, proc: ProcessState, rows: Sequence[Sequence[Any]]) -> None: ...

    def graph_launch(self, proc: ProcessState, launch: GraphLaunch) -> None: ...


_SCOPE, _SOURCE = (EVENT_FIELDS.index(name) for name in ("scope", "source"))
# How long a batch from the trace ring waits for the scope nodes it names (sent on the
# socket before the launch was put in the ring, so normally already read).
SCOPE_WAIT_SECONDS = 2.0


class LaunchFeed:
    """Launch events from the rings and from messages, counted once, to every sink."""

    def __init__(self, sinks: Sequence[LaunchSink]) -> None:
        self.sinks = list(sinks)
        self._given_up: set[tuple[int, int]] = set()   # (pid, node) never announced

    def _await_scopes(self, proc: ProcessState, rows: Sequence[Sequence[Any]]) -> None:
        """Waits (bounded) until the process's connection has read the scope nodes the
        rows name: the shim announces a node on the socket before the first launch naming
        it, but the ring is read apart from the socket. A node still unknown then is shown
        as nothing (and not waited for again)."""
        nodes = proc.scopes.nodes
        wanted = {row[i] for row in rows for i in (_SCOPE, _SOURCE) if row[i]}
        missing = {n for n in wanted if n not in nodes and (proc.pid, n) not in self._given_up}
        deadline = time.monotonic() + SCOPE_WAIT_SECONDS
        while missing and time.monotonic() < deadline:
            time.sleep(0.001)
            missing = {n for n in missing if n not in nodes}
        self._given_up |= {(proc.pid, n) for n in missing}

    def launches(self, proc: ProcessState, rows: Sequence[Sequence[Any]],
                 ring_read: int | None = None) -> None:
        """`ring_read`: rows from the process's trace ring, read up to that position."""
        self._await_scopes(proc, rows)
        count_launches(proc, rows)
        hear_collectives(proc, rows)
        if ring_read is not None:
            proc.collectives.drained_to(ring_read)
        for sink in self.sinks:
            sink.launches(proc, rows)

    def graph_launch(self, proc: ProcessState, launch: GraphLaunch) -> None:
        for sink in self.sinks:
            sink.graph_launch(proc, launch)


class TraceWriter:
    """Writes trace records from many connection threads, in arrival order."""

    def __init__(self, run_dir: Path) -> None:
        self._lock = threading.Lock()
        # Created new: never appended to, nor written through a symlink (runfiles).
        self._file = runfiles.create_file(run_dir / TRACE_FILE, "w", encoding="utf-8")
        self._closed = False
        self._failed = False

    def launches(self, proc: ProcessState, rows: Sequence[Sequence[Any]]) -> None:
        records, lines = format_events(proc, rows)
        if records:
            self.write_lines(records, lines)

    def graph_launch(self, proc: ProcessState, launch: GraphLaunch) -> None:
        record = launch.record(proc.pid, proc.rank)
        self.write_lines([json.dumps(record, separators=(",", ":"))],
                         [format_graph_launch(record)])

    def write_lines(self, records: list[str], lines: list[str]) -> None:
        """Already formatted JSON records and their stderr lines, in order."""
        with self._lock:
            if self._closed:
                return
            if not self._failed:
                try:
                    self._file.write("\n".join(records) + "\n")
                except OSError as err:
                    # A full disk ends the file, not the trace (nor the run).
                    self._failed = True
                    warn(f"{TRACE_FILE} stopped: {err.strerror or err}; trace lines go on")
            say_lines(lines)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            try:
                self._file.close()
            except OSError:
                pass


# ---------------------------------------------------------------- the trace ring


SLOT = layout_dtype(p.RING_SLOT, strip="event.")
BATCH = 1 << 16


@dataclass
class _Ring:
    proc: ProcessState
    shared: SharedFile
    slots: np.ndarray
    tail: int = 0
    closed: bool = False


class TraceDrain(RingDrain["_Ring"]):
    """Consumes every process's trace ring on one thread, in batches, off the target's path.

    The shim writes each traced launch into its process's ring (no system call); this thread
    takes what is ready in order, frees the slots, and hands the batch to the feed's sinks
    (trace.jsonl and the stderr lines, each written with one call; the timeline).
    """

    def __init__(self, feed: LaunchFeed) -> None:
        self.feed = feed
        super().__init__("cudump-trace")

    def add(self, proc: ProcessState, shared: SharedFile) -> None:
        self._add(_Ring(proc, shared, np.frombuffer(shared.ring_bytes(), dtype=SLOT)))

    def _drain(self, ring: _Ring) -> int:
        positions, index = window(len(ring.slots), ring.tail, ring.shared.ring_head, BATCH)
        count = leading(ring.slots["ready"][index] == positions + np.uint64(1))
        if count == 0:
            return 0
        events = ring.slots[index[:count]].copy()  # out of the ring before it is reused
        ring.tail += count
        ring.shared.set_ring_tail(ring.tail)
        self._write(ring.proc, events, ring.tail)
        return count

    def _write(self, proc: ProcessState, events: np.ndarray, read: int) -> None:
        columns = [events[f].tolist() for f in EVENT_FIELDS]
        self.feed.launches(proc, list(zip(*columns, strict=True)), read)

    def dropped(self) -> int:
        return sum(r.shared.ring_dropped for r in self._each())

    def close(self) -> None:
        """Takes what is left in every ring, then stops."""
        self._stop_thread()
        while self.drain_once():
            pass
