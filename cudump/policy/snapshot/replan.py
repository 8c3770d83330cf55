"""Kept plans made again once a buffer is found to begin inside one of their guessed extents.

A pointer says where a buffer begins, not where it ends: without a rule's `count`, a buffer
runs to where the next buffer cudump has seen begins in the same allocation, or to the
allocation's end (kernels/extents.py). A model's first forward shows its buffers one launch
at a time, so a plan made early in it runs over tensors that later launches show to be
others: a digest or a NaN scan then reads them too, at every launch made with the plan (the
shim keeps it), and a NaN in one of them is blamed on the launch. ResNet-18 read half of its
bytes so under `--digest`.

So each process remembers the guessed extents of the plans it keeps (GuessedExtents), and
when a launch planned later shows a buffer beginning strictly inside one of them, the
Replanner bumps the control generation: every process then drops its kept plans and asks
about each launch once more, and the plans made then are cut where the buffers begin. While
a model's first forward is planned launch by launch new starts keep coming, and each bumps;
that costs little, since those launches are asked about anyway, and such a bump, with no
launch made with a kept plan since the one before (the result drain tells `repeating`), does
not count. A program whose buffers keep moving would still replan at every turn, so a run
replans at most MAX_REPLANS times after launches were repeated, and bumps MAX_BUMPS times in
all; after that, plans keep what they were made with, as before.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable

from cudump.kernels.extents import GUESSED
from cudump.policy.snapshot.planned import PlannedCopy

MAX_REPLANS = 16
MAX_BUMPS = 256
# Extents a process remembers at most; past that it starts again from none (a bound on
# memory, far above a model's few hundred buffers).
MAX_EXTENTS = 1 << 16
# Extents looked at below a new start: in a plan made with every start known then, the
# extents of one allocation do not overlap, so the nearest below decides; a few more cover
# extents made before a start that an earlier replan could not act on (MAX_REPLANS).
NEAREST = 8


class GuessedExtents:
    """The guessed extents of one process's kept plans: [start, end) by start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starts: list[int] = []      # sorted
        self._end: dict[int, int] = {}    # start -> the farthest end of an extent there

    def keep(self, copies: Iterable[PlannedCopy]) -> None:
        with self._lock:
            for copy in copies:
                if copy.extent not in GUESSED or copy.plan.height != 1:
                    continue
                start, end = copy.plan.address, copy.plan.address + copy.plan.nbytes
                if start not in self._end:
                    if len(self._starts) >= MAX_EXTENTS:
                        self._starts.clear()
                        self._end.clear()
                    bisect.insort(self._starts, start)
                self._end[start] = max(end, self._end.get(start, 0))

    def cut_by(self, starts: Iterable[int]) -> bool:
        """Whether any of these buffer starts lies strictly inside a kept extent."""
        with self._lock:
            for value in starts:
                at = bisect.bisect_left(self._starts, value)
                for lower in self._starts[max(0, at - NEAREST):at]:
                    if self._end[lower] > value:
                        return True
        return False

    def clear(self) -> None:
        with self._lock:
            self._starts.clear()
            self._end.clear()

    def __len__(self) -> int:
        return len(self._starts)


class Replanner:
    """Has every kept plan made again (`bump`: the control generation, which makes each
    process drop its kept plans) when a new buffer start cuts a kept extent: at most
    MAX_REPLANS times after launches made with kept plans, MAX_BUMPS times in all."""

    def __init__(self, bump: Callable[[], int] | None,
                 processes: Callable[[], Iterable[GuessedExtents]]) -> None:
        self._bump = bump
        self._processes = processes
        self._lock = threading.Lock()
        self._repeated = False   # launches made with kept plans since the last bump
        self.replans = 0         # bumps that came after such launches
        self.bumps = 0

    def repeating(self) -> None:
        """Launches were made with kept plans (the result drain)."""
        self._repeated = True

    def learnt(self, extents: GuessedExtents, starts: list[int]) -> bool:
        """New buffer starts of a process, as a launch is planned: whether the kept plans
        are to be made again (and the generation was bumped for it)."""
        if self._bump is None or not starts or not extents.cut_by(starts):
            return False
        with self._lock:
            counts = self._repeated
            if self.bumps >= MAX_BUMPS or (counts and self.replans >= MAX_REPLANS):
                return False
            self.bumps += 1
            self.replans += counts
            self._repeated = False
            # Every process drops its kept plans: their extents are made again with them.
            for each in self._processes():
                each.clear()
            self._bump()
        return True
