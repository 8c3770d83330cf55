"""Where a buffer given only by a pointer ends.

A pointer into a linear allocation says where a buffer begins, not where it
ends. Without a rule's `count`, cudump takes it to the end of the allocation
(`extent: allocation-rest`). A caching allocator (PyTorch's, most frameworks')
hands out many tensors from one large allocation, so that would run over every
tensor behind this one: a digest or a NaN scan of a 64-byte bias would read
the rest of a 2 GiB segment, and a NaN in an unrelated tensor would be blamed
on it. Every buffer a launch passes begins where it is: so a buffer is cut
where the next buffer cudump has seen, in this launch or an earlier one of the
same process, begins inside the same allocation (`extent: to-next-buffer`).
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field, replace

from cudump.kernels.geometry import Allocation, CopyPlan

# A guessed extent is bounded: a pointer into an arena (JAX reserves most of the GPU's
# memory as one allocation, and every buffer is a pointer into it) must never mean copying,
# scanning or writing the rest of the arena. A pointer to the start of an allocation of up
# to WHOLE_LIMIT bytes takes the allocation whole (one buffer, one allocation, as a plain
# cudaMalloc gives); any other guess stops after GUESS_LIMIT bytes (`extent: capped`).
# A rule's `count` gives any length.
WHOLE_LIMIT = 4 << 30
GUESS_LIMIT = 256 << 20

# How a guessed extent was found, as the manifest's `extent` says (a tensor map's, or a rule's
# `count`, is no guess).
ALLOCATION_REST = "allocation-rest"    # to the end of the allocation
TO_NEXT_BUFFER = "to-next-buffer"      # to where the next known buffer begins
CAPPED = "capped"                      # stopped after GUESS_LIMIT
GUESSED = frozenset({ALLOCATION_REST, TO_NEXT_BUFFER, CAPPED})

# Buffer starts kept per process: a bound on memory over a long run, not a
# figure any real program comes near (a training step passes a few hundred).
MAX_STARTS = 1 << 20


@dataclass
class KnownStarts:
    """Buffer starts seen in the launches of one process, per allocation (base and size),
    until the allocation is freed: memory made again at the same place holds other buffers."""
    by_allocation: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def learn(self, pointers: list[tuple[int, Allocation]]) -> list[int]:
        """Adds the pointer values of one launch, each with the allocation it lies in;
        returns those not known before."""
        new: list[int] = []
        with self.lock:
            for value, alloc in pointers:
                if self.count >= MAX_STARTS:
                    break
                starts = self.by_allocation.setdefault((alloc.base, alloc.size), [])
                at = bisect.bisect_left(starts, value)
                if at == len(starts) or starts[at] != value:
                    starts.insert(at, value)
                    self.count += 1
                    new.append(value)
        return new

    def forget(self, alloc: Allocation) -> None:
        """The allocation is gone: so are the buffers that began in it."""
        with self.lock:
            self.count -= len(self.by_allocation.pop((alloc.base, alloc.size), []))

    def next_after(self, address: int, alloc: Allocation) -> int | None:
        """The first known start past `address` inside its allocation, if any."""
        with self.lock:
            starts = self.by_allocation.get((alloc.base, alloc.size))
            if not starts:
                return None
            at = bisect.bisect_right(starts, address)
            return starts[at] if at < len(starts) and starts[at] < alloc.end else None


def cut_at_next(plan: CopyPlan, next_start: int | None) -> CopyPlan:
    """A 1-D plan cut short, in whole elements, where another buffer begins inside it."""
    if next_start is None or plan.height != 1 or not (
            plan.address < next_start < plan.address + plan.nbytes):
        return plan
    element = max(1, plan.nbytes // max(1, plan.shape[0]))
    count = (next_start - plan.address) // element
    if count < 1:
        return plan
    return replace(plan, width_bytes=count * element, pitch=count * element,
                   shape=(count, *plan.shape[1:]))


def cap_guess(plan: CopyPlan, alloc: Allocation) -> CopyPlan:
    """A 1-D guessed plan bounded as WHOLE_LIMIT and GUESS_LIMIT say, in whole elements."""
    if plan.height != 1 or plan.nbytes <= GUESS_LIMIT or (
            plan.address == alloc.base and alloc.size <= WHOLE_LIMIT):
        return plan
    element = max(1, plan.nbytes // max(1, plan.shape[0]))
    count = max(1, GUESS_LIMIT // element)
    return replace(plan, width_bytes=count * element, pitch=count * element,
                   shape=(count, *plan.shape[1:]))
