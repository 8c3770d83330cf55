"""--timeline FILE: the run as trace-event JSON, checked event by event against the Trace
Event Format (the keys each phase needs, their types, and metadata naming every track)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cudump.launches.events import EVENT_FIELDS
from cudump.launches.process import FuncInfo, ProcessState
from cudump.rundir.manifest import SnapshotRecord
from cudump.rundir.timeline import SLICE_US, STREAM_TIDS, Timeline
from cudump.wire import protocol as p

VEC_ADD = "vecAdd(float const*, float const*, float*, int)"
NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index",
         "process_labels"}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate(doc: Any) -> list[dict[str, Any]]:
    """The events of a trace-event file; AssertionError for anything the format forbids."""
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), "no traceEvents"
    events = doc["traceEvents"]
    named_pids: set[int] = set()
    named_tids: set[tuple[int, int]] = set()
    used: set[tuple[int, int]] = set()
    for event in events:
        assert isinstance(event, dict), event
        ph = event.get("ph")
        assert ph in ("X", "i", "M"), event
        assert isinstance(event.get("name"), str) and event["name"], event
        for key in ("pid", "tid"):
            assert isinstance(event.get(key), int) and not isinstance(event[key], bool), event
        if "args" in event:
            assert isinstance(event["args"], dict), event
        if ph == "M":
            assert event["name"] in NAMES, event
            assert "ts" not in event or _number(event["ts"]), event
            if event["name"].endswith("_name"):
                assert isinstance(event["args"].get("name"), str), event
                if event["name"] == "process_name":
                    named_pids.add(event["pid"])
                else:
                    named_tids.add((event["pid"], event["tid"]))
            elif event["name"].endswith("_sort_index"):
                assert isinstance(event["args"].get("sort_index"), int), event
            continue
        assert _number(event.get("ts")) and event["ts"] >= 0, event
        if ph == "X":
            assert _number(event.get("dur")) and event["dur"] >= 0, event
        else:
            assert event.get("s", "t") in ("g", "p", "t"), event
        used.add((event["pid"], event["tid"]))
    missing_pids = {pid for pid, _ in used} - named_pids
    assert not missing_pids, f"processes without process_name: {missing_pids}"
    missing = used - named_tids
    assert not missing, f"tracks without thread_name: {missing}"
    return events


def load(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    doc = json.loads(path.read_text())
    return validate(doc), doc


def track_names(events: list[dict[str, Any]]) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == "thread_name"}


def test_threads_on_their_streams(fake, cudump_run, tmp_path: Path) -> None:
    """Eight threads, each launching 20 times on its own stream: a slice per launch on its
    thread's track and on its stream's, no trace lines on stderr."""
    out = tmp_path / "timeline.json"
    ran = cudump_run([str(fake.programs["threads"]), "20"], "--timeline", str(out))
    assert ran.returncode == 0, ran.stderr
    assert "cudump: #" not in ran.stderr                    # no per-launch lines
    assert not (ran.run_dir / "trace.jsonl").exists()
    assert f"cudump: timeline: {out} (" in ran.stderr
    events, doc = load(out)
    names = track_names(events)
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["name"] for e in slices} == {"vecAdd"}
    on_streams = [e for e in slices if e["tid"] >= STREAM_TIDS]
    on_threads = [e for e in slices if e["tid"] < STREAM_TIDS]
    assert len(on_streams) == len(on_threads) == 160
    streams = Counter(names[(e["pid"], e["tid"])] for e in on_streams)
    threads = Counter(e["tid"] for e in on_threads)
    assert sorted(streams.values()) == [20] * 8 and sorted(threads.values()) == [20] * 8
    assert all(name.startswith("stream 0x") and name.endswith("(device 0)") for name in streams)
    (pid,) = {e["pid"] for e in slices}
    assert {e["args"]["thread"] for e in on_streams} == set(threads)
    args = on_streams[0]["args"]
    assert args["kernel"] == VEC_ADD
    assert (args["grid"], args["block"], args["smem"]) == ([16, 1, 1], [256, 1, 1], 0)
    assert names[(pid, on_threads[0]["tid"])].startswith("thread ")
    process = [e for e in events if e["name"] == "process_name" and e["pid"] == pid]
    assert process[0]["args"]["name"] == f"threads (pid {pid})"
    assert doc["otherData"]["events"] == len(events) - 3       # cudump's own names aside
    assert not doc["otherData"]["full"]


def test_nan_reports_and_their_snapshots_are_instants(fake, cudump_run, tmp_path: Path) -> None:
    out = tmp_path / "nans.json"
    ran = cudump_run([str(fake.programs["nans"]), "40", "37", "23"], "--check-nan",
                     "--timeline", str(out))
    assert ran.returncode == 0, ran.stderr
    events, _ = load(out)
    launches = [e for e in events if e["ph"] == "X" and e["tid"] >= STREAM_TIDS]
    assert [e["args"]["launch"] for e in launches] == list(range(1, 41))
    instants = [e for e in events if e["ph"] == "i"]
    (nan,) = [e for e in instants if e["name"] == "NaN/Inf"]
    assert (nan["args"]["launch"], nan["args"]["arg"], nan["args"]["nonfinite"],
            nan["args"]["first_nonfinite"]) == (23, 2, 1, 37)
    assert nan["s"] == "t" and nan["tid"] >= STREAM_TIDS
    taken = sorted(e["name"] for e in instants if e["name"].startswith("snapshot:"))
    assert taken == ["snapshot: arg 0 after", "snapshot: arg 1 after", "snapshot: arg 2 after"]


def test_a_rules_snapshots_and_a_stop_are_instants(fake, cudump_run, tmp_path: Path) -> None:
    rules = tmp_path / "rule.yaml"
    rules.write_text("rules:\n  - kernel: vecAdd\n    skip: 4\n    count: 2\n    args: [2]\n"
                     "    format: npy\n")
    commands = tmp_path / "cmds"
    commands.write_text("info launch\n")
    out = tmp_path / "rule.json"
    ran = cudump_run([str(fake.programs["nans"]), "10", "37"], "--rule", str(rules),
                     "--break", "vecAdd if arg3 > 1000", "--batch", str(commands),
                     "--timeline", str(out))
    assert ran.returncode == 0, ran.stderr
    events, _ = load(out)
    instants = [e for e in events if e["ph"] == "i"]
    taken = [(e["name"], e["args"]["launch"]) for e in instants
             if e["name"].startswith("snapshot")]
    assert sorted(taken) == [("snapshot: arg 2 after", 5), ("snapshot: arg 2 after", 6),
                             ("snapshot: arg 2 before", 5), ("snapshot: arg 2 before", 6)]
    assert all(e["args"]["file"].endswith(".npy") for e in instants
               if e["name"].startswith("snapshot"))
    (stop,) = [e for e in instants if e["name"].startswith("stop:")]
    assert stop["name"] == "stop: breakpoint 1" and stop["args"]["launch"] == 1
    assert stop["tid"] == stop["pid"]                       # on the main thread's track


def test_graph_launches_and_their_kernels(fake, cudump_run, bare_run, tmp_path: Path) -> None:
    program = [str(fake.programs["capture"]), "--copy"]
    out = tmp_path / "graphs.json"
    ran = cudump_run(program, "--timeline", str(out))
    assert ran.returncode == 0, ran.stderr
    events, _ = load(out)
    slices = [e for e in events if e["ph"] == "X"]
    assert sum(1 for e in slices if e["name"] == "graph launch") == 10
    nodes = [e for e in slices if "node" in e["args"] and e["tid"] >= STREAM_TIDS]
    assert nodes and {e["args"]["replay"] for e in nodes} == set(range(1, 11))
    assert sum(1 for e in slices if e["args"].get("captured")) >= 3


def test_with_trace_both_are_written(fake, cudump_run, tmp_path: Path) -> None:
    out = tmp_path / "both.json"
    ran = cudump_run([str(fake.programs["nans"]), "5", "37"], "--trace", "--timeline",
                     str(out))
    assert ran.returncode == 0, ran.stderr
    assert sum(1 for line in ran.stderr.splitlines() if line.startswith("cudump: #")) == 5
    assert len((ran.run_dir / "trace.jsonl").read_text().splitlines()) == 5
    events, _ = load(out)
    assert sum(1 for e in events if e["ph"] == "X") == 10   # thread and stream tracks


def test_bad_timeline_paths_are_one_line_and_nothing_runs(fake, cudump_run,
                                                          tmp_path: Path) -> None:
    program = [str(fake.programs["nans"]), "5", "37"]
    for path, why in ((tmp_path, "is a directory"), (tmp_path / "no" / "t.json", "no directory")):
        ran = cudump_run(program, "--timeline", str(path))
        assert ran.returncode == 2 and ran.stdout == ""
        assert ran.stderr.startswith("cudump: error: --timeline") and why in ran.stderr
        assert len(ran.stderr.splitlines()) == 1
    ran = cudump_run([str(tmp_path / "missing")], "--timeline", str(tmp_path / "t.json"))
    assert ran.returncode == 127
    assert not (tmp_path / "t.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".t.json")]


# ---------------------------------------------------------------------------------------
# The Timeline itself: bounded, and valid when full


def _rows(count: int, tid: int = 7) -> list[tuple[Any, ...]]:
    values = {"seq": 0, "id": 1, "device": 0, "grid": (1, 1, 1), "block": (32, 1, 1),
              "smem": 0, "stream": 0x10, "api": 0, "flags": 0, "rc": 0, "graph": 0,
              "replay": 0, "node": 0, "tid": tid, "scope": 0, "step": 0, "source": 0}
    return [tuple({**values, "seq": n + 1}[f] for f in EVENT_FIELDS) for n in range(count)]


def _process() -> ProcessState:
    proc = ProcessState(pid=4242, ppid=1, exe="/bin/app")
    proc.funcs[1] = FuncInfo(1, 0, "_Z1kPf", "k(float*)", None)
    return proc


def _frozen_clock(at_us: int):
    """A clock that reads 0 when the timeline opens and `at_us` ever after: every event
    is received at the same time, so whatever spacing the slices have is the layout's."""
    ticks = iter([0])
    return lambda: next(ticks, at_us * 1000)


def test_launches_received_together_are_laid_out_in_order_a_slice_apart(
        tmp_path: Path) -> None:
    timeline = Timeline(tmp_path / "t.json", clock=_frozen_clock(7000))
    proc = _process()
    timeline.launches(proc, _rows(5))
    timeline.launches(proc, _rows(3))          # a second batch goes on after the first
    timeline.close()
    events, _ = load(tmp_path / "t.json")
    for track in ("thread", "stream"):
        slices = [e for e in events if e["ph"] == "X" and
                  (e["tid"] >= STREAM_TIDS) == (track == "stream")]
        assert [e["ts"] for e in slices] == [7000 + k * SLICE_US for k in range(8)], track
        assert [e["args"]["launch"] for e in slices] == [1, 2, 3, 4, 5, 1, 2, 3], track
        assert all(e["dur"] == SLICE_US for e in slices), track


def test_a_full_timeline_stops_with_a_note_and_stays_valid(tmp_path: Path) -> None:
    timeline = Timeline(tmp_path / "t.json", ["app"], limit=50, clock=_frozen_clock(100))
    proc = _process()
    timeline.process(proc)
    timeline.launches(proc, _rows(100))
    record = SnapshotRecord(kernel="k(float*)", mangled="_Z1kPf", launch=1, occurrence=1,
                            pid=4242, grid=[1, 1, 1], block=[32, 1, 1], stream="0x10", arg=0,
                            type="float*", phase="after", address="0x0", dtype="float32",
                            shape=[4], file="x.npy")
    timeline.record(record)                   # after the limit: left out
    assert timeline.full and timeline.events <= 50
    assert timeline.close() == tmp_path / "t.json"
    events, doc = load(tmp_path / "t.json")
    notes = [e for e in events if e["name"] == "timeline full: later events left out"]
    assert len(notes) == 1 and notes[0]["s"] == "g"
    assert len(events) - 4 <= 50                 # cudump's three names and the note aside
    assert doc["otherData"]["full"] is True
    assert not any(e["name"].startswith("snapshot") for e in events)
    slices = [e for e in events if e["ph"] == "X"]
    # Received together (the clock stands still), laid out in launch order a slice apart.
    stream = [e["ts"] for e in slices if e["tid"] >= STREAM_TIDS]
    assert stream == [100 + k * SLICE_US for k in range(len(stream))] and stream


def test_a_timeline_not_completed_leaves_no_file(tmp_path: Path) -> None:
    timeline = Timeline(tmp_path / "t.json")
    timeline.launches(_process(), _rows(3))
    assert timeline.close(complete=False) is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags", [p.LaunchFlag.CAPTURED, p.LaunchFlag(0)])
def test_failed_launches_are_left_out(tmp_path: Path, flags: p.LaunchFlag) -> None:
    timeline = Timeline(tmp_path / "t.json")
    rows = _rows(2, tid=0)
    rc = EVENT_FIELDS.index("rc")
    flag = EVENT_FIELDS.index("flags")
    rows = [tuple(1 if i == rc and n == 0 else (int(flags) if i == flag else v)
                  for i, v in enumerate(row)) for n, row in enumerate(rows)]
    timeline.launches(_process(), rows)
    timeline.close()
    events, _ = load(tmp_path / "t.json")
    slices = [e for e in events if e["ph"] == "X"]
    assert [e["args"]["launch"] for e in slices] == [2]      # tid 0: the stream's track only
    assert slices[0]["args"].get("captured", False) == bool(flags)


def test_scopes_are_nested_slices_around_their_launches(tmp_path: Path, monkeypatch) -> None:
    """Rows naming their innermost scope: Net > layer1 for launches 1-2, Net > layer2 for
    3, none for 4, Net again for 5 (open at the end). Each scope is one slice on the
    thread's track from its first launch's start to its last launch's end, nested."""
    from cudump.launches.scopes import ScopeKind, ScopeNode
    from cudump.rundir import timeline as timeline_module
    monkeypatch.setattr(timeline_module, "_SCOPE", len(EVENT_FIELDS))
    proc = _process()
    for node in (ScopeNode(1, 0, ScopeKind.FORWARD, "Net"),
                 ScopeNode(2, 1, ScopeKind.FORWARD, "layer1"),
                 ScopeNode(3, 1, ScopeKind.FORWARD, "layer2")):
        proc.scopes.add(node)
    rows = [(*row, scope) for row, scope in zip(_rows(5), (2, 2, 3, 0, 1), strict=True)]
    timeline = Timeline(tmp_path / "t.json", clock=_frozen_clock(1000))
    timeline.launches(proc, rows)
    timeline.close()
    events, _ = load(tmp_path / "t.json")
    scopes = sorted(((e["name"], e["ts"], e["ts"] + e["dur"], e["args"]["scope"])
                     for e in events if e.get("cat") == "scope"), key=lambda x: (x[1], -x[2]))
    at = [1000 + k * SLICE_US for k in range(6)]     # launch k+1 runs from at[k] to at[k+1]
    assert scopes == [("Net", at[0], at[3], "forward"), ("layer1", at[0], at[2], "forward"),
                      ("layer2", at[2], at[3], "forward"), ("Net", at[4], at[5], "forward")]
    assert {e["tid"] for e in events if e.get("cat") == "scope"} == {7}
    # No scopes: no scope slices (the rows of today carry none).
    monkeypatch.setattr(timeline_module, "_SCOPE", None)
    timeline = Timeline(tmp_path / "u.json", clock=_frozen_clock(1000))
    timeline.launches(proc, rows)
    timeline.close()
    events, _ = load(tmp_path / "u.json")
    assert not [e for e in events if e.get("cat") == "scope"]


def test_a_nan_instant_names_its_layer(tmp_path: Path) -> None:
    timeline = Timeline(tmp_path / "t.json")
    record = SnapshotRecord(kernel="k(float*)", mangled="_Z1kPf", launch=1, occurrence=1,
                            pid=4242, grid=[1, 1, 1], block=[32, 1, 1], stream="0x10", arg=0,
                            type="float*", phase="after", address="0x0", dtype="float32",
                            shape=[4], file=None,
                            extra={"nonfinite": 1, "nan_producer": True, "layer": "fc",
                                   "pass": "forward", "step": 3, "scope": ["Net", "fc"]})
    timeline.record(record)
    timeline.close()
    events, _ = load(tmp_path / "t.json")
    (nan,) = [e for e in events if e["name"] == "NaN/Inf"]
    assert (nan["args"]["layer"], nan["args"]["pass"], nan["args"]["step"],
            nan["args"]["scope"]) == ("fc", "forward", 3, ["Net", "fc"])
