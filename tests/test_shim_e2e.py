"""The shim and the controller end to end, on the host-memory stand-in for libcuda.so.1.

Each test program prints what it launched and allocated; cudump must report
exactly that, and the program's own output and exit status must not change.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from cudump.kernels.signature import parse_signature

PROGRAMS = [
    ["linked"],
    ["cudart_like"],
    ["cudart_like", "--per-thread"],
    ["dlsym_direct"],
    ["threads", "50"],
    ["vmm"],
    ["zed", "2"],
]


def tally(stdout: str) -> tuple[Counter[str], int]:
    """The program's own report: launches per kernel, and device allocations."""
    launches: Counter[str] = Counter()
    allocs = -1
    for line in stdout.splitlines():
        if line.startswith("launches"):
            for item in line.split()[1:]:
                name, n = item.split("=")
                launches[name] += int(n)
        m = re.match(r"allocs (\d+) bytes", line)
        if m:
            allocs = int(m.group(1))
    return launches, allocs


def by_base_name(kernels: dict[str, int]) -> Counter[str]:
    out: Counter[str] = Counter()
    for name, n in kernels.items():
        out[parse_signature(name).base_name] += n
    return out


def trace_records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("argv", PROGRAMS, ids=lambda a: "-".join(a))
def test_reports_exactly_the_launches_and_allocations_made(argv, fake, cudump_run, bare_run):
    program = [str(fake.programs[argv[0]]), *argv[1:]]
    bare = bare_run(program)
    assert bare.returncode == 0, bare.stderr
    ran = cudump_run(program, "--trace")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare.stdout  # the program's output is untouched

    made, allocs = tally(bare.stdout)
    assert sum(made.values()) > 0
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert by_base_name(summary["kernels"]) == made
    assert summary["launches"] == sum(made.values())
    assert summary["processes"] == 1
    assert summary["allocations"] == allocs

    records = trace_records(ran.run_dir)
    launches = [r for r in records if r["event"] == "launch"]
    assert len(launches) == sum(made.values())
    assert by_base_name(Counter(r["kernel"] for r in launches)) == made
    # Launch numbers are the process's sequence: strictly increasing, no repeats.
    seqs = [r["launch"] for r in launches]
    assert len(set(seqs)) == len(seqs)
    # One stderr line per launch, in the documented form.
    lines = [ln for ln in ran.stderr.splitlines() if re.match(r"cudump: #\d+ pid=\d+ ", ln)]
    assert len(lines) == len(launches)


def test_names_are_demangled_and_apis_recorded(fake, cudump_run):
    ran = cudump_run([str(fake.programs["cudart_like"]), "--per-thread"], "--trace")
    assert ran.returncode == 0, ran.stderr
    records = [r for r in trace_records(ran.run_dir) if r["event"] == "launch"]
    kernels = {r["kernel"] for r in records}
    assert "vecAdd(float const*, float const*, float*, int)" in kernels
    assert "void fill<int>(int*, int, int)" in kernels
    assert "scale" in kernels  # extern "C": no mangling, shown as is
    mangled = {r["mangled"] for r in records}
    assert "_Z6vecAddPKfS0_Pfi" in mangled
    # --per-thread resolves _ptsz variants (and cudart's legacy lookup at version
    # 4000 still gives plain cuLaunchKernel): the shim tells each variant apart.
    apis = {r["api"] for r in records}
    assert {"cuLaunchKernel_ptsz", "cuLaunchKernelEx_ptsz",
            "cuLaunchCooperativeKernel_ptsz", "cuLaunchKernel"} <= apis


def test_stream_capture_stays_valid_and_graph_launches_are_traced(fake, cudump_run, bare_run):
    program = [str(fake.programs["capture"]), "--copy"]
    assert bare_run(program).returncode == 0
    ran = cudump_run(program, "--trace")
    # capture exits 3 if anything invalidated its capture.
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert summary["captured_launches"] == 3
    assert summary["graph_launches"] == 10
    records = trace_records(ran.run_dir)
    assert sum(1 for r in records if r["event"] == "graph-launch") == 10
    assert sum(1 for r in records if r["event"] == "launch" and r["captured"]) == 3
    assert sum(1 for ln in ran.stderr.splitlines() if " graph-launch exec=" in ln) == 10


def test_exit_status_is_the_programs(fake, cudump_run):
    ran = cudump_run([str(fake.programs["exitcode"]), "3"])
    assert ran.returncode == 3
    assert json.loads((ran.run_dir / "summary.json").read_text())["exit_status"] == 3


def test_a_signal_becomes_128_plus_n_with_a_message(fake, cudump_run):
    ran = cudump_run([str(fake.programs["exitcode"]), "sig", str(int(signal.SIGSEGV))])
    assert ran.returncode == 128 + signal.SIGSEGV
    assert "was killed by SIGSEGV (signal 11)" in ran.stderr


def test_a_missing_program_is_one_clear_line(cudump_run, tmp_path):
    ran = cudump_run([str(tmp_path / "no-such-program")])
    assert ran.returncode == 127
    assert ran.stderr.strip().splitlines()[-1] == (
        f"cudump: error: cannot run {tmp_path / 'no-such-program'}: no such file or command "
        "(check the path, or put it on PATH)")


def test_without_a_controller_the_shim_passes_everything_through(fake, shim_lib, bare_run):
    program = [str(fake.programs["cudart_like"])]
    bare = bare_run(program)
    env = fake.env()
    env["LD_PRELOAD"] = str(shim_lib)
    env["CUDUMP_SOCKET"] = "/nonexistent/cudump.sock"
    done = subprocess.run(program, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout == bare.stdout


def _listener(path: Path):
    import socket

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    return server


def _shim_env(fake, shim_lib, path: Path, token: str = "0" * 32) -> dict[str, str]:
    env = fake.env()
    env["LD_PRELOAD"] = str(shim_lib)
    env["CUDUMP_SOCKET"] = str(path)
    env["CUDUMP_TOKEN"] = token
    env["CUDUMP_CONTROLLER_PID"] = str(os.getpid())
    return env


def test_controller_gone_mid_run_target_carries_on(fake, shim_lib, bare_run, tmp_path):
    """A controller that hangs up right after the greeting: the target must finish normally."""
    import threading

    from cudump.wire import protocol as p
    from cudump.wire.reading import read_message
    from cudump.wire.shm import SharedFile

    path = tmp_path / "ctl.sock"
    server = _listener(path)
    shared = SharedFile("test", 1 << 16)
    heard: list[int] = []

    def greet_and_leave() -> None:
        import socket

        conn, _ = server.accept()
        msg = read_message(conn)
        heard.append(msg.kind if msg else -1)
        welcome = p.WELCOME.pack(version=p.VERSION, options=0, staging_size=1 << 16)
        socket.send_fds(conn, [p.encode(p.Kind.WELCOME, welcome)], [shared.fd])
        conn.close()

    thread = threading.Thread(target=greet_and_leave, daemon=True)
    thread.start()
    program = [str(fake.programs["threads"]), "20"]
    done = subprocess.run(program, env=_shim_env(fake, shim_lib, path), capture_output=True,
                          text=True, timeout=60)
    thread.join(5)
    server.close()
    shared.close()
    assert heard == [p.Kind.HELLO]
    assert done.returncode == 0, done.stderr
    assert done.stdout == bare_run(program).stdout


def test_shim_talks_only_to_the_controller_that_started_it(fake, shim_lib, bare_run, tmp_path):
    """Whatever listens at the socket path, if it is not the controller process named in
    the environment (say it exited and another program took the path), hears nothing."""
    import threading

    path = tmp_path / "ctl.sock"
    server = _listener(path)
    received: list[bytes] = []

    def listen() -> None:
        conn, _ = server.accept()
        conn.settimeout(10)
        try:
            while chunk := conn.recv(4096):
                received.append(chunk)
        except OSError:
            pass
        conn.close()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    env = _shim_env(fake, shim_lib, path)
    env["CUDUMP_CONTROLLER_PID"] = "1"  # the controller it was started by: not this listener
    program = [str(fake.programs["linked"])]
    done = subprocess.run(program, env=env, capture_output=True, text=True, timeout=60)
    thread.join(10)
    server.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout == bare_run(program).stdout
    assert received == []  # not even a hello: no names, no arguments, no bytes


def test_children_connect_on_their_own(fake, cudump_run, tmp_path):
    script = tmp_path / "twice.sh"
    prog = fake.programs["linked"]
    script.write_text(f"#!/bin/sh\n{prog}\n{prog}\n")
    os.chmod(script, 0o755)
    ran = cudump_run([str(script)])
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    made, _ = tally(ran.stdout)
    assert summary["processes"] == 2
    assert len(set(summary["pids"])) == 2
    assert by_base_name(summary["kernels"]) == made  # both runs' launches, summed


def test_trace_ring_wraps_around_many_times_and_loses_nothing(fake, cudump_run, bare_run):
    """Eight threads push 4,000 events through a ring of 16 slots."""
    program = [str(fake.programs["threads"]), "500"]
    ran = cudump_run(program, "--trace", "--trace-ring", "16", timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    launches = [r for r in trace_records(ran.run_dir) if r["event"] == "launch"]
    assert len(launches) == 8 * 500
    assert sorted(r["launch"] for r in launches) == sorted({r["launch"] for r in launches})
    assert {r["device"] for r in launches} == {0}
    lines = [ln for ln in ran.stderr.splitlines() if re.match(r"cudump: #\d+ pid=\d+ dev=0 ", ln)]
    assert len(lines) == 8 * 500
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert summary["launches"] == 8 * 500 and summary["trace_dropped"] == 0
    assert "dropped" not in ran.stderr
