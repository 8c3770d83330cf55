"""`--timeline FILE`: the run as trace-event JSON, for Perfetto or chrome://tracing.

The Trace Event Format's JSON Object Format: {"traceEvents": [...], ...}. Tracks:

- one process per target process (pid), named by its program, with one thread track per
  host thread that launched (tid: the thread's id) and one track per stream (a tid of its
  own, from STREAM_TIDS on, named "stream 0x... (device N)");
- each launch is a complete event ("X") on its thread's track and on its stream's track,
  named by the kernel (without its parameters), with the full demangled name, grid, block,
  shared memory, stream, device and launch number in args; a graph launch is one on its
  stream's track, and each kernel node it runs one on both tracks;
- snapshots, digests and snapshots that failed are instant events ("i") on their stream's
  track; a launch that left NaN/Inf where there was none is an instant named "NaN/Inf";
  each stop at the prompt (breakpoint, step, interrupt) is an instant on its thread's track;
- cudump's own track (the controller's pid) holds the note that the timeline is full.
- where launches name the scopes open on their thread (NVTX ranges, PyTorch modules: see
  launches/scopes.py), each scope is a complete event ("X", category "scope") on the
  thread's track, nested as the scopes were, around the launches made inside it.

Time: the shim's launch events carry no timestamp, so `ts` is when cudump received the
event, in microseconds from when the timeline was opened. Launch events come through each
process's trace ring in batches (every 2 ms when idle), so launches received together are
laid out in launch order SLICE_US apart (never before the time received), and every slice
lasts SLICE_US: the kernels' run times are not measured.

Bounded: after MAX_EVENTS events nothing more is added but an instant on cudump's track
saying so. The file is written as the run goes, unnamed, and named at the end
(pending_file).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cudump
from cudump.console import warn
from cudump.launches.events import EVENT_FIELDS, GraphLaunch
from cudump.launches.process import ProcessState
from cudump.launches.stop import StopInfo
from cudump.rundir.manifest import SnapshotRecord
from cudump.rundir.pending_file import PendingFile
from cudump.rundir.runs import short_kernel_name
from cudump.rundir.wheres import WHERE_FIELDS
from cudump.wire import protocol as p

MAX_EVENTS = 1_000_000
SLICE_US = 1.0
# Stream tracks get tids from here on: thread ids stay below 2**22 (pid_max), and trace
# viewers take tids as 32-bit numbers.
STREAM_TIDS = 1_000_000_000
NOTE = ("ts: when cudump received each event (the shim sends no timestamp), in microseconds "
        "from the start of the run; launches received together are laid out in launch order "
        f"{SLICE_US:g} us apart, and every launch slice lasts {SLICE_US:g} us (kernel run "
        "times are not measured)")

_SEQ, _ID, _DEV, _GRID, _BLOCK, _SMEM, _STREAM, _API, _FLAGS, _RC, _GRAPH, _REPLAY, _NODE, \
    _TID, _SCOPE, _STEP, _SOURCE = range(len(EVENT_FIELDS))


def _j(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


@dataclass
class _Process:
    """What the timeline has said of one process: its tracks, and its clock."""

    pid: int
    threads: set[int] = field(default_factory=set)
    streams: dict[tuple[int, int], int] = field(default_factory=dict)   # (dev, stream) -> tid
    last_us: float = 0.0          # the latest slice's start: the next one starts after it
    names: dict[int, tuple[str, str]] = field(default_factory=dict)   # func id -> JSON texts
    # tid -> the scopes open on the thread's track (outermost first), and when its latest
    # launch slice started
    scopes: dict[int, list[_OpenScope]] = field(default_factory=dict)
    thread_last: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _OpenScope:
    node: int
    name: str
    kind: str
    start: float


class Timeline:
    """Collects the events of a run (from many threads) and writes them as they come."""

    def __init__(self, path: Path, argv: Sequence[str] = (), limit: int = MAX_EVENTS,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.path = Path(path)
        self.limit = limit
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._file = PendingFile(self.path)
        self._first = True
        self._failed = False
        self.events = 0                 # events written (the last note left out)
        self.full = False
        self._processes: dict[int, _Process] = {}
        self._exes: dict[int, str] = {}
        self._argv = list(argv)
        self._own = os.getpid()
        self._file.file.write('{"traceEvents":[\n')
        self._emit([
            self._meta("process_name", self._own, self._own, {"name": "cudump"}),
            self._meta("thread_name", self._own, self._own, {"name": "cudump"}),
            self._meta("process_sort_index", self._own, self._own, {"sort_index": -1}),
        ], count=False)

    # -- the events' text ----------------------------------------------------------

    def _now(self) -> float:
        return (self._clock() - self._start) / 1000.0

    @staticmethod
    def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> str:
        return f'{{"name":"{name}","ph":"M","pid":{pid},"tid":{tid},"args":{_j(args)}}}'

    @staticmethod
    def _slice(name_json: str, ts: float, pid: int, tid: int, args: str) -> str:
        return (f'{{"name":{name_json},"ph":"X","ts":{ts:.3f},"dur":{SLICE_US:g},"pid":{pid},'
                f'"tid":{tid},"args":{args}}}')

    @staticmethod
    def _instant(name: str, ts: float, pid: int, tid: int, args: dict[str, Any],
                 scope: str = "t") -> str:
        return (f'{{"name":{_j(name)},"ph":"i","s":"{scope}","ts":{ts:.3f},"pid":{pid},'
                f'"tid":{tid},"args":{_j(args)}}}')

    def _emit(self, events: list[str], count: bool = True) -> None:
        """Writes events (the caller holds the lock, or is the constructor)."""
        if not events or self._failed:
            return
        text = ",\n".join(events)
        try:
            self._file.file.write(text if self._first else ",\n" + text)
        except OSError as err:
            self._failed = True
            warn(f"the timeline stopped: {err.strerror or err}; {self.path} is not written")
            return
        self._first = False
        if count:
            self.events += len(events)

    def _room(self, needed: int) -> bool:
        """Whether `needed` more events fit; once they do not, the timeline is full."""
        if self.full:
            return False
        if self.events + needed <= self.limit:
            return True
        self.full = True
        self._emit([self._instant("timeline full: later events left out", self._now(),
                                  self._own, self._own, {"events": self.events,
                                                         "limit": self.limit}, "g")],
                   count=False)
        return False

    # -- tracks --------------------------------------------------------------------

    def _process(self, pid: int, out: list[str]) -> _Process:
        proc = self._processes.get(pid)
        if proc is None:
            proc = self._processes[pid] = _Process(pid)
            exe = self._exes.get(pid)
            name = f"{os.path.basename(exe) or exe} (pid {pid})" if exe else f"pid {pid}"
            out.append(self._meta("process_name", pid, pid, {"name": name}))
        return proc

    def _thread(self, proc: _Process, tid: int, out: list[str]) -> int:
        if tid not in proc.threads:
            proc.threads.add(tid)
            name = "main thread" if tid == proc.pid else "thread"
            out.append(self._meta("thread_name", proc.pid, tid, {"name": f"{name} {tid}"}))
            out.append(self._meta("thread_sort_index", proc.pid, tid, {"sort_index": 0}))
        return tid

    def _stream(self, proc: _Process, device: int, stream: int, out: list[str]) -> int:
        tid = proc.streams.get((device, stream))
        if tid is None:
            tid = proc.streams[(device, stream)] = STREAM_TIDS + len(proc.streams)
            where = f" (device {device})" if device >= 0 else ""
            out.append(self._meta("thread_name", proc.pid, tid,
                                  {"name": f"stream 0x{stream:x}{where}"}))
            out.append(self._meta("thread_sort_index", proc.pid, tid,
                                  {"sort_index": 1 + len(proc.streams)}))
        return tid

    def _slice_ts(self, proc: _Process) -> float:
        ts = max(self._now(), proc.last_us + SLICE_US)
        proc.last_us = ts
        return ts

    def _scope_slice(self, pid: int, tid: int, scope: _OpenScope, end: float) -> str:
        return (f'{{"name":{_j(scope.name)},"cat":"scope","ph":"X","ts":{scope.start:.3f},'
                f'"dur":{end - scope.start:.3f},"pid":{pid},"tid":{tid},'
                f'"args":{{"scope":{_j(scope.kind)}}}}}')

    def _enter(self, proc: ProcessState, track: _Process, tid: int, scope: int, ts: float,
               out: list[str]) -> None:
        """The thread's open scopes made those of a launch at `ts` inside `scope`: each
        scope it has left becomes a slice. A scope's slice starts where the first launch made
        inside it starts (after a launch on that thread made outside it) and ends where the
        last launch made inside it ends, before the thread's next launch outside it (or at
        the end of the run). Scopes without launches are not seen; two calls of the same
        module with no launch between them are one slice (a scope is its name's path)."""
        chain = proc.scopes.chain(scope)
        open_ = track.scopes.setdefault(tid, [])
        keep = 0
        while (keep < len(open_) and keep < len(chain)
               and open_[keep].node == chain[keep].id):
            keep += 1
        if keep < len(open_):
            end = track.thread_last.get(tid, ts) + SLICE_US
            for gone in reversed(open_[keep:]):
                out.append(self._scope_slice(track.pid, tid, gone, end))
            del open_[keep:]
        for node in chain[keep:]:
            open_.append(_OpenScope(node.id, node.name, node.kind.name.lower(), ts))

    # -- what happens in a run -----------------------------------------------------

    def process(self, proc: ProcessState) -> None:
        """A process connected: its program names its track."""
        with self._lock:
            self._exes[proc.pid] = proc.exe

    def launches(self, proc: ProcessState, rows: Sequence[Sequence[Any]]) -> None:
        """Launch events (rows of events.EVENT_FIELDS): a slice on the launching thread's
        track and one on the stream's."""
        with self._lock:
            out: list[str] = []
            track = self._process(proc.pid, out)
            for row in rows:
                if row[_RC] != 0:
                    continue
                func = proc.funcs.get(row[_ID])
                if func is None:
                    continue
                # a launch's slices and track names, and the scope slices it may end
                if not self._room(len(out) + 6 + len(track.scopes.get(row[_TID], ()))):
                    break
                names = track.names.get(row[_ID])
                if names is None:
                    names = track.names[row[_ID]] = (_j(short_kernel_name(func.demangled)),
                                                    _j(func.demangled))
                tid, device, stream = row[_TID], row[_DEV], row[_STREAM]
                flags = row[_FLAGS]
                gx, gy, gz = row[_GRID]
                bx, by, bz = row[_BLOCK]
                args = (f'{{"kernel":{names[1]},"launch":{row[_SEQ]},"grid":[{gx},{gy},{gz}],'
                        f'"block":[{bx},{by},{bz}],"smem":{row[_SMEM]},'
                        f'"stream":"0x{stream:x}","device":{device},"thread":{tid},'
                        f'"api":"{p.api_name(row[_API])}"')
                if flags & p.LaunchFlag.GRAPH:
                    args += (f',"graph":{row[_GRAPH]},"replay":{row[_REPLAY]},'
                             f'"node":{row[_NODE]}')
                if flags & p.LaunchFlag.CAPTURED:
                    args += ',"captured":true'
                args += "}"
                ts = self._slice_ts(track)
                if tid:
                    thread = self._thread(track, tid, out)
                    if _SCOPE is not None and (row[_SCOPE] or track.scopes.get(tid)):
                        self._enter(proc, track, tid, row[_SCOPE], ts, out)
                    track.thread_last[tid] = ts
                    out.append(self._slice(names[0], ts, proc.pid, thread, args))
                out.append(self._slice(names[0], ts, proc.pid,
                                       self._stream(track, device, stream, out), args))
            self._emit(out)

    def graph_launch(self, proc: ProcessState, launch: GraphLaunch) -> None:
        with self._lock:
            out: list[str] = []
            track = self._process(proc.pid, out)
            if not self._room(len(out) + 3):
                return
            tid = self._stream(track, launch.device, launch.stream, out)
            args = _j({"exec": f"0x{launch.exec:x}", "launch": launch.seq,
                       "stream": f"0x{launch.stream:x}", "device": launch.device,
                       "api": launch.api})
            out.append(self._slice('"graph launch"', self._slice_ts(track), proc.pid, tid,
                                   args))
            self._emit(out)

    def record(self, record: SnapshotRecord) -> None:
        """A manifest record: a snapshot, a digest, a failure, or a NaN/Inf report."""
        extra = record.extra
        what = f"arg {record.arg} {record.phase}"
        args: dict[str, Any] = {"kernel": record.kernel, "launch": record.launch,
                                "occurrence": record.occurrence, "arg": record.arg,
                                "phase": record.phase}
        args.update({k: extra[k] for k in WHERE_FIELDS if k in extra})   # its layer, step...
        if "nonfinite" in extra and extra.get("nan_producer"):
            name = "NaN/Inf"
            args.update(nonfinite=extra["nonfinite"], first_nonfinite=extra.get(
                "first_nonfinite"), elements=extra.get("elements"))
            args.update({k: extra[k] for k in ("origin", "from_arg", "from_launch",
                                               "from_host") if k in extra})
        elif record.status != "ok":
            name = f"snapshot failed: {what}"
            args["reason"] = record.reason
        elif "digest" in extra:
            name = f"digest: {what}"
            args["digest"] = extra["digest"]
        else:
            name = f"snapshot: {what}"
            args["file"] = record.file
        try:
            stream = int(record.stream, 16)
        except ValueError:
            stream = 0
        device = record.device if record.device is not None else -1
        with self._lock:
            out: list[str] = []
            track = self._process(record.pid, out)
            if not self._room(len(out) + 3):
                return
            tid = self._stream(track, device, stream, out)
            out.append(self._instant(name, max(self._now(), track.last_us), record.pid, tid,
                                     args))
            self._emit(out)

    def stop(self, info: StopInfo) -> None:
        """A launch held at the prompt."""
        args = {"kernel": info.kernel, "launch": info.launch, "occurrence": info.occurrence,
                "phase": info.phase, "stream": info.stream}
        with self._lock:
            out: list[str] = []
            track = self._process(info.pid, out)
            if not self._room(len(out) + 3):
                return
            if info.tid:
                tid = self._thread(track, info.tid, out)
            else:
                tid = self._stream(track, info.device, int(info.stream, 16), out)
            out.append(self._instant(f"stop: {info.reason}", max(self._now(), track.last_us),
                                     info.pid, tid, args))
            self._emit(out)

    # -- the end ---------------------------------------------------------------------

    def _close_scopes(self) -> None:
        """The scopes still open on each thread end with its last launch (the lock held)."""
        out: list[str] = []
        for track in self._processes.values():
            for tid, open_ in track.scopes.items():
                end = track.thread_last.get(tid, 0.0) + SLICE_US
                out.extend(self._scope_slice(track.pid, tid, s, end) for s in reversed(open_))
                open_.clear()
        if out and self._room(len(out)):
            self._emit(out)

    def close(self, complete: bool = True) -> Path | None:
        """Ends the JSON and puts the file in place; without `complete` (the program never
        ran) or after a write failed, nothing is written. Returns the path written."""
        with self._lock:
            if self._failed or not complete:
                self._file.discard()
                return None
            self._close_scopes()
            other = {"cudump": cudump.__version__, "program": self._argv, "clock": NOTE,
                     "events": self.events, "full": self.full}
            tail = f'\n],\n"displayTimeUnit":"ms",\n"otherData":{_j(other)}}}\n'
            try:
                self._file.file.write(tail)
                return self._file.finish()
            except OSError as err:
                self._failed = True
                self._file.discard()
                warn(f"could not write the timeline {self.path}: {err.strerror or err}")
                return None
