"""--watch-nan: NaN/Inf detection meant to stay on, in windows of launches, on the stand-in
driver. Each launch made with a kept plan of scans only marks its buffers; one launch of
the batched scan (cudump_scan_list) scans them at the window's end. `steps` runs three
launches a step (w = x + x, y = w * w, z = y + w) and overflows w at the poisoned steps."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from records import manifest, nan_lines, summary

from cudump.policy.snapshot.windows import WindowFound, WindowReport
from cudump.policy.snapshot.windows import decode as decode_window
from cudump.wire import protocol as p

INDEX = 37


def _stats(path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def _window_records(run_dir) -> list[dict]:
    return [r for r in manifest(run_dir) if "nan_window" in r]


def _steps(fake, *args: str) -> list[str]:
    return [str(fake.programs["steps"]), *args]


def _watched_after_the_first(cudump_run, bare_run, argv: list[str], stats: Path,
                             tmp_path: Path):
    """12 replays under --watch-nan: the program's output as bare; the first replay with a
    node of cudump's kernel before and after each of its three kernels and the probe's two
    digest nodes, then one scan node for each of the other 11; summary.json says one replay
    instrumented (and waited for) and 11 watched, against 12 instrumented under
    --check-nan. The --watch-nan run."""
    ran = cudump_run(argv, "--watch-nan", env_extra={"FAKECUDA_STATS": str(stats)})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(argv).stdout
    counts = _stats(stats)
    assert counts["tools_runs"] <= 6
    assert counts["scan_list_launches"] == 2 + 11
    done = summary(ran.run_dir)
    assert (done["graph_replays_instrumented"], done["graph_replays_watched"]) == (1, 11)
    exact = cudump_run(argv, "--check-nan", run_dir=tmp_path / "exact")
    done = summary(exact.run_dir)
    assert (done["graph_replays_instrumented"], done["graph_replays_watched"]) == (12, 0)
    return ran

def test_one_launch_in_a_window_is_named_unconfirmed(fake, cudump_run):
    """Synchronizing after every launch makes windows of one launch: the producer of w
    (step 5's first launch, launch 13) is named, but never "named exactly": a window's
    scan read w once, at the window's end, and only an exact scan confirms it."""
    ran = cudump_run(_steps(fake, "8", "1", str(INDEX), "5"), "--watch-nan")
    assert ran.returncode == 0, ran.stderr
    records = _window_records(ran.run_dir)
    assert [(r["launch"], r["producer"], r["first_nonfinite"]) for r in records] == [
        (13, "sole", INDEX)]
    line = nan_lines(ran.stderr)[0]
    assert "launch 13 of vecAdd" in line and "unconfirmed" in line
    assert not any("named exactly" in line for line in nan_lines(ran.stderr))


def test_two_candidates_are_bounded_then_named_exactly_after_the_switch(fake, cudump_run):
    """No synchronization inside a step: the window of step 5 (launches 13-15) finds w,
    touched by all three, bounded to them; the process then scans every launch exactly,
    and step 9's first launch (25) is named the producer of its NaN/Inf."""
    ran = cudump_run(_steps(fake, "12", "0", str(INDEX), "5", "9"), "--watch-nan")
    assert ran.returncode == 0, ran.stderr
    records = _window_records(ran.run_dir)
    w = records[0]
    assert (w["producer"], w["touched_by"], w["touches"]) == ("bounded", [13, 15], 3)
    assert all(r["producer"] != "sole" for r in records)  # z is carried on, not made
    assert any("bounded to launches 13-15" in line for line in nan_lines(ran.stderr))
    exact = [r for r in manifest(ran.run_dir)
             if r.get("nan_producer") and "nan_window" not in r and r["phase"] == "after"
             and r.get("origin") == "produced"]
    assert exact and exact[0]["launch"] == 25, exact


def test_go_on_keeps_windows_after_a_finding(fake, cudump_run):
    ran = cudump_run(_steps(fake, "12", "0", str(INDEX), "5", "9"), "--watch-nan",
                     "--watch-nan-then", "go-on")
    assert ran.returncode == 0, ran.stderr
    assert {r["nan_window"] for r in _window_records(ran.run_dir)} == {4, 8}


def test_a_clean_program_reports_nothing_and_its_output_is_unchanged(
        fake, cudump_run, bare_run, tmp_path):
    """And cudump's kernel runs beside the first (planned) launches only: later ones cost
    one batched scan a window."""
    stats = tmp_path / "stats"
    argv = _steps(fake, "40", "0", str(INDEX))
    ran = cudump_run(argv, "--watch-nan", "--watch-nan-window", "8",
                     env_extra={"FAKECUDA_STATS": str(stats)})
    bare = bare_run(argv)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare.stdout
    assert nan_lines(ran.stderr) == [] and _window_records(ran.run_dir) == []
    counts = _stats(stats)
    # 120 launches: the first step's three are planned with per-launch scans (two
    # launches of cudump's kernel each, at most); none after them.
    assert counts["tools_runs"] <= 6
    # The windows: each step ends with the host copy into x (a synchronous copy).
    assert 39 <= counts["scan_list_launches"] <= 41


def test_the_window_option_bounds_the_launches_of_a_window(fake, cudump_run, tmp_path):
    stats = tmp_path / "stats"
    ran = cudump_run(_steps(fake, "40", "0", str(INDEX)), "--watch-nan",
                     "--watch-nan-window", "2", env_extra={"FAKECUDA_STATS": str(stats)})
    assert ran.returncode == 0, ran.stderr
    # Three launches a step, windows of two at most: two windows a step.
    assert _stats(stats)["scan_list_launches"] >= 2 * 39


def test_nothing_of_cudumps_on_a_capturing_stream(fake, cudump_run, bare_run, tmp_path):
    """`steps ... 3`: the window of the last step's launches is open on the stream when
    it begins to capture, and a launch on another stream would end it. Its scan waits
    until the capture is over: the captured graph has the program's three nodes only."""
    argv = _steps(fake, "6", "3", str(INDEX))
    ran = cudump_run(argv, "--watch-nan")
    assert ran.returncode == 0, ran.stderr
    assert "graph nodes 3" in ran.stdout
    assert ran.stdout == bare_run(argv).stdout
    argv = [str(fake.programs["capture"])]
    ran = cudump_run(argv, "--watch-nan", run_dir=tmp_path / "capture")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(argv).stdout


def test_watch_nan_and_check_nan_are_one_or_the_other(cudump):
    done = cudump("--watch-nan", "--check-nan", "true")
    assert done.returncode != 0
    assert "give one of them" in done.stderr and "Traceback" not in done.stderr


def _found(first: int, last: int, touches: int) -> WindowFound:
    return WindowFound(0x1000 * first, 4096, 1, 4096, 1, 0, first, last, touches, 1,
                       p.ToolMode.SCAN_F32)


@pytest.mark.parametrize(("found", "named"), [
    ((_found(3, 3, 1),), [True]),
    ((_found(1, 3, 3), _found(3, 3, 1)), [False, False]),
    ((_found(5, 5, 1), _found(2, 4, 2)), [False, False]),
])
def test_a_single_toucher_is_named_only_where_nothing_non_finite_came_before(found, named):
    report = WindowReport(1, 8, 1, True, found)
    assert [report.named(f) for f in found] == named


def test_a_graph_replays_scan_node_finds_it_then_the_replay_is_named(fake, cudump_run):
    """`steps ... 2` replays a captured graph of the three launches: graph launches are
    numbered 4-15. The first replay plans the scans (and is scanned node by node); the
    later ones run the graph's copy with one batched scan node after its kernels. Step 5's
    overflow is found there, in graph launch 8, bounded to the kernel nodes that touch w;
    then, scanning exactly, step 9's replay names node 0 as the producer."""
    ran = cudump_run(_steps(fake, "12", "2", str(INDEX), "5", "9"), "--watch-nan")
    assert ran.returncode == 0, ran.stderr
    records = _window_records(ran.run_dir)
    assert records, ran.stderr
    w = records[0]
    assert (w["graph"], w["launch"], w["producer"], w["nodes"], w["touches"]) == (
        1, 8, "bounded", [0, 2], 3)
    assert any("in graph 1's launch 8" in line for line in nan_lines(ran.stderr))
    exact = [r for r in manifest(ran.run_dir)
             if r.get("origin") == "produced" and "nan_window" not in r]
    assert exact and (exact[0]["launch"], exact[0]["node"]) == (12, 0), exact


def test_a_clean_graph_loop_costs_one_scan_node_a_replay(fake, cudump_run, bare_run, tmp_path):
    stats = tmp_path / "stats"
    argv = _steps(fake, "12", "2", str(INDEX))
    ran = _watched_after_the_first(cudump_run, bare_run, argv, stats, tmp_path)
    assert nan_lines(ran.stderr) == [] and _window_records(ran.run_dir) == []


def test_stop_ends_the_program_once_an_exact_scan_confirms(fake, cudump_run):
    """A window's finding (step 5) switches the process to exact scans; step 20's NaN/Inf,
    seen by the exact scan of its launch, ends it."""
    ran = cudump_run(_steps(fake, "40", "0", str(INDEX), "5", "20"), "--watch-nan",
                     "--watch-nan-then", "stop")
    assert ran.returncode != 0
    assert "an exact scan confirmed" in ran.stderr and "SIGTERM" in ran.stderr
    assert "launches vecAdd=80" not in ran.stdout     # it did not run to its end
    assert _window_records(ran.run_dir)
    exact = [r for r in manifest(ran.run_dir) if r.get("nan_producer") and "nan_window" not in r]
    assert exact and exact[0]["launch"] == 58, exact


def test_stop_never_ends_the_program_on_a_window_finding_alone(fake, cudump_run):
    """Step 5's NaN/Inf is found by a window and never comes again: no exact scan confirms
    it, so the program runs to its end."""
    ran = cudump_run(_steps(fake, "40", "0", str(INDEX), "5"), "--watch-nan",
                     "--watch-nan-then", "stop")
    assert ran.returncode == 0, ran.stderr
    assert "launches vecAdd=80" in ran.stdout
    assert _window_records(ran.run_dir) and "ending process" not in ran.stderr


@pytest.mark.parametrize("graph", ["0", "1"])
@pytest.mark.parametrize("then", ["go-on", "stop"])
def test_memory_reused_as_another_type_is_no_finding(fake, cudump_run, bare_run, graph, then):
    """`reuse`: each step writes w as fp16 ones, then as floats whose upper halves read
    as fp16 Inf. The window is closed before the float launch marks w (eagerly), and a
    graph's scan node keeps w's later (float) scan only: nothing is found, and with
    `stop` the healthy program is not ended."""
    argv = [str(fake.programs["reuse"]), "12", graph, str(INDEX)]
    ran = cudump_run(argv, "--watch-nan", "--watch-nan-then", then)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(argv).stdout and "nonfinite 0" in ran.stdout
    assert _window_records(ran.run_dir) == [] and nan_lines(ran.stderr) == []


def test_a_batched_scan_that_cannot_run_falls_back_to_exact_scans(fake, cudump_run):
    """FAKECUDA_NO_SCAN_LIST: cudump's module has no cudump_scan_list (an older PTX). The
    first window's close says so once, counts it in summary.json, and the process scans
    every launch exactly: step 5's producer (launch 13) is still found."""
    ran = cudump_run(_steps(fake, "12", "0", str(INDEX), "5"), "--watch-nan",
                     env_extra={"FAKECUDA_NO_SCAN_LIST": "1"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.count("could not launch the batched scan") == 1, ran.stderr
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert summary["watch_fallbacks"] == 1
    exact = [r for r in manifest(ran.run_dir)
             if r.get("origin") == "produced" and "nan_window" not in r]
    assert exact and exact[0]["launch"] == 13, exact


@pytest.mark.parametrize("value", ["0", "x", "-3"])
def test_a_bad_window_is_one_line_of_error(cudump, value):
    done = cudump("--watch-nan", "--watch-nan-window", value, "true")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "--watch-nan-window" in done.stderr


def test_a_graphs_scan_node_scans_only_what_the_graph_writes(fake, cudump_run, tmp_path):
    """x is written by the host between replays, not by the graph: the probe at the replay
    that planned the scans saw its digest unchanged, and the scan node reads w, y and z
    only (three 4 KiB buffers a replay), not x."""
    def tool_bytes(steps: int) -> int:
        stats = tmp_path / f"stats{steps}"
        ran = cudump_run(_steps(fake, str(steps), "2", str(INDEX)), "--watch-nan",
                         run_dir=tmp_path / f"run{steps}",
                         env_extra={"FAKECUDA_STATS": str(stats)})
        assert ran.returncode == 0, ran.stderr
        return _stats(stats)["tool_bytes"]

    assert tool_bytes(22) - tool_bytes(12) == 10 * 3 * 4096


def test_what_the_host_wrote_is_not_a_launchs_finding(fake, cudump_run):
    """`nans`: before launch 23 the host copies inf and -inf into vecAdd's inputs. The window
    reports the output only, as possibly carried on from what the host wrote (the inputs
    are not launches' findings: the host may have put there integers a scan reads as NaN,
    or NaN itself); after the switch, the exact scans name the host's copies."""
    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23", "30"], "--watch-nan")
    assert ran.returncode == 0, ran.stderr
    records = _window_records(ran.run_dir)
    assert [(r["launch"], r["producer"]) for r in records] == [(23, "carried")], records
    lines = nan_lines(ran.stderr)
    assert "may have carried on what the host wrote" in lines[0]
    assert any("launch 30" in line and "host-to-device copy" in line for line in lines)


def test_a_broken_watch_message_is_a_protocol_error():
    head = p.WATCH.pack(first=1, last=2, nfound=2, window=1, exact=1, graph=0, replays=0,
                        reserved=0)
    with pytest.raises(p.ProtocolError):
        decode_window(head)              # two findings announced, none there
    with pytest.raises(p.ProtocolError):
        decode_window(head[:8])
    found = p.WATCH_FOUND.pack(address=0x1000, width=16, height=1, pitch=16, count=1,
                               first_index=0, first_touch=1, last_touch=1, touches=1,
                               first_node=0, host=0, func=1, mode=9, node=0)
    one = p.WATCH.pack(first=1, last=2, nfound=1, window=1, exact=1, graph=0, replays=0,
                       reserved=0)
    with pytest.raises(p.ProtocolError):
        decode_window(one + found)       # no such scan mode


def test_a_stream_destroyed_unwaited_gets_its_windows_scan_first(fake, cudump_run):
    """`steps ... 4`: the last step's window is open on a stream the program destroys
    without waiting for it. Its scan is launched before the handle goes (never on the
    destroyed stream), so the poisoned last step is still found."""
    ran = cudump_run(_steps(fake, "4", "4", str(INDEX), "4"), "--watch-nan")
    assert ran.returncode == 0, ran.stderr
    records = _window_records(ran.run_dir)
    assert records and records[0]["touched_by"] == [10, 12], records


def test_a_window_is_scanned_in_its_own_context(fake, cudump_run, bare_run):
    """`steps ... 5`: each step's window (primary context, NULL stream) is followed by a
    launch on a second context's NULL stream. The window is scanned in the context its
    launches were made in, not the closing launch's (where the stand-in, as a GPU
    without peer access, faults on the other context's memory)."""
    argv = _steps(fake, "6", "5", str(INDEX), "4")
    ran = cudump_run(argv, "--watch-nan", "--watch-nan-then", "go-on")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(argv).stdout
    records = _window_records(ran.run_dir)
    assert records and records[0]["touched_by"][0] == 13, records


def test_a_window_is_not_scanned_before_a_launch_marked_in_it_is_made(fake, cudump_run):
    """`steps ... 6`: step 4's first launch (10, w's producer) is marked, then held back
    by the stand-in until a second thread's synchronize returns. That synchronize must not
    close the window ahead of the launch (its scan would read w before 10 made it): the
    window with launch 10 in it is scanned after it, and 10 is among its touchers."""
    ran = cudump_run(_steps(fake, "6", "6", str(INDEX), "4"), "--watch-nan",
                     env_extra={"FAKECUDA_PAUSE_LAUNCH": "10"})
    assert ran.returncode == 0, ran.stderr
    records = _window_records(ran.run_dir)
    assert records and records[0]["touched_by"][0] == 10, records


def test_a_graphs_scan_node_is_made_without_a_legacy_stream_call(fake, cudump_run, bare_run):
    """`steps ... 7`: the graph is replayed on a second thread while the first captures a
    blocking stream. The scan node's list and accumulators are put on the device on the
    replay's stream, never by a synchronous call (the legacy stream, which would have
    lost the capture); and step 5's NaN/Inf is still found by the node."""
    argv = _steps(fake, "12", "7", str(INDEX), "5")
    ran = cudump_run(argv, "--watch-nan")
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    assert "graph nodes 1" in ran.stdout
    assert ran.stdout == bare_run(argv).stdout
    records = _window_records(ran.run_dir)
    assert records and records[0]["graph"] == 1, records


def test_a_free_of_memory_the_graph_does_not_use_keeps_its_scan_node(
        fake, cudump_run, bare_run, tmp_path):
    """`steps ... 8`: a scratch buffer the graph never uses is allocated and freed before
    each replay. The graph's copy with the scan node stays (its buffers are all still
    held): one scan node a replay after the first, as in a loop with no frees."""
    stats = tmp_path / "stats"
    argv = _steps(fake, "12", "8", str(INDEX))
    _watched_after_the_first(cudump_run, bare_run, argv, stats, tmp_path)


def test_a_graph_copy_made_again_uses_its_memory_again(fake, cudump_run, tmp_path):
    """`steps ... 9`: the graph's parameters are set again before every replay, so its
    copy with the scan node is made again each time: with the same pinned host memory
    and device memory, not new ones each time (12 steps take what 6 take); and step 5's
    NaN/Inf is still found (each replay, planned again, is scanned node by node)."""
    def counts(steps: int) -> dict[str, int]:
        stats = tmp_path / f"stats{steps}"
        ran = cudump_run(_steps(fake, str(steps), "9", str(INDEX), "5"), "--watch-nan",
                         "--watch-nan-then", "go-on", run_dir=tmp_path / f"run{steps}",
                         env_extra={"FAKECUDA_STATS": str(stats)})
        assert ran.returncode == 0, ran.stderr
        assert any("launch 8 of vecAdd" in line and "node 0" in line
                   for line in nan_lines(ran.stderr)), ran.stderr
        return _stats(stats)

    six, twelve = counts(6), counts(12)
    assert twelve["host_registrations"] == six["host_registrations"]
    assert twelve["mem_allocs"] == six["mem_allocs"]


def test_a_node_disabled_in_the_executable_graph_stays_disabled(fake, cudump_run, bare_run):
    """`steps ... 10`: the graph's last node is disabled in the executable graph from step 3
    on. cudump's copies of the graph (made from the graph it was instantiated from) would
    run it still; the graph is run unchanged from then on, so the program's output is its
    own, and the user is told why its kernels are no longer scanned."""
    argv = _steps(fake, "8", "10", str(INDEX))
    ran = cudump_run(argv, "--watch-nan")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(argv).stdout
    assert "cuGraphNodeSetEnabled" in ran.stderr and "runs it unchanged" in ran.stderr


def test_a_look_while_a_replays_scan_node_runs_misses_none_of_its_buffers(fake, cudump_run):
    """`steps ... 11`: after each replay the program waits for another stream, a look at the
    scan node's records while (here, FAKECUDA_RECORD_LAG) only its first job's is in. The
    last replay (step 12, graph launch 15) overflows w, and y and z with it: the buffers
    whose records come in only at the program's last wait are found too, each in launch 15
    alone, with its own count."""
    ran = cudump_run(_steps(fake, "12", "11", str(INDEX), "12"), "--watch-nan",
                     env_extra={"FAKECUDA_RECORD_LAG": "1"})
    assert ran.returncode == 0, ran.stderr
    records = _window_records(ran.run_dir)
    assert len(records) == 3, (records, ran.stderr)
    assert {(r["graph"], r["launch"]) for r in records} == {(1, 15)}
    assert all(r["first_nonfinite"] == INDEX for r in records), records


def test_a_graphs_kernel_nodes_beyond_a_plans_room_are_said_to_be_left_out(
        fake, cudump_run, bare_run):
    """`steps ... 12`: a graph of 1200 kernel nodes, more scans than one replay's plan holds
    (512 copies): its last nodes go unscanned, and cudump says so once, and counts them in
    summary.json. The program's output is its own."""
    argv = _steps(fake, "3", "12", str(INDEX))
    ran = cudump_run(argv, "--watch-nan")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(argv).stdout
    said = [line for line in ran.stderr.splitlines() if "found no room in a replay's plan" in line]
    assert len(said) == 1, ran.stderr
    left_out = summary(ran.run_dir)["graph_nodes_left_out"]
    assert 0 < left_out < 1200
    assert f"its last {left_out} kernel node(s)" in said[0]


def test_a_dead_controller_ends_the_windows(shim_lib, fake, tmp_path, spawn):
    """`steps 21 1 ...` synchronizes after every launch (a window, and its scan, each).
    cudump is killed after the first step: the windows end with it, unscanned (nobody is
    there to be told), as the rest of the shim goes pass-through, rather than one launch
    of the batched scan after each of the program's 60 launches after it. The program
    ends on its own, with its own output."""
    ready, go, stats, status = (tmp_path / n for n in ("ready", "go", "stats", "status"))
    argv = _steps(fake, "21", "1", str(INDEX))
    script = tmp_path / "target.sh"
    script.write_text(f"#!/bin/sh\n{' '.join(argv)} > {tmp_path / 'out'}\necho $? > {status}\n")
    script.chmod(0o755)
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib), "STEPS_READY": str(ready),
                        "STEPS_GO": str(go), "FAKECUDA_STATS": str(stats),
                        "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = spawn([sys.executable, "-m", "cudump", "--watch-nan", "--out", str(tmp_path / "run"),
                  str(script)], env=env, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), "the program did not get past its first step"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    go.write_text("")
    deadline = time.monotonic() + 120
    while not (status.exists() and status.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status.read_text().strip() == "0"
    bare = subprocess.run(argv, env=fake.env() | {"STEPS_READY": str(tmp_path / "r2"),
                                                   "STEPS_GO": str(go)},
                          capture_output=True, text=True, timeout=60)
    assert (tmp_path / "out").read_text() == bare.stdout
    counts = _stats(stats)
    assert counts["scan_list_launches"] <= 1, counts


def test_a_buffer_made_again_where_a_non_finite_one_was_freed_is_news(fake, cudump_run):
    """`steps ... 13` frees w after step 5 and makes it again, at the same address
    (FAKECUDA_REUSE_FREED). With go-on, step 5's window finds w, y and z; step 6's launches
    are scanned exactly (planned again after the free), and step 7's window finds the new w
    overflowed: news, though the old w at that address was known non-finite."""
    ran = cudump_run(_steps(fake, "8", "13", str(INDEX), "5", "7"), "--watch-nan",
                     "--watch-nan-then", "go-on", env_extra={"FAKECUDA_REUSE_FREED": "1"})
    assert ran.returncode == 0, ran.stderr
    assert "w reused" in ran.stdout
    records = _window_records(ran.run_dir)
    # (a window's records are numbered by its last launch: step 5's 15, step 7's 21)
    assert sorted(r["launch"] for r in records) == [15, 15, 15, 21], records
    w5 = next(r for r in records if r["touched_by"] == [13, 15])  # w: launches 13-15
    assert next(r for r in records if r["launch"] == 21)["address"] == w5["address"]
