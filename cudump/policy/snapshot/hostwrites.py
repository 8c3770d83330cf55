"""The program's own writes into device memory from the host, under NaN/Inf scans.

A NaN that the host copies into a tensor (PyTorch's `x[5] = float("nan")` is a 4-byte
host-to-device copy, no kernel) or that a memset writes is read by the next launch as an
input already non-finite. The shim records each such call in the process's host-write ring
(protocol.h) when the controller scans for NaN/Inf: where it wrote, how much, with which
call, and the process's launch count at the time, which places it among the launches. This
module takes the rings on one thread, in batches, and on any thread that is about to weigh a
launch's scans (`catch_up`), so that every write made before the launch is known by then.
The bytes a copy wrote are never seen: a memset's pattern is, and one that is NaN or Inf
for its element size is a producer at once (nan.NanWatch.host_writes).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from cudump.console import warn
from cudump.launches.process import ProcessState
from cudump.policy.snapshot.origin import HostWrite
from cudump.wire import protocol as p
from cudump.wire.rings import RingDrain, layout_dtype, leading, window
from cudump.wire.shm import SharedFile

BATCH = 4096
SLOT = layout_dtype(p.HOST_WRITE)

# (process, its writes in the order made) -> handled (nan.NanWatch.host_writes)
Took = Callable[[ProcessState, list[HostWrite]], None]


def _name(value: float) -> str | None:
    if np.isnan(value):
        return "NaN"
    if np.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return None


def nonfinite_pattern(value: int, elem: int) -> str | None:
    """What a memset's pattern is where it is NaN or Inf for its element size: `NaN as
    float32` for 4 bytes; for 2 bytes, float16 and bfloat16 cannot be told apart, so only
    a pattern that is non-finite as both (`NaN as float16 and as bfloat16`). None
    otherwise (1 byte is no floating-point type)."""
    if elem == 4:
        return _as("float32", np.array([value], dtype="<u4").view("<f4")[0])
    if elem != 2:
        return None
    half = _name(float(np.array([value], dtype="<u2").view("<f2")[0]))
    brain = _name(float(np.array([value << 16], dtype="<u4").view("<f4")[0]))
    if half is None or brain is None:
        return None
    if half == brain:
        return f"{half} as float16 and as bfloat16"
    return f"{half} as float16 and {brain} as bfloat16"


def _as(dtype: str, value: np.floating) -> str | None:
    name = _name(float(value))
    return f"{name} as {dtype}" if name is not None else None


def writes_of(slots: np.ndarray, positions: np.ndarray) -> list[HostWrite]:
    """The host writes of ring slots (copied out of the ring), empty ones left out."""
    out = []
    for slot, position in zip(slots.tolist(), positions.tolist(), strict=True):
        fields = dict(zip(SLOT.names, slot, strict=True))
        width, height, depth = fields["width"], fields["height"], fields["depth"]
        if not (width and height and depth):
            continue
        dst, elem = fields["dst"], fields["elem"]
        end = dst + (depth - 1) * fields["slice"] + (height - 1) * fields["pitch"] + width
        value = fields["value"] & ((1 << (8 * elem)) - 1) if elem in (1, 2, 4) else 0
        out.append(HostWrite(before=fields["launches"] + 1, api=p.host_api_name(fields["api"]),
                             address=dst, end=end, nbytes=width * height * depth,
                             position=position, elem=elem if elem in (1, 2, 4) else 0,
                             value=value))
    return out


@dataclass
class _Ring:
    proc: ProcessState
    shared: SharedFile
    slots: np.ndarray
    tail: int = 0
    # Held while its slots are taken: by the drain thread, or a thread catching up.
    lock: threading.Lock = field(default_factory=threading.Lock)


class HostWriteDrain(RingDrain[_Ring]):
    """Consumes every process's host-write ring on one thread, in batches."""

    def __init__(self, took: Took) -> None:
        self._took = took
        self._by_pid: dict[int, _Ring] = {}
        self.taken = 0          # host writes recorded (summary.json's host_writes)
        super().__init__("cudump-hostwrites")

    def add(self, proc: ProcessState, shared: SharedFile) -> None:
        if shared.host_slots:
            ring = _Ring(proc, shared, np.frombuffer(shared.host_bytes(), dtype=SLOT))
            with self._lock:
                self._by_pid[proc.pid] = ring
            self._add(ring)

    def catch_up(self, pid: int) -> None:
        """Takes what the process's ring holds now, on this thread: a launch's scans are
        about to be weighed, and every write the process made before the launch must be
        known. Cheap when there is nothing new (two loads)."""
        ring = self._by_pid.get(pid)
        if ring is not None and ring.shared.host_head != ring.tail:
            self._drain(ring)

    def _drain(self, ring: _Ring) -> int:
        if ring.shared.host_head == ring.tail:
            return 0        # nothing written: no numpy call (an idle ring is looked at every 2 ms)
        with ring.lock:
            positions, index = window(len(ring.slots), ring.tail, ring.shared.host_head, BATCH)
            count = leading(ring.slots["ready"][index] == positions + np.uint64(1))
            if count == 0:
                return 0
            writes = writes_of(ring.slots[index[:count]].copy(), positions[:count])
            # Handled before the tail moves on: a thread that finds nothing new to take
            # (catch_up) may rely on every write before the tail being known.
            if writes:
                try:
                    self._took(ring.proc, writes)
                except Exception as err:   # the ring must go on whatever one batch does
                    warn(f"host writes of process {ring.proc.pid} are lost: {err}")
            ring.tail += count
            ring.shared.set_host_tail(ring.tail)
            with self._lock:    # the rings of two processes may be taken at once
                self.taken += count
            return count

    def close(self) -> None:
        """Takes what is left in every ring, then stops."""
        self._stop_thread()
        while self.drain_once():
            pass
        dropped = sum(r.shared.host_dropped for r in self._each())
        if dropped:
            warn(f"{dropped} host-to-device copies or memsets were not recorded (the "
                 "controller fell behind)")
