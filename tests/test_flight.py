"""The flight recorder's reading, without a program: the ring in shared memory as the shim
leaves it, completion settled by stream order, the report's text, flight.jsonl's records."""

from __future__ import annotations

import json

import pytest

from cudump.analysis.flight import error_name, outcome, report_lines, settle
from cudump.rundir.flight import (
    FlightArg,
    FlightFormatError,
    FlightLaunch,
    FlightLog,
    FlightProcess,
    read_flight,
    write_flight,
)
from cudump.wire import protocol as p
from cudump.wire.shm import SharedFile


def launch(n: int, status: str, stream: str = "0x10", thread: int = 7,
           api: str = "cuLaunchKernel", kernel: str = "k(int*)") -> FlightLaunch:
    return FlightLaunch(pid=1, launch=n, kernel=kernel, status=status, stream=stream,
                        thread=thread, api=api, grid=[1, 1, 1], block=[32, 1, 1])


def test_the_ring_is_read_from_shared_memory_whole_slots_only():
    shared = SharedFile("cudump-test", 4096, flight_slots=4)
    try:
        mem = shared._map
        head = p.CONTROL_OFFSETS["flight_head"]
        mem[head:head + 8] = (6).to_bytes(8, "little")      # launches 0..5: 2..5 kept
        at = p.CONTROL_OFFSETS["first_error"]
        mem[at:at + 4] = (700).to_bytes(4, "little", signed=True)
        for pos in range(2, 6):
            slot = p.FLIGHT_SLOT.pack(
                ready=0 if pos == 4 else pos + 1, done=pos + 1 if pos < 3 else 0, seq=pos + 1,
                stream=0x10, tid=7, id=3, api=0, grid=[1, 1, 1], block=[32, 1, 1],
                flags=int(p.FlightFlag.RETURNED | p.FlightFlag.MARKED), kept=8, nbytes=8,
                params=(0xDEAD0000).to_bytes(8, "little"))
            start = shared.flight_offset + (pos % 4) * p.FLIGHT_SLOT_SIZE
            mem[start:start + len(slot)] = slot
        ring = shared.flight()
        assert ring is not None
        assert (ring.slots, ring.head, ring.first_error) == (4, 6, 700)
        # Position 4 was being written when the process stopped: left out.
        assert [r["position"] for r in ring.records] == [2, 3, 5]
        assert [r["seq"] for r in ring.records] == [3, 4, 6]
        assert shared.flight_offset % p.COUNTS_ALIGN == 0
        assert len(mem) == shared.flight_offset + 4096      # whole pages
    finally:
        shared.close()
    assert SharedFile("cudump-test", 4096).flight() is None


def test_a_launch_before_a_completed_one_on_its_stream_completed():
    launches = [launch(1, "in flight"), launch(2, "unknown"), launch(3, "completed"),
                launch(4, "in flight"), launch(5, "in flight", stream="0x20"),
                launch(6, "completed", stream="0x30")]
    settle(launches)
    assert [x.status for x in launches] == ["completed", "completed", "completed",
                                            "in flight", "in flight", "completed"]
    found = outcome(launches)
    assert found.last_completed is launches[5]
    assert [x.launch for x in found.in_flight] == [4, 5]
    assert found.culprit is launches[3]


def test_the_default_stream_per_thread_is_one_per_thread():
    launches = [launch(1, "in flight", stream="0x0", thread=7, api="cuLaunchKernel_ptsz"),
                launch(2, "completed", stream="0x0", thread=8, api="cuLaunchKernel_ptsz"),
                launch(3, "in flight", stream="0x0", thread=7),
                launch(4, "completed", stream="0x0", thread=8)]
    settle(launches)
    assert [x.status for x in launches] == ["in flight", "completed", "completed", "completed"]


def test_the_report_of_a_failed_launch_and_of_nothing_recorded():
    proc = FlightProcess(pid=1, slots=8, recorded=2, kept=2, first_error=1,
                         error=error_name(1), ended="failed with CUDA_ERROR_INVALID_VALUE")
    bad = launch(2, "failed")
    bad.rc, bad.error = 1, "CUDA_ERROR_INVALID_VALUE"
    bad.args = [FlightArg(0, "int*", "0x0", 0, "null")]
    bad.params_size = 8
    bad.params = "00" * 8
    lines = report_lines(proc, [launch(1, "completed"), bad])
    assert lines == [
        "cudump: flight: no launch was in flight when the program failed with "
        "CUDA_ERROR_INVALID_VALUE; the last to complete was launch 1 of k(int*)",
        "cudump: flight: launch 2 of k(int*) (stream 0x10, thread 7) returned "
        "CUDA_ERROR_INVALID_VALUE; its arguments:",
        "cudump: flight:   arg0  int* = 0x0  -> null"]
    assert report_lines(proc, [], "process 1: ") == [
        "cudump: flight: process 1: no launch was recorded"]
    assert error_name(719) == "CUDA_ERROR_LAUNCH_FAILED"
    assert error_name(12345) == "CUDA error 12345"


def test_records_round_trip_and_a_damaged_line_is_named(tmp_path):
    one = launch(1, "in flight")
    one.args = [FlightArg(0, "int*", "0xdead0000", 0xDEAD0000, "outside every allocation")]
    one.culprit = True
    log = FlightLog([FlightProcess(1, 8, 1, 1)], [one])
    write_flight(tmp_path, log)
    again = read_flight(tmp_path)
    assert again == log
    path = tmp_path / "flight.jsonl"
    lines = path.read_text().splitlines()
    broken = json.loads(lines[1])
    broken["status"] = "lost"
    path.write_text(lines[0] + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(FlightFormatError, match=r"flight.jsonl:2: not a recorded launch: "
                                                r"status 'lost'"):
        read_flight(tmp_path)
    path.write_text('{"record": "process", "pid": "one"}\n')
    with pytest.raises(FlightFormatError, match=r":1: not a process record: field 'pid': "
                                                r"expected a whole number"):
        read_flight(tmp_path)


def test_a_graph_launch_in_flight_on_a_lost_context():
    proc = FlightProcess(pid=1, slots=8, recorded=2, kept=2, first_error=700,
                         error=error_name(700), ended="failed with CUDA_ERROR_ILLEGAL_ADDRESS")
    graph = launch(2, "in flight", kernel="graph launch", api="cuGraphLaunch")
    graph.graph = 3
    assert report_lines(proc, [launch(1, "completed"), graph]) == [
        "cudump: flight: graph launch 2 (graph 3) (stream 0x10, thread 7) was in flight when "
        "the program failed with CUDA_ERROR_ILLEGAL_ADDRESS; the last to complete was launch 1 "
        "of k(int*)",
        "cudump: flight: the likely culprit: the first launch on stream 0x10 that did not "
        "complete (a graph launch: one of its kernels)"]


def test_a_launch_names_where_it_came_from(tmp_path, capsys):
    """A slot's scope, step and source numbers, in the process's names: in the report, and
    in flight.jsonl (Where.fields()), read back as written; a damaged one is named."""
    from cudump.controller.flight import launches_of
    from cudump.launches.process import FuncInfo, ProcessState
    from cudump.launches.scopes import ScopeKind, ScopeNode
    from cudump.wire.shm import FlightRing
    proc = ProcessState(1, 0, "python3")
    proc.funcs[3] = FuncInfo(3, 0x1000, "_Z1kPi", "k(int*)", [(0, 8)])
    for node in (ScopeNode(1, 0, ScopeKind.FORWARD, "Net"),
                 ScopeNode(2, 1, ScopeKind.BACKWARD, "fc"),
                 ScopeNode(9, 0, ScopeKind.SOURCE, "train.py:57")):
        proc.scopes.add(node)
    slot = dict(position=0, ready=1, done=0, seq=5, stream=0x10, tid=7, id=3, api=0,
                grid=[1, 1, 1], block=[32, 1, 1], smem=0, graph=0, rc=0, kept=8, nbytes=8,
                flags=int(p.FlightFlag.RETURNED | p.FlightFlag.MARKED),
                params=(0xDEAD0000).to_bytes(8, "little"), scope=2, step=1, source=9)
    (made,) = launches_of(proc, FlightRing(8, 1, 700, [slot]))
    assert made.name == "launch 5 of k(int*) in fc (backward, step 0) at train.py:57"
    plain = dict(slot)
    del plain["scope"], plain["step"], plain["source"]
    assert launches_of(proc, FlightRing(8, 1, 700, [plain]))[0].name == "launch 5 of k(int*)"
    record = FlightProcess(pid=1, slots=8, recorded=1, kept=1, first_error=700,
                           error=error_name(700), ended="failed with CUDA_ERROR_ILLEGAL_ADDRESS")
    assert report_lines(record, [made])[0].startswith(
        "cudump: flight: launch 5 of k(int*) in fc (backward, step 0) at train.py:57 (stream "
        "0x10, thread 7) was in flight")
    log = FlightLog([record], [made])
    write_flight(tmp_path, log)
    line = json.loads((tmp_path / "flight.jsonl").read_text().splitlines()[1])
    assert {k: line[k] for k in ("scope", "layer", "pass", "step", "source")} == {
        "scope": ["Net", "fc"], "layer": "fc", "pass": "backward", "step": 0,
        "source": "train.py:57"}
    assert read_flight(tmp_path) == log
    from cudump.commands.show import _show_flight
    _show_flight(tmp_path, None)
    table = capsys.readouterr().out.splitlines()
    assert table[-3].split()[-1] == "where"
    assert table[-2].endswith(" in fc (backward, step 0) at train.py:57")
    line["step"] = "two"
    (tmp_path / "flight.jsonl").write_text(json.dumps(record.to_json()) + "\n"
                                           + json.dumps(line) + "\n")
    with pytest.raises(FlightFormatError, match=r":2: not a recorded launch: field 'step'"):
        read_flight(tmp_path)
