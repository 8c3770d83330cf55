"""The launch events of the trace stream (--trace, --timeline), as the shim reports them: a
launch's row of values from its trace ring (or MSG_LAUNCH), and a graph launch (MSG_GRAPH)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The proto_launch fields of a launch event, the order of a row's values.
EVENT_FIELDS = ("seq", "id", "device", "grid", "block", "smem", "stream", "api", "flags", "rc",
                "graph", "replay", "node", "tid", "scope", "step", "source")


@dataclass(frozen=True)
class GraphLaunch:
    """A cuGraphLaunch as the shim reports it (MSG_GRAPH)."""

    seq: int
    exec: int          # the executable graph
    stream: int
    api: str
    device: int

    def record(self, pid: int, rank: int | None = None) -> dict[str, Any]:
        """Its trace.jsonl record (`rank` where the process has one)."""
        ranked = {"rank": rank} if rank is not None else {}
        return {"event": "graph-launch", "launch": self.seq, "pid": pid, **ranked,
                "device": self.device, "graph": f"0x{self.exec:x}",
                "stream": f"0x{self.stream:x}", "api": self.api}
