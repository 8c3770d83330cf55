"""Collective kernels (NCCL's, NVSHMEM's), known by name, and each process's count of them.

The ranks of a job share no clock, but they share their collectives: every rank launches
the same all-reduce of the same step, in the same order. So each process's collectives are
numbered as it launches them, and every launch carries `collective`: how many collectives
its process had launched before it (with `collective_op`, the last one's operation). A
job's launches are then ordered across ranks by (step, collective, launch within it), the
way distributed flight recorders align ranks (analysis/job_order.py).

A kernel is a collective by its name: NCCL's `ncclDevKernel_AllReduce_Sum_f32_RING_LL`,
`ncclKernel_AllGather_RING_LL_Sum_int8_t` (the operation is the word after the prefix) and
NVSHMEM's kernels (names starting `nvshmem`). The controller asks to hear of every launch of
such a kernel (Want.TRACE, whether or not the run traces) and counts them in launch order.

A collective captured into a CUDA graph (NCCL under stream capture, PyTorch's CUDA graphs)
runs as a kernel node of each replay: the shim reports the replay's collective nodes after
the graph launch (every kernel node under --trace), each with the graph launch's number and
its node's index. They count in launch order as the launches of their own do: a replay's
nodes, in node order, come after the launches before the graph launch and before those
after it. A launch's place is kept as (launch number, node): (L, 0) for a launch of its own
and for node 0, (L, N) for node N of the replay launched as L. A launch captured into a
graph does not run and counts as none. A kernel node's record made while its replay runs
(a snapshot, digest or NaN/Inf report) takes its replay's collective nodes before it from
the graph's earlier replays; in a graph's first replay, as far as they are heard of.
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# NCCL's operation words, as reports name them.
NCCL_OPS = {
    "AllReduce": "all-reduce", "AllGather": "all-gather", "ReduceScatter": "reduce-scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send-recv", "Send": "send",
    "Recv": "recv", "AllToAll": "all-to-all", "AlltoAll": "all-to-all", "Gather": "gather",
    "Scatter": "scatter",
}
UNKNOWN_OP = "collective"     # ncclDevKernel_Generic: the operation is in its arguments
NVSHMEM_OP = "nvshmem"

# The kernel's own name inside a demangled one ("void ns::f<...>(args)" -> "f"): the word
# before the first '(' or '<', after the last "::" or space.
_NCCL = re.compile(r"(?:^|[\s:])nccl(?:Dev)?Kernel_([A-Za-z]+)")
_NVSHMEM = re.compile(r"(?:^|[\s:])nvshmem\w*")


def collective_op(demangled: str) -> str | None:
    """The collective operation a kernel's (demangled) name says ("all-reduce"), or None for
    a kernel that is no collective."""
    head = demangled.split("(", 1)[0]
    match = _NCCL.search(head)
    if match is not None:
        return NCCL_OPS.get(match.group(1), UNKNOWN_OP)
    if _NVSHMEM.search(head) is not None:
        return NVSHMEM_OP
    return None


@dataclass(frozen=True)
class CollectivePlace:
    """Where a launch lies among its process's collectives: `count` collectives were
    launched before it, the last of them an `op`."""

    count: int
    op: str


# How long a launch's where waits for the collectives launched before it that are still
# in the trace ring (read on another thread than the launch's own message, every few
# milliseconds): long enough for a loaded machine's reader to catch up, so a record names
# the right interval. What it waits for is the ring read up to where the shim had written
# it when the launch's own message came: the shim writes a launch into the ring before it
# sends any later launch's message, so every launch made before it is then heard of (a
# launch number heard through a message says nothing of the ring's launches before it).
# A wait that runs out (a ring that lost launches, a reader that stopped) is the
# process's last: its later launches take what has been heard, so a program never waits
# on it twice.
WAIT_SECONDS = 10.0


# A launch's place in its process's order: (launch number, kernel node of a graph launch's
# replay; 0 for a launch of its own).
Place = tuple[int, int]


@dataclass
class CollectiveLog:
    """One process's collective launches, by launch number (and node, inside a graph
    launch), as the controller hears of them (the trace ring and single launch messages, in
    any interleaving)."""

    seqs: list[Place] = field(default_factory=list)   # sorted
    ops: dict[Place, str] = field(default_factory=dict)
    # An executable graph's collective kernel nodes (graph -> node -> operation), learned
    # from any of its replays: every replay runs the same nodes, so a node's place is known
    # before its own replay's nodes are heard of (the shim reports them after the replay).
    graph_nodes: dict[int, dict[int, str]] = field(default_factory=dict)
    # The trace ring's head as the shim has written it, where launches come through one (a
    # message may then come before the ring's launches made ahead of it are read); and how
    # far the ring's reader has heard of them.
    ring_head: Callable[[], int] | None = None
    drained: int = 0
    kernels: int = 0            # collective functions the process announced
    lagging: bool = False       # a wait ran out: no launch waits again
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def announce(self) -> None:
        """The process announced a collective kernel function."""
        with self._cond:
            self.kernels += 1

    def heard_of(self, launches: Iterable[tuple[int, str | None]]) -> None:
        """Launches heard of, with their collective operation (None: no collective)."""
        with self._cond:
            for seq, op in launches:
                if op is not None:
                    self._add((seq, 0), op)
            self._cond.notify_all()

    def heard_of_nodes(self, nodes: Iterable[tuple[int, int, int, str | None]]) -> None:
        """Kernel nodes of graph launches heard of, as (launch number, graph, node,
        collective operation or None)."""
        with self._cond:
            for seq, graph, node, op in nodes:
                if op is not None:
                    self._add((seq, node), op)
                    self.graph_nodes.setdefault(graph, {})[node] = op
            self._cond.notify_all()

    def _add(self, place: Place, op: str) -> None:
        if place not in self.ops:
            self.ops[place] = op
            bisect.insort(self.seqs, place)

    def drained_to(self, position: int) -> None:
        """The ring's reader has heard of every launch the ring held before `position`."""
        with self._cond:
            self.drained = max(self.drained, position)
            self._cond.notify_all()

    def before(self, seq: int, wait: bool = False, graph: int = 0, node: int = 0
               ) -> CollectivePlace | None:
        """Where launch `seq` lies (kernel node `node` of it, a launch of graph `graph`):
        None while its process had launched no collective. With `wait` (a launch's own
        message, when the ring carries the others), waits a bounded time for the ring to be
        read as far as the shim has written it now."""
        with self._cond:
            if not self.kernels and not self.seqs:
                return None
            if wait and self.ring_head is not None and not self.lagging:
                try:
                    written = self.ring_head()
                except (ValueError, OSError):    # the process's shared memory is gone
                    written = self.drained
                deadline = time.monotonic() + WAIT_SECONDS
                while self.drained < written:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.lagging = True
                        break
                    self._cond.wait(left)
            # A graph's known collective nodes count as every replay of it has them, whether
            # this replay's are heard of yet or not: only the launches before it are looked
            # up, then the replay's own nodes before this one are added.
            known = self.graph_nodes.get(graph) if graph else None
            k = bisect.bisect_left(self.seqs, (seq, 0 if known is not None else node))
            op = self.ops[self.seqs[k - 1]] if k else None
            mine = [n for n in known if n < node] if known is not None else []
            if mine:
                k += len(mine)
                op = known[max(mine)]
            if k == 0 or op is None:
                return None
            return CollectivePlace(k, op)

    @property
    def count(self) -> int:
        with self._cond:
            return len(self.seqs)
