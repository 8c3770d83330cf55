"""Stay-on NaN/Inf detection (--watch-nan): what a window of launches found.

The shim marks the buffers each launch made with a kept plan of scans would have scanned,
and scans them all at once at the window's end (shim/window.c). A buffer found non-finite
that was finite at its last scan comes back in MSG_WATCH with the window's launches that
touched it. Where only one did, that launch is the likely producer (the buffer was finite
before the window, and nothing else of the window touched it); otherwise the producer is
bounded to those launches, and the report says which and why. A window's finding is never
named exactly: its scan read the buffer once, at the window's end, as the element type of
the launch that marked it, and memory reused since (a caching allocator's block, a graph's
pool) may hold another type's finite data that reads as NaN/Inf that way. Only an exact
scan confirms it. What follows a finding (--watch-nan-then) is the shim's: exact
per-launch scans from then on (the next occurrence is named exactly, as --check-nan names
it, and its producer snapshotted), with `stop` the program ended once an exact scan
confirms a NaN/Inf, or windows again (`go-on`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cudump.wire import protocol as p
from cudump.wire.digest import SCAN_ELEMENT_SIZE, SUM_DTYPES

# --watch-nan-then's words and the shim's codes.
THEN_CHOICES: dict[str, p.WatchThen] = {
    "exact": p.WatchThen.EXACT, "stop": p.WatchThen.STOP, "go-on": p.WatchThen.GO_ON}
DEFAULT_THEN = "exact"
# Launches a window holds at most (the shim's default, shim/window.c).
DEFAULT_WINDOW = 128
MAX_WINDOW = 1 << 20
# Why a window's finding names no producer exactly (each report's sole-toucher words end so).
UNCONFIRMED = ("the window's scan read it once, at the window's end, as the type that "
               "launch gave it: an exact scan confirms it")


@dataclass(frozen=True)
class WindowFound:
    """One buffer a window's scan found newly non-finite."""

    address: int
    width: int
    height: int
    pitch: int
    count: int           # non-finite elements
    first_index: int     # the first of them
    first_touch: int     # the window's launches that touched the buffer: the first,
    last_touch: int      # the last,
    touches: int         # and how many (a graph's: its kernel nodes that touch it)
    func: int            # the last one's function (the process's id for it)
    mode: p.ToolMode
    first_node: int = 0  # a graph's: the first and last kernel nodes that touch it
    node: int = 0
    host: bool = False   # the host wrote it since its last scan: not a launch's finding

    @property
    def exact(self) -> bool:
        """Only one launch of the window touched the buffer: the likely producer, unconfirmed
        until an exact scan sees it."""
        return self.touches == 1

    @property
    def dtype(self) -> str | None:
        return SUM_DTYPES.get(self.mode)

    @property
    def elements(self) -> int:
        return self.width * self.height // SCAN_ELEMENT_SIZE.get(self.mode, 1)


@dataclass(frozen=True)
class WindowReport:
    """MSG_WATCH: a window's launches and what its scan found."""

    first: int           # the window's launches, first..last
    last: int
    window: int          # its number in the process (0: a graph's scan node)
    exact_next: bool     # the shim scans every launch exactly from now on
    found: tuple[WindowFound, ...]
    graph: int = 0       # a graph's scan node: the graph (first..last are its launches)
    replays: int = 0     # and how many of its scans the findings lie among

    def span(self, f: WindowFound) -> tuple[int, int]:
        """Where in the window (its launches, or the graph's kernel nodes) f was touched."""
        return (f.first_node, f.node) if self.graph else (f.first_touch, f.last_touch)

    def launches(self) -> str:
        """The launches the findings lie among, in words."""
        if not self.graph:
            return f"window {self.window} (launches {self.first}-{self.last})"
        if self.first == self.last:
            return f"graph {self.graph}'s launch {self.last}"
        return (f"graph {self.graph}'s launches {self.first}-{self.last} (its scan node's "
                f"{self.replays} scans that came in together)")

    def carried_from(self, f: WindowFound) -> WindowFound | None:
        """Another buffer found non-finite in the window that a launch touched before or
        when f's only launch touched f: f may carry on its NaN/Inf rather than be where
        it began (the earliest such buffer)."""
        if not f.exact:
            return None
        at = self.span(f)[1]
        earlier = [g for g in self.found if g is not f and self.span(g)[0] <= at]
        return min(earlier, key=lambda g: self.span(g)[0]) if earlier else None

    def named(self, f: WindowFound) -> bool:
        """Whether f's producer is named, unconfirmed: one launch of the window touched it
        and nothing found non-finite came before that launch in the window."""
        return f.exact and self.carried_from(f) is None

    @property
    def launches_found(self) -> tuple[WindowFound, ...]:
        """The findings that are the window's launches' (not what the host wrote)."""
        return tuple(f for f in self.found if not f.host)

    def bound(self, f: WindowFound) -> str:
        """Why the report names what it names."""
        source = self.carried_from(f)
        if self.graph:
            return self._graph_bound(f, source)
        if source is not None and source.host:
            return (f"the only launch of window {self.window} (launches {self.first}-"
                    f"{self.last}) that touched the buffer, which may have carried on what the "
                    f"host wrote at 0x{source.address:x} (non-finite, written since its last "
                    f"scan)")
        if source is not None:
            return (f"the only launch of window {self.window} (launches {self.first}-"
                    f"{self.last}) that touched the buffer, which may have carried on the "
                    f"NaN/Inf at 0x{source.address:x} (touched from launch "
                    f"{source.first_touch} on)")
        if f.exact:
            return (f"unconfirmed: the only launch of window {self.window} (launches "
                    f"{self.first}-{self.last}) that touched the buffer, which was finite "
                    f"before it; {UNCONFIRMED}")
        return (f"bounded to launches {f.first_touch}-{f.last_touch}, the {f.touches} of "
                f"window {self.window} (launches {self.first}-{self.last}) that touched the "
                f"buffer: the window was scanned once, at its end")


    def _graph_bound(self, f: WindowFound, source: WindowFound | None) -> str:
        where = self.launches()
        if source is not None:
            return (f"kernel node {f.node} is the only one of graph {self.graph} that touches "
                    f"the buffer, and may have carried on the NaN/Inf at "
                    f"0x{source.address:x} (touched from kernel node {source.first_node} on), "
                    f"in {where}")
        if f.exact:
            return (f"unconfirmed: kernel node {f.node} is the only one of graph "
                    f"{self.graph} that touches the buffer, in {where}; {UNCONFIRMED}")
        return (f"bounded to kernel nodes {f.first_node}-{f.node}, the {f.touches} of graph "
                f"{self.graph} that touch the buffer, in {where}: one node scans what the "
                f"graph's kernels wrote, after them all")

    def who(self, f: WindowFound, kernel: str) -> str:
        """The launch (or kernel node) a report names, or those it is bounded to."""
        if self.graph:
            if f.exact:
                return f"kernel node {f.node} ({kernel}) of graph {self.graph}"
            return (f"one of kernel nodes {f.first_node}-{f.node} (the last: {kernel}) of "
                    f"graph {self.graph}")
        if f.exact:
            return f"launch {f.last_touch} of {kernel}"
        return f"one of launches {f.first_touch}-{f.last_touch} (the last: {kernel})"


def decode(payload: bytes) -> WindowReport:
    """A MSG_WATCH payload, checked against its length."""
    if len(payload) < p.WATCH.size:
        raise p.ProtocolError("MSG_WATCH shorter than its header")
    head = p.WATCH.unpack(payload)
    n = head["nfound"]
    if len(payload) != p.WATCH.size + n * p.WATCH_FOUND.size:
        raise p.ProtocolError("MSG_WATCH's findings do not fill the message")
    found = []
    for i in range(n):
        f = p.WATCH_FOUND.unpack(payload, p.WATCH.size + i * p.WATCH_FOUND.size)
        try:
            mode = p.ToolMode(f["mode"])
        except ValueError:
            raise p.ProtocolError(f"MSG_WATCH names scan mode {f['mode']}") from None
        found.append(WindowFound(f["address"], f["width"], f["height"], f["pitch"],
                                 f["count"], f["first_index"], f["first_touch"],
                                 f["last_touch"], f["touches"], f["func"], mode,
                                 f["first_node"], f["node"], bool(f["host"])))
    return WindowReport(head["first"], head["last"], head["window"], bool(head["exact"]),
                        tuple(found), head["graph"], head["replays"])
