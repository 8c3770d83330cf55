"""The shared memory of one target process: the control page, the rings, the staging area.

The controller creates it (an anonymous memfd: nothing in the file system) when
the process says hello, and passes its descriptor to the shim, which maps it.
The control page (protocol.CONTROL) carries what the shim checks on every
launch — the generation of the controller's wants, `hold` (another launch is
stopped: wait) and `interrupt` (stop at the next launch). The trace ring
carries launch events, the result ring the digests and scans of launches the
shim planned itself, the host-write ring (under NaN/Inf scans) the program's
host-to-device copies and memsets (protocol.h says how they work). The staging area
receives the bytes of snapshot and read copies; it stays sparse until the
shim writes into it. The launch counts after it (protocol.COUNTS) are those MSG_STATS
reports at exit, as the shim counts them: what the controller has of a process that ended
without MSG_STATS. With --flight the flight ring follows them (protocol.FLIGHT_SLOT): the
process's last launches, read once the run is over, its process alive or not. Last, under rules
that copy buffers, the write-behind area: deferred launches' bytes, pinned by the shim, that
the writer thread writes to files from here (protocol.h). The shim maps
it only once it has sealed the file against shrinking and seen that it holds everything the
control page and WELCOME claim.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cudump.wire import protocol as p

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class LaunchCounts:
    """The shim's launch counts as they stand in shared memory (what MSG_STATS says at exit)."""

    captured: int                          # launches recorded during stream capture
    graph_launches: int
    funcs: dict[int, tuple[int, int]]      # function id -> (launches, graph kernel-node runs)


_FUNC = struct.Struct("<QQ")
_I32 = struct.Struct("<i")


@dataclass(frozen=True)
class FlightRing:
    """The flight ring as the shim left it: the last `slots` of the `head` launches it
    recorded, and the first error a call of the program's returned."""

    slots: int
    head: int
    first_error: int
    records: list[dict[str, Any]]   # FLIGHT_SLOT's fields of each whole slot, oldest first


class SharedFile:
    def __init__(self, name: str, staging_size: int, ring_slots: int = 0,
                 results_slots: int = 0, scratch_mib: int = 0, flight_slots: int = 0,
                 host_slots: int = 0, behind_mib: int = 0) -> None:
        if any(n & (n - 1) for n in (ring_slots, results_slots, host_slots)):
            raise ValueError("a ring's size must be a power of two")
        if not 0 <= flight_slots <= p.MAX_FLIGHT:
            raise ValueError(f"a flight ring holds at most {p.MAX_FLIGHT} launches")
        self.staging_size = staging_size
        self.ring_slots = ring_slots
        self.results_slots = results_slots
        self.host_slots = host_slots
        self.results_offset = p.CONTROL_SIZE + ring_slots * p.RING_SLOT_SIZE
        self.host_offset = self.results_offset + results_slots * p.RESULT_SLOT_SIZE
        self.staging_offset = self.host_offset + host_slots * p.HOST_SLOT_SIZE
        self.counts_offset = -(-(self.staging_offset + staging_size) // p.COUNTS_ALIGN) \
            * p.COUNTS_ALIGN
        self.flight_slots = flight_slots
        self.flight_offset = -(-(self.counts_offset + p.COUNTS.size) // p.COUNTS_ALIGN) \
            * p.COUNTS_ALIGN
        # The flight ring is registered as pinned memory by the shim: the file reaches the end
        # of its last page, so that no page it pins lies past the end of the file.
        size = (-(-(self.flight_offset + flight_slots * p.FLIGHT_SLOT_SIZE) // p.COUNTS_ALIGN)
                * p.COUNTS_ALIGN if flight_slots else self.counts_offset + p.COUNTS.size)
        # The write-behind area last (protocol.h): sparse until the shim prepares it.
        self.behind_size = behind_mib << 20
        self._behind_lock = threading.Lock()
        self._behind_freed = False
        self.behind_offset = -(-size // p.BEHIND_ALIGN) * p.BEHIND_ALIGN if behind_mib else size
        size = self.behind_offset + self.behind_size
        # Sealable: the shim seals it against shrinking before it trusts its size (a
        # shared mapping touched past the end of its file is a SIGBUS in the program).
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, size)
            self._map = mmap.mmap(self.fd, size)
        except OSError:
            os.close(self.fd)
            raise
        head = p.CONTROL.pack(magic=p.MAGIC, version=p.VERSION, generation=1,
                              ring_slots=ring_slots, results_slots=results_slots,
                              scratch_mib=min(scratch_mib, 0xFFFFFFFF),
                              flight_slots=flight_slots, host_slots=host_slots,
                              behind_mib=behind_mib)
        self._map[:len(head)] = head

    def _store(self, name: str, value: int) -> None:
        # One aligned 4-byte store: the shim reads each field with one load.
        _U32.pack_into(self._map, p.CONTROL_OFFSETS[name], value & 0xFFFFFFFF)

    def _load(self, name: str) -> int:
        return int(_U32.unpack_from(self._map, p.CONTROL_OFFSETS[name])[0])

    def _load64(self, name: str) -> int:
        return int(_U64.unpack_from(self._map, p.CONTROL_OFFSETS[name])[0])

    def _store64(self, name: str, value: int) -> None:
        # One aligned 8-byte store; the shim reads it with one load.
        _U64.pack_into(self._map, p.CONTROL_OFFSETS[name], value)

    def set_generation(self, generation: int) -> None:
        self._store("generation", generation)

    def set_hold(self, hold: bool) -> None:
        self._store("hold", 1 if hold else 0)

    def set_interrupt(self, on: bool) -> None:
        self._store("interrupt", 1 if on else 0)

    @property
    def interrupt(self) -> bool:
        return self._load("interrupt") != 0

    # -- the trace ring (protocol.h): the shim produces, this side consumes -----

    def ring_bytes(self) -> memoryview:
        return memoryview(self._map)[p.CONTROL_SIZE:self.results_offset]

    @property
    def ring_head(self) -> int:
        return self._load64("ring_head")

    @property
    def ring_dropped(self) -> int:
        return self._load64("ring_dropped")

    def set_ring_tail(self, tail: int) -> None:
        self._store64("ring_tail", tail)

    # -- the result ring: the shim and the GPU produce, this side consumes -------

    def results_bytes(self) -> memoryview:
        return memoryview(self._map)[self.results_offset:self.host_offset]

    @property
    def results_head(self) -> int:
        return self._load64("results_head")

    def set_results_tail(self, tail: int) -> None:
        self._store64("results_tail", tail)

    # -- the host-write ring: the shim produces, this side consumes ------------

    def host_bytes(self) -> memoryview:
        return memoryview(self._map)[self.host_offset:self.staging_offset]

    @property
    def host_head(self) -> int:
        return self._load64("host_head")

    @property
    def host_dropped(self) -> int:
        return self._load64("host_dropped")

    @property
    def ahead_used(self) -> int:
        """Launches whose scans before them were made with the launch before (shim/ahead.h)."""
        return self._load64("ahead_used")

    @property
    def ahead_void(self) -> int:
        """Scans made ahead for a launch that did not come next."""
        return self._load64("ahead_void")

    @property
    def handed_off(self) -> int:
        """Launches of cudump's kernel made by the shim's launcher thread (shim/handoff.h)."""
        return self._load64("handed_off")

    @property
    def handed_back(self) -> int:
        """Launches of cudump's kernel the program's thread made itself, in stretches where
        the launcher was off: its trials', and where it was found slower (shim/handtune.h)."""
        return self._load64("handed_back")

    @property
    def handoff_trials(self) -> tuple[int, int]:
        """The launcher's trials decided, and those it won (shim/handtune.h)."""
        return self._load64("handoff_trials"), self._load64("handoff_won")

    @property
    def tools_waiting(self) -> int:
        """Launches of cudump's kernel made with programmatic stream serialization (Hopper and
        later: shim/toollaunch.h)."""
        return self._load64("tools_waiting")

    @property
    def tool_launches(self) -> int:
        """Launches of cudump's kernel the driver took, from the host (shim/toollaunch.c):
        its kernel nodes inside graphs are not counted."""
        return self._load64("tool_launches")

    @property
    def graph_replays(self) -> tuple[int, int]:
        """Graph replays run as the watched copy (not waited for) and as an instrumented
        copy (waited for): shim/graph.c."""
        return self._load64("graph_watched"), self._load64("graph_instrumented")

    def set_host_tail(self, tail: int) -> None:
        self._store64("host_tail", tail)

    def _view(self, area: str, start: int, size: int, offset: int, nbytes: int) -> memoryview:
        """Bytes `offset`..`offset + nbytes` of an area of `size` bytes at `start`, checked."""
        if offset < 0 or nbytes < 0 or offset + nbytes > size:
            raise ValueError(f"{nbytes} bytes at {offset} are outside the {area} of {size} "
                             "bytes")
        return memoryview(self._map)[start + offset:start + offset + nbytes]

    def staging(self, offset: int, nbytes: int) -> memoryview:
        """A view of staging bytes; the caller copies what it keeps."""
        return self._view("staging area", self.staging_offset, self.staging_size, offset,
                          nbytes)

    def behind(self, offset: int, nbytes: int) -> memoryview:
        """A view of bytes of the write-behind area, where the shim says a copy lies."""
        return self._view("write-behind area", self.behind_offset, self.behind_size, offset,
                          nbytes)

    def allocate_behind(self, fd: int, segment: int) -> None:
        """Allocates the write-behind area's pages a segment at a time through `fd` (a
        descriptor of the file's own, closed here), telling the shim after each
        (behind_ready), which then pins it; run on a thread of its own. Allocation that fails
        is left to the shim, whose pinning then faults the pages in, or fails. Stops once
        the pages were given back (free_behind), whose lock it holds segment by segment."""
        size, at = self.behind_size, 0
        try:
            while at < size:
                step = min(segment, size - at)
                with self._behind_lock:
                    if self._behind_freed:
                        return
                    os.posix_fallocate(fd, self.behind_offset + at, step)
                at += step
                self._store64("behind_ready", at)
        except (OSError, ValueError):
            pass    # ValueError: closed, the run is over
        finally:
            os.close(fd)
            try:
                self._store64("behind_ready", size)
            except ValueError:
                pass

    def free_behind(self) -> None:
        """Gives the write-behind area's pages back (its process has ended), and no more are
        allocated: what the shim may still have pinned stays until it lets go."""
        if not self.behind_size:
            return
        with self._behind_lock:
            self._behind_freed = True
            try:
                self._map.madvise(mmap.MADV_REMOVE, self.behind_offset, self.behind_size)
            except (OSError, ValueError):
                pass    # ValueError: closed, and the pages went with it

    def set_behind_done(self, number: int) -> None:
        """The files of write-behind launches up to `number` are written: the shim may reuse
        their bytes."""
        self._store64("behind_done", number)

    @property
    def behind_sent(self) -> int:
        """Launches the shim handed over through the write-behind area."""
        return self._load64("behind_sent")

    def launch_counts(self, ids: Iterable[int]) -> LaunchCounts:
        """The launch counts of the functions `ids` (and the process's), as the shim keeps
        them: readable whenever the mapping is, after the process has gone too."""
        head = p.COUNTS.offsets()
        captured = int(_U64.unpack_from(self._map, self.counts_offset + head["captured"])[0])
        graphs = int(_U64.unpack_from(self._map, self.counts_offset + head["graph_launches"])[0])
        funcs: dict[int, tuple[int, int]] = {}
        for fid in ids:
            if 1 <= fid <= p.MAX_FUNCS:
                at = self.counts_offset + head["funcs"] + (fid - 1) * p.FUNC_COUNT.size
                launches, graph_runs = _FUNC.unpack_from(self._map, at)
                funcs[fid] = (int(launches), int(graph_runs))
        return LaunchCounts(captured, graphs, funcs)

    def first_error(self) -> int:
        """The first CUDA error a call of the program's returned (0: none yet)."""
        return int(_I32.unpack_from(self._map, p.CONTROL_OFFSETS["first_error"])[0])

    def flight(self) -> FlightRing | None:
        """The flight ring's launches, oldest first (None without one): each slot whose
        `ready` says it holds the launch of its position, unchanged while it was read."""
        if not self.flight_slots:
            return None
        head = self._load64("flight_head")
        first_error = self.first_error()
        records: list[dict[str, Any]] = []
        for pos in range(max(0, head - self.flight_slots), head):
            at = self.flight_offset + (pos % self.flight_slots) * p.FLIGHT_SLOT_SIZE
            before = _U64.unpack_from(self._map, at)[0]
            fields = p.FLIGHT_SLOT.unpack(self._map, at)
            if before != pos + 1 or _U64.unpack_from(self._map, at)[0] != before:
                continue  # being written when the process stopped, or written over
            fields["position"] = pos
            records.append(fields)
        return FlightRing(self.flight_slots, head, first_error, records)

    def handed_over(self) -> None:
        """The shim has its own mapping now: the descriptor is no longer needed here."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        self.handed_over()
        try:
            self._map.close()
        except BufferError:
            pass  # a view is still alive; the mapping goes with the process
