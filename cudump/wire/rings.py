"""One thread per kind of shared-memory ring, taking what the shims wrote, in batches.

The trace ring (trace.py), the result ring (results.py) and the host-write ring
(hostwrites.py) are written by the target's processes without a system call; a subclass says
how to drain one ring, this says when: at once while there is a batch to take, else after a
pause long enough for one to build up, 2 ms at most (pause_after).
"""

from __future__ import annotations

import threading
import time
from typing import Generic, Protocol, TypeVar

import numpy as np

from cudump.wire import protocol as p


class _HasSlots(Protocol):
    slots: np.ndarray       # the ring's slots, as numpy reads them


Ring = TypeVar("Ring", bound=_HasSlots)
IDLE_SECONDS = 0.002
_NUMPY = {"Q": "<u8", "I": "<u4", "i": "<i4", "H": "<u2"}


def layout_dtype(layout: p.Layout, strip: str = "") -> np.dtype:
    """A numpy dtype over a protocol.h struct, at its offsets, to read its slots in bulk:
    byte-string fields (padding) and reserved words left out (nothing reads them, and a
    slot's own `reserved` would clash with its event's), `strip` taken off the front of
    names."""
    names, formats, offsets = [], [], []
    codes = dict(layout.fields)
    for name, offset in layout.offsets().items():
        code = codes[name]
        if code.endswith("s") or name.rpartition(".")[2] == "reserved":
            continue
        base = _NUMPY[code[-1]]
        names.append(name.removeprefix(strip))
        formats.append((base, (int(code[:-1]),)) if code[0].isdigit() else base)
        offsets.append(offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                     "itemsize": layout.size})


def window(nslots: int, tail: int, head: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The positions producers have reserved from `tail` on (at most `batch`), and the
    indexes of their slots in a ring of `nslots` (a power of two)."""
    take = max(0, min(head - tail, batch))
    positions = tail + np.arange(take, dtype=np.uint64)
    return positions, (positions & np.uint64(nslots - 1)).astype(np.intp)


def pause_after(taken: int, since: float, goal: int) -> float:
    """How long a drain thread waits after a drain that took `taken` slots, `since` seconds
    after the one before: not at all once it took `goal` slots or more (the producers are
    fast: what comes next is taken at once), IDLE_SECONDS after an empty one, and in between
    about as long as the rings take to fill `goal` slots at the rate just seen (IDLE_SECONDS
    at most). A drain costs mostly per batch (a few numpy calls), not per slot: taken as they
    came, one or two at a time, the result ring of a model's forward under --check-nan kept
    a core of the controller busy beside the program."""
    if taken >= goal or (taken > 0 and since <= 0):
        return 0.0      # a batch, or slots faster than the clock can tell
    if taken <= 0:
        return IDLE_SECONDS
    return min(IDLE_SECONDS, goal * since / taken)


def leading(ok: np.ndarray) -> int:
    """How many slots from the first are ready: a ring is consumed in order."""
    return len(ok) if ok.all() else int(np.argmin(ok))


class RingDrain(Generic[Ring]):
    def __init__(self, name: str) -> None:
        self._rings: list[Ring] = []
        self._lock = threading.Lock()
        self._goal = 1          # batch_goal's, set as rings come: not looked up every drain
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _add(self, ring: Ring) -> None:
        with self._lock:
            self._rings.append(ring)
            self._goal = max(1, min(len(r.slots) for r in self._rings) // 4)

    def _each(self) -> list[Ring]:
        with self._lock:
            return list(self._rings)

    def batch_goal(self) -> int:
        """The slots a drain should find to go on at once (pause_after): a quarter of the
        smallest ring, so that batches cost little each and the launches made while one is
        taken still find room (a full ring makes the program wait); 1 before any ring."""
        return self._goal

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            taken = self.drain_once()
            now = time.monotonic()
            pause = pause_after(taken, now - last, self.batch_goal())
            last = now
            if pause > 0:
                self._stop.wait(pause)

    def drain_once(self) -> int:
        """Takes what every ring holds now; returns how many slots."""
        return sum(self._drain(ring) for ring in self._each())

    def _drain(self, ring: Ring) -> int:
        raise NotImplementedError

    def _stop_thread(self) -> None:
        self._stop.set()
        self._thread.join()
