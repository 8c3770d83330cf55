"""What the shim tells that no launch carries (MSG_NOTICE): one warning line each, and the
counts summary.json keeps of some."""

from __future__ import annotations

from typing import Any

from cudump.analysis.flight import error_name
from cudump.console import warn
from cudump.controller.run_state import Controller
from cudump.wire import protocol as p


def _count(ctl: Controller, field: str, n: int) -> None:
    """Adds n to a count of the snapshot tally (summary.json), where snapshots are taken."""
    snapshots = ctl.snapshots
    if snapshots is not None:
        with snapshots.state.lock:
            tally = snapshots.state.tally
            setattr(tally, field, getattr(tally, field) + n)


def notice(ctl: Controller, pid: int, n: dict[str, Any]) -> None:
    """One notice of process `pid` (p.NOTICE's fields)."""
    kind = n["kind"]
    if kind == p.NoticeKind.DEVICE_GRAPH:
        warn(f"graph {n['graph']} of process {pid} was instantiated for device launch: cudump "
             f"sees its launches from the host only; launches from device code are neither "
             f"traced nor snapshotted")
    elif kind == p.NoticeKind.GRAPH_SET:
        warn(f"graph {n['graph']} of process {pid} had a node set in its executable graph "
             f"alone (cuGraphExec*SetParams, an event, or cuGraphNodeSetEnabled): cudump runs "
             f"it unchanged from now on, and neither scans nor snapshots its kernels")
    elif kind == p.NoticeKind.GRAPH_LEFT_OUT:
        _count(ctl, "graph_nodes_left_out", n["detail"])
        warn(f"graph {n['graph']} of process {pid}: its last {n['detail']} kernel node(s) "
             f"found no room in a replay's plan ({p.MAX_COPIES} buffers at most): cudump "
             f"neither scans nor snapshots them")
    elif kind == p.NoticeKind.WATCH_EXACT:
        _count(ctl, "watch_fallbacks", 1)
        warn(f"--watch-nan: process {pid} could not launch the batched scan "
             f"({error_name(n['detail'])}); it scans every launch exactly from now on, as "
             f"--check-nan does")
