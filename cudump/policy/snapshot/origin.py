"""Producer or propagator: where the NaN/Inf a launch left came from.

A launch that leaves NaN or Inf in a buffer that held none before either made it from finite
inputs (it *produced* it: every buffer of it that was scanned before it ran was finite) or
carried on what an input already held (it *propagated* it: the arguments that were already
non-finite are named, each with what last wrote its buffer, where cudump knows: the launch
that turned it non-finite, or a write of the program's from the host, a host-to-device copy
or a memset, with nothing after it that a scan found finite). What wrote which buffer is kept
per process (`Makers`), by device address range, and forgotten where a scan finds the buffer
finite again or it is freed. Launches and host writes are placed in one order by the launch
count each host write carries: a write made after launch L-1 comes before launch L.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

# Buffers turned non-finite kept per process: the oldest is forgotten past this.
MAX_MADE = 1024
# Address ranges the host wrote, kept per process: the one written longest ago is forgotten
# past this.
MAX_WRITTEN = 4096
# Host writes kept per address range, the latest last: a launch's scans may be weighed after
# the program wrote its inputs again (its results are read while the program runs ahead),
# and what it read is then the write before it, not the latest.
WRITES_PER_RANGE = 8

PRODUCED, PROPAGATED = "produced", "propagated"
COPY, MEMSET = "copy", "memset"     # HostWrite.kind


class Maker(NamedTuple):
    """The launch that turned a buffer non-finite."""

    launch: int
    kernel: str


def _plural(n: int, one: str) -> str:
    return f"{n} {one}" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class HostWrite:
    """A write of the program's into device memory from the host (a host-to-device copy or a
    memset), made after launch `before` - 1 of its process and before launch `before`. What
    it wrote lies in [address, end); `nbytes` of it are written (rows of a 2D write leave
    gaps)."""

    before: int
    api: str            # the driver call, without its _v2/_ptsz suffix: cuMemcpyHtoDAsync
    address: int
    end: int
    nbytes: int
    position: int       # its place in the process's host-write ring: in the order made
    elem: int = 0       # a memset's bytes per element (1, 2, 4); 0: a copy
    value: int = 0      # a memset's pattern

    @property
    def kind(self) -> str:
        return MEMSET if self.elem else COPY

    @property
    def elements(self) -> int:
        """A memset's elements (a copy's bytes)."""
        return self.nbytes // (self.elem or 1)

    def what(self) -> str:
        """`a host-to-device copy of 4 bytes`, `a memset of 16 bytes`."""
        made = "a memset" if self.elem else "a host-to-device copy"
        return f"{made} of {_plural(self.nbytes, 'byte')}"

    def phrase(self) -> str:
        """`a host-to-device copy of 4 bytes (cuMemcpyHtoDAsync) before launch 59`."""
        return f"{self.what()} ({self.api}) before launch {self.before}"

    def fields(self) -> dict[str, object]:
        """What a report's manifest record says of it (`from_host`)."""
        return {"kind": self.kind, "api": self.api, "bytes": self.nbytes,
                "address": self.address, "before_launch": self.before}


# What last wrote a buffer that was non-finite before a launch: a launch, or the host.
Source = Maker | HostWrite


def order(source: Source) -> tuple[int, int]:
    """Where a launch or a host write lies in its process's order: launch L at (2L, 0), a
    host write before launch L at (2L - 1, its ring position + 1), so that of two host
    writes between the same launches the later is the greater."""
    if isinstance(source, HostWrite):
        return 2 * source.before - 1, source.position + 1
    return 2 * source.launch, 0


@dataclass(frozen=True)
class Input:
    """An argument's buffer that was already non-finite before the launch ran."""

    arg: int
    offset: int                 # byte offset of the pointer inside the argument
    maker: Source | None        # None: nothing cudump saw left it so

    @property
    def launch(self) -> Maker | None:
        """The launch that left it so, if one did."""
        return self.maker if isinstance(self.maker, Maker) else None

    @property
    def host(self) -> HostWrite | None:
        """The host write that last wrote it, if one did."""
        return self.maker if isinstance(self.maker, HostWrite) else None

    def made(self) -> str:
        """`from launch 11 of K`, `from a host-to-device copy of 4 bytes (API) before launch
        59`, or '' (unknown)."""
        if self.launch is not None:
            return f"from launch {self.launch.launch} of {self.launch.kernel}"
        if self.host is not None:
            return f"from {self.host.phrase()}"
        return ""

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
        else the first one the host wrote, else the first."""
        launches = [i for i in self.inputs if i.launch is not None]
        hosts = [i for i in self.inputs if i.host is not None]
        return (launches or hosts or list(self.inputs) or [None])[0]

    @property
    def hosts(self) -> list[HostWrite]:
        """The host writes that left inputs non-finite, in the order of the inputs."""
        return [i.host for i in self.inputs if i.host is not None]

    @property
    def is_root(self) -> bool:
        """Where NaN/Inf begins as far as the launches cudump scanned tell: produced here, or
        read from inputs no scanned launch left non-finite (the host put it there, with a
        copy or a memset, or something cudump did not see). --break-on-nan stops at the
        first such launch, never at a launch that carried on another launch's NaN/Inf."""
        return all(i.launch is None for i in self.inputs)

    def fields(self) -> dict[str, object]:
        """What a report's manifest record gets: `origin`, `from_arg`, `from_launch` (and
        `from_offset`, `from_kernel`, `from_host`, `from_args` where there is something to
        say)."""
        src = self.source
        if src is None:
            return {"origin": PRODUCED}
        out: dict[str, object] = {"origin": PROPAGATED, "from_arg": src.arg,
                                  "from_launch": src.launch.launch if src.launch else None}
        if src.offset:
            out["from_offset"] = src.offset
        if src.launch is not None:
            out["from_kernel"] = src.launch.kernel
        if src.host is not None:
            out["from_host"] = src.host.fields()
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
            made = i.made() or "no launch cudump scanned left it so"
            return f"propagated: {i.name()} was already non-finite ({made})"
        parts = [i.name() + (f" ({i.made()})" if i.maker else "") for i in self.inputs]
        unknown = (" (no launch cudump scanned left them so)"
                   if all(i.maker is None for i in self.inputs) else "")
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
    """Per process: which launch last turned which device address range non-finite, and
    what the host last wrote where."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    made: dict[int, collections.deque[_Made]] = field(default_factory=dict)
    # pid -> (address, end) -> the latest host writes there (the latest last), the range
    # written longest ago first
    written: dict[int, dict[tuple[int, int], list[HostWrite]]] = field(default_factory=dict)

    def origin(self, pid: int, launch: int, scanned: list[Scanned]) -> Origin:
        """Produced or propagated, from the scans of one launch's buffers before it."""
        inputs = []
        for s in sorted(scanned, key=lambda s: (s.arg, s.offset)):
            if s.before:
                inputs.append(Input(s.arg, s.offset, self.maker(pid, s.start, s.end, launch)))
        return Origin(tuple(inputs))

    def maker(self, pid: int, start: int, end: int, launch: int) -> Source | None:
        """What last wrote non-finite values over [start, end) before `launch`, if it is
        known: the launch that turned it non-finite, or the host's write."""
        limit = (2 * launch, 0)
        with self.lock:
            found: list[Source] = [m.maker for m in self.made.get(pid, ())
                                   if m.start < end and start < m.end
                                   and m.maker.launch < launch]
            found += [w for writes in self.written.get(pid, {}).values() for w in writes
                      if w.address < end and start < w.end and order(w) < limit]
        return max(found, default=None, key=order)

    def turned(self, pid: int, start: int, end: int, maker: Maker) -> None:
        """`maker` left [start, end) non-finite."""
        with self.lock:
            kept = self.made.setdefault(pid, collections.deque())
            kept.append(_Made(start, end, maker))
            if len(kept) > MAX_MADE:
                kept.popleft()

    def wrote(self, pid: int, write: HostWrite) -> None:
        """The host wrote [write.address, write.end): what it wrote is not known to be
        finite until a scan finds it so."""
        key = (write.address, write.end)
        with self.lock:
            kept = self.written.setdefault(pid, {})
            writes = kept.pop(key, [])     # to the end: the range written latest
            writes.append(write)
            del writes[:-WRITES_PER_RANGE]
            kept[key] = writes
            if len(kept) > MAX_WRITTEN:
                del kept[next(iter(kept))]

    def finite(self, pid: int, start: int, end: int, launch: int, after: bool = False) -> None:
        """A scan before `launch` (`after`: after it) found [start, end) finite: what
        launches and host writes before the scan left there is gone."""
        self._forget(pid, start, end, (2 * launch + (1 if after else 0), 0))

    def cleared(self, pid: int, write: HostWrite) -> None:
        """The host wrote values finite in every floating-point type (zeros) over what
        `write` covers: what was written there before is gone."""
        self._forget(pid, write.address, write.end, order(write))

    def freed(self, pid: int, start: int, end: int) -> None:
        """The allocation [start, end) is freed: nothing is known of it any more."""
        self._forget(pid, start, end, None)

    def _forget(self, pid: int, start: int, end: int, limit: tuple[int, int] | None) -> None:
        with self.lock:
            kept = self.made.get(pid)
            if kept:
                left = [m for m in kept if not (m.start < end and start < m.end and (
                    limit is None or order(m.maker) < limit))]
                if len(left) != len(kept):
                    self.made[pid] = collections.deque(left)
            written = self.written.get(pid)
            if written:
                for (address, stop), writes in list(written.items()):
                    if not (address < end and start < stop):
                        continue
                    left = [w for w in writes if limit is not None and order(w) >= limit]
                    if left:
                        written[(address, stop)] = left
                    else:
                        del written[(address, stop)]

    def known(self, pid: int) -> bool:
        """Whether anything is kept for the process (cheap where nothing is: no lock; what
        the host wrote is kept only once the host-write ring is taken:
        nan.NanWatch.known)."""
        return bool(self.made.get(pid)) or bool(self.written.get(pid))
