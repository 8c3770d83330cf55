"""The trace's records and lines of a batch of launch events (cudump/policy/trace.py): what a
batch formats once for each way a kernel is launched is what each event says alone."""

from __future__ import annotations

import json

import pytest

from cudump.launches.process import FuncInfo, ProcessState
from cudump.launches.scopes import ScopeKind, ScopeNode
from cudump.policy.trace import count_launches, format_events
from cudump.wire import protocol as p

CAPTURED = int(p.LaunchFlag.CAPTURED)
GRAPH = int(p.LaunchFlag.GRAPH)


def process(rank: int | None = None) -> ProcessState:
    funcs = {fid: FuncInfo(id=fid, handle=0x1000 + fid, mangled=f"_Z1k{fid}Pf",
                           demangled=f'void k{fid}<"{fid}">(float*)', params=None)
             for fid in range(3)}
    proc = ProcessState(pid=4321, ppid=1, exe="prog", rank=rank, funcs=funcs)
    for node in (ScopeNode(1, 0, ScopeKind.RANGE, "train"),
                 ScopeNode(2, 1, ScopeKind.FORWARD, "layer1.conv"),
                 ScopeNode(3, 0, ScopeKind.SOURCE, "train.py:57")):
        proc.scopes.add(node)
    return proc


BASE = (7, 1, 0, [4, 1, 1], [128, 1, 1], 0, 0x7f00, 0, 0, 0, 0, 0, 0, 77, 0, 0, 0)
# Another value for each field of an event but its sequence number, rc and tid.
OTHER = {1: 2, 2: 1, 3: [4, 2, 1], 4: [256, 1, 1], 5: 48, 6: 0, 7: 1, 8: CAPTURED,
         10: 1, 11: 1, 12: 1, 14: 2, 15: 3, 16: 3}


def alike_but(index: int, flags: int) -> list[tuple]:
    """Two events of a kernel launched alike, and a third that differs from them in the one
    field `index`."""
    first = list(BASE)
    first[8] = flags
    second = list(first)
    second[0] = 8
    third = list(first)
    third[0] = 9
    third[index] = OTHER[index] if index != 8 else flags | CAPTURED
    return [tuple(first), tuple(second), tuple(third)]


@pytest.mark.parametrize("index", sorted(OTHER))
@pytest.mark.parametrize("flags", [0, GRAPH])
@pytest.mark.parametrize("rank", [None, 2])
def test_a_batch_says_of_each_event_what_the_event_alone_says(index, flags, rank):
    proc = process(rank)
    rows = alike_but(index, flags)
    alone = [format_events(proc, [r]) for r in rows]
    records, lines = format_events(proc, rows)
    assert records == [rec for recs, _ in alone for rec in recs]
    assert lines == [line for _, ls in alone for line in ls]
    assert len(set(lines[0:2])) == 2 and len(records) == 3


def test_an_event_record_and_line():
    proc = process(rank=2)
    rows = [(7, 1, 0, [4, 1, 1], [128, 1, 1], 0, 0x7f00, 0, 0, 0, 0, 0, 0, 77, 0, 0, 0),
            (8, 1, 0, [4, 1, 1], [128, 1, 1], 0, 0x7f00, 0, 0, 0, 0, 0, 0, 77, 0, 0, 0),
            (9, 1, 0, [4, 1, 1], [128, 1, 1], 0, 0x7f00, 0, GRAPH, 0, 5, 3, 1, 77, 0, 0, 0),
            (10, 1, 0, [4, 1, 1], [128, 1, 1], 0, 0x7f00, 0, 0, 700, 0, 0, 0, 77, 0, 0, 0)]
    records, lines = format_events(proc, rows)
    assert [json.loads(r)["launch"] for r in records] == [7, 8, 9]   # the failed one left out
    first, graph = json.loads(records[0]), json.loads(records[2])
    assert first == {"event": "launch", "launch": 7, "pid": 4321, "rank": 2, "device": 0,
                     "kernel": 'void k1<"1">(float*)', "mangled": "_Z1k1Pf",
                     "grid": [4, 1, 1], "block": [128, 1, 1], "smem": 0,
                     "stream": "0x7f00", "api": p.api_name(0), "captured": False}
    assert (graph["event"], graph["graph"], graph["replay"], graph["node"]) == \
        ("graph-kernel", 5, 3, 1)
    assert lines[1] == ('cudump: #8 pid=4321 rank=2 dev=0 void k1<"1">(float*) grid=(4,1,1) '
                        "block=(128,1,1) smem=0 stream=0x7f00")
    assert lines[2].startswith("cudump: #9 pid=4321 rank=2 dev=0 graph=5 replay=3 node=1 ")
    count_launches(proc, rows)
    assert proc.funcs[1].launches == 2    # direct launches that succeeded


def test_an_event_record_says_where_the_launch_came_from():
    """A launch's scope, step and source in the record, by the names the process announced;
    a scope not yet announced says nothing of itself."""
    proc = process()
    rows = [(7, 1, 0, [4, 1, 1], [128, 1, 1], 0, 0x7f00, 0, 0, 0, 0, 0, 0, 77, 2, 3, 3),
            (8, 1, 0, [4, 1, 1], [128, 1, 1], 0, 0x7f00, 0, 0, 0, 0, 0, 0, 77, 9, 0, 0)]
    records, _ = format_events(proc, rows)
    first, unknown = (json.loads(r) for r in records)
    assert (first["scope"], first["layer"], first["pass"], first["step"], first["source"]) == \
        (["train", "layer1.conv"], "layer1.conv", "forward", 2, "train.py:57")
    assert not {"scope", "layer", "pass", "step", "source"} & set(unknown)


def scoped_process() -> ProcessState:
    from cudump.launches.scopes import ScopeKind, ScopeNode
    proc = process(rank=1)
    for node in (ScopeNode(1, 0, ScopeKind.FORWARD, "ResNet"),
                 ScopeNode(2, 1, ScopeKind.FORWARD, "layer3.0.conv1"),
                 ScopeNode(9, 0, ScopeKind.SOURCE, "train.py:57")):
        proc.scopes.add(node)
    return proc


def test_a_line_names_where_its_launch_came_from(monkeypatch):
    """Rows that carry the scope, step and source numbers (after the fields of today) end
    their line with the launch's where; a launch with none, or with nodes not yet announced,
    keeps the line it had."""
    proc = scoped_process()
    rows = [(*BASE[:14], 2, 3, 9), (*BASE[:13], 78, 0, 0, 0), (*BASE[:14], 5, 0, 0)]
    records, lines = format_events(proc, rows)
    assert lines[0].endswith(" stream=0x7f00 in layer3.0.conv1 (forward, step 2) at train.py:57")
    assert lines[1].endswith(" stream=0x7f00") and lines[2].endswith(" stream=0x7f00")
