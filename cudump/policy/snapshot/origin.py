"""Producer or propagator: where the NaN/Inf a launch left came from.

A launch that leaves NaN or Inf in a buffer that held none before either made it from finite
inputs (it *produced* it: every buffer of it that was scanned before it ran was finite) or
carried on what an input already held (it *propagated* it: the arguments that were already
non-finite are named, each with the launch that last turned its buffer non-finite, where one
did). Which launch turned which buffer non-finite is kept per process (`Makers`), by device
address range, and forgotten where a scan finds the buffer finite again or it is freed.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

# Buffers turned non-finite kept per process: the oldest is forgotten past this.
MAX_MADE = 1024

PRODUCED, PROPAGATED = "produced", "propagated"


class Maker(NamedTuple):
    """The launch that turned a buffer non-finite."""

    launch: int
    kernel: str


@dataclass(frozen=True)
class Input:
    """An argument's buffer that was already non-finite before the launch ran."""

    arg: int
    offset: int                 # byte offset of the pointer inside the argument
    maker: Maker | None         # None: no launch cudump scanned left it so

    def name(self) -> str:
        inside = f" (the pointer at byte {self.offset})" if self.offset else ""
        return f"arg {self.arg}{inside}"


@dataclass(frozen=True)
class Origin:
    """Whether a launch produced the NaN/Inf it left or propagated it, and from where."""

    inputs: tuple[Input, ...] = ()      # none: produced

    @property
    def kind(self) -> str:
        return PROPAGATED if self.inputs else PRODUCED

    @property
    def source(self) -> Input | None:
        """The input named as the source: the first one a known launch left non-finite,
        else the first."""
        known = [i for i in self.inputs if i.maker is not None]
        return (known or list(self.inputs) or [None])[0]

    @property
    def is_root(self) -> bool:
        """Where NaN/Inf begins as far as the launches cudump scanned tell: produced here, or
        read from inputs no scanned launch left non-finite (the host, a copy or a memset put
        it there). --break-on-nan stops at the first such launch, never at a launch that
        carried on another launch's NaN/Inf."""
        return all(i.maker is None for i in self.inputs)

    def fields(self) -> dict[str, object]:
        """What a report's manifest record gets: `origin`, `from_arg`, `from_launch` (and
        `from_offset`, `from_kernel`, `from_args` where there is something to say)."""
        src = self.source
        if src is None:
            return {"origin": PRODUCED}
        out: dict[str, object] = {"origin": PROPAGATED, "from_arg": src.arg,
                                  "from_launch": src.maker.launch if src.maker else None}
        if src.offset:
            out["from_offset"] = src.offset
        if src.maker is not None:
            out["from_kernel"] = src.maker.kernel
        if len(self.inputs) > 1:
            out["from_args"] = [i.arg for i in self.inputs]
        return out

    def phrase(self) -> str:
        """The end of a report's line: `its inputs were finite`, or `propagated: arg 1 was
        already non-finite (from launch 11 of K)`."""
        if not self.inputs:
            return "its inputs were finite"
        if len(self.inputs) == 1:
            (i,) = self.inputs
            made = (f"from launch {i.maker.launch} of {i.maker.kernel}" if i.maker
                    else "no launch cudump scanned left it so")
            return f"propagated: {i.name()} was already non-finite ({made})"
        parts = [i.name() + (f" (from launch {i.maker.launch} of {i.maker.kernel})"
                             if i.maker else "") for i in self.inputs]
        unknown = " (no launch cudump scanned left them so)" if self.is_root else ""
        return (f"propagated: {', '.join(parts[:-1])} and {parts[-1]} were already "
                f"non-finite{unknown}")


class Scanned(NamedTuple):
    """One buffer of a launch scanned before it ran: where it lies and whether it was
    finite then (`before`: its non-finite elements) and after (`after`; None: not scanned)."""

    arg: int
    offset: int
    start: int
    end: int
    before: int
    after: int | None


@dataclass
class _Made:
    start: int
    end: int
    maker: Maker


@dataclass
class Makers:
    """Per process: which launch last turned which device address range non-finite."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    made: dict[int, collections.deque[_Made]] = field(default_factory=dict)

    def origin(self, pid: int, launch: int, scanned: list[Scanned]) -> Origin:
        """Produced or propagated, from the scans of one launch's buffers before it."""
        inputs = []
        for s in sorted(scanned, key=lambda s: (s.arg, s.offset)):
            if s.before:
                inputs.append(Input(s.arg, s.offset, self.maker(pid, s.start, s.end, launch)))
        return Origin(tuple(inputs))

    def maker(self, pid: int, start: int, end: int, launch: int) -> Maker | None:
        """The launch before `launch` that last turned a buffer overlapping [start, end)
        non-finite, if one is known."""
        with self.lock:
            found = [m.maker for m in self.made.get(pid, ())
                     if m.start < end and start < m.end and m.maker.launch < launch]
        return max(found, default=None, key=lambda m: m.launch)

    def turned(self, pid: int, start: int, end: int, maker: Maker) -> None:
        """`maker` left [start, end) non-finite."""
        with self.lock:
            kept = self.made.setdefault(pid, collections.deque())
            kept.append(_Made(start, end, maker))
            if len(kept) > MAX_MADE:
                kept.popleft()

    def finite(self, pid: int, start: int, end: int, launch: int) -> None:
        """A scan at `launch` found [start, end) finite: what launches before it left
        non-finite there is gone."""
        self._forget(pid, start, end, launch)

    def freed(self, pid: int, start: int, end: int) -> None:
        """The allocation [start, end) is freed: nothing is known of it any more."""
        self._forget(pid, start, end, None)

    def _forget(self, pid: int, start: int, end: int, launch: int | None) -> None:
        with self.lock:
            kept = self.made.get(pid)
            if not kept:
                return
            left = [m for m in kept if not (m.start < end and start < m.end
                                            and (launch is None or m.maker.launch < launch))]
            if len(left) != len(kept):
                self.made[pid] = collections.deque(left)

    def known(self, pid: int) -> bool:
        """Whether anything is kept for the process (cheap: no lock)."""
        return bool(self.made.get(pid))
