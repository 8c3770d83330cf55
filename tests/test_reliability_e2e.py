"""Faults, load and bad input at run time, on the stand-in driver: the program keeps its
semantics and exit status, what is on disk is complete and true, and cudump says what
happened in one line."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import sessions
from records import manifest
from zedref import pipeline

ROOT = Path(__file__).resolve().parent.parent
ZED_RULE = ROOT / "rules" / "zed.yaml"
W, H = 64, 48



def cudump_env(fake, shim_lib) -> dict[str, str]:
    env = fake.env()
    env["CUDUMP_SHIM"] = str(shim_lib)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_two_rules_on_the_same_argument_write_two_files(fake, cudump_run, tmp_path):
    rules = tmp_path / "two.yaml"
    rules.write_text(
        'rules:\n'
        '  - kernel: "device::FrP0k5607tPV*"\n    args: [2]\n    when: after\n'
        '    format: npy\n    overrides:\n      2: {dtype: uint8, channels: 4, width: arg5, '
        'height: arg6, pitch: arg4}\n'
        '  - kernel: "device::FrP0k5607tPV*"\n    args: [2]\n    when: after\n'
        '    format: npy\n    overrides:\n      2: {dtype: float32, count: 100}\n')
    ran = cudump_run([str(fake.programs["zed"]), "1", "--size", f"{W}x{H}"], "--rule",
                     str(rules))
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert len(records) == 2 and len({r["file"] for r in records}) == 2
    _, left, _ = pipeline(W, H, 0)
    for r in records:
        array = np.load(ran.run_dir / r["file"])
        assert [r["dtype"], r["shape"]] == [str(array.dtype), list(array.shape)]
    image = next(r for r in records if r["dtype"] == "uint8")
    assert np.array_equal(np.load(ran.run_dir / image["file"]), left)


def test_out_naming_an_existing_run_is_refused(fake, cudump_run, tmp_path):
    first = cudump_run([str(fake.programs["linked"])])
    assert first.returncode == 0
    again = cudump_run([str(fake.programs["linked"])], run_dir=first.run_dir)
    assert again.returncode == 2
    assert again.stdout == ""  # nothing ran
    assert again.stderr.strip().splitlines()[-1].startswith(
        f"cudump: error: --out {first.run_dir} already holds a run")


def test_a_program_that_cannot_start_leaves_no_run_directory(shim_lib, fake, tmp_path):
    done = subprocess.run([sys.executable, "-m", "cudump", str(tmp_path / "missing")],
                          env=cudump_env(fake, shim_lib), capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 127
    assert list((tmp_path / "cudump-out").iterdir()) == []


@pytest.mark.parametrize("value", ["foo", "0", "99999999999999999999G", "-5"])
def test_bad_sizes_are_one_line_errors(value, fake, cudump_run):
    ran = cudump_run([str(fake.programs["linked"])], "--staging", value)
    assert ran.returncode == 2
    lines = ran.stderr.strip().splitlines()
    assert "Traceback" not in ran.stderr and "--staging" in lines[-1]


def test_closing_stderr_does_not_end_the_run(shim_lib, fake, tmp_path, spawn):
    """`cudump --trace prog 2>&1 | head -1`: the program finishes, the run is complete."""
    program = [str(fake.programs["threads"]), "50"]
    out = tmp_path / "run"
    proc = spawn([sys.executable, "-m", "cudump", "--trace", "--out", str(out), "--",
                  *program], env=cudump_env(fake, shim_lib), stdout=subprocess.DEVNULL,
                 stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(b"cudump: writing to ")
    assert proc.stderr.readline().startswith(b"cudump: #")   # the program runs
    proc.stderr.close()  # the reader goes away
    assert proc.wait(timeout=60) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["launches"] == 8 * 50
    lines = (out / "trace.jsonl").read_text().splitlines()
    assert len(lines) == 8 * 50 and all(json.loads(line) for line in lines)


def test_controller_killed_mid_run_leaves_the_program_and_nothing_else(shim_lib, fake,
                                                                        tmp_path, spawn):
    status = tmp_path / "status"
    script = tmp_path / "target.sh"
    script.write_text(f"#!/bin/sh\n{fake.programs['threads']} 3000 > {tmp_path / 'out'}\n"
                      f"echo $? > {status}\n")
    script.chmod(0o755)
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    proc = spawn([sys.executable, "-m", "cudump", "--trace", "--out",
                  str(tmp_path / "run"), str(script)], env=cudump_env(fake, shim_lib),
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    # Mid-run: once the trace shows a launch (the program runs, talking to cudump), however
    # long a loaded machine takes to get there.
    assert proc.stderr is not None
    lines: queue.Queue[bytes] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in iter(
        proc.stderr.readline, b"")] + [lines.put(b"")], daemon=True)
    reader.start()
    while True:
        line = lines.get(timeout=120)
        assert line, "cudump ended before the program launched a kernel"
        if line.startswith(b"cudump: #"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 60    # the shell writes the status once the program ends
    while not (status.exists() and status.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status.read_text().strip() == "0"
    assert (tmp_path / "out").read_text() == subprocess.run(
        [str(fake.programs["threads"]), "3000"], env=fake.env(), capture_output=True,
        text=True, timeout=60).stdout
    reader.join(timeout=60)             # the program has ended: its stderr too
    proc.stderr.close()
    shm_after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert not [n for n in shm_after - shm_before if "cudump" in n]


def test_a_killed_controller_left_unreaped_lets_the_program_go_on(shim_lib, fake, tmp_path):
    """cudump is killed and its parent does not reap it for a while (Python's
    `communicate(timeout=...)`, `kill()`, then `communicate()` later): a zombie, which
    kill(pid, 0) still finds. With a trace ring far smaller than the program's 24000
    launches, every launch after the ring fills would wait for a reader that never comes
    (about a second each: most of an hour). The program must go on at full speed
    instead: it ends on its own, with its own output, while cudump is still unreaped."""
    status = tmp_path / "status"
    script = tmp_path / "target.sh"
    script.write_text(f"#!/bin/sh\n{fake.programs['threads']} 3000 > {tmp_path / 'out'}\n"
                      f"echo $? > {status}\n")
    script.chmod(0o755)
    argv = [sys.executable, "-m", "cudump", "--trace", "--trace-ring", "1024", "--out",
            str(tmp_path / "run"), str(script)]
    with sessions.session(argv, env=cudump_env(fake, shim_lib), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, cwd=tmp_path) as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while line and not line.startswith(b"cudump: #"):
            line = proc.stderr.readline()
        assert line, "cudump ended before the program launched a kernel"
        proc.send_signal(signal.SIGKILL)    # and no wait: it stays a zombie meanwhile
        deadline = time.monotonic() + 120   # a normal run takes a second or a few
        while not (status.exists() and status.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sessions.members(proc.pid), "cudump was reaped: the test tests nothing"
        assert status.exists() and status.read_text().strip() == "0", \
            "the program crawled on after cudump was killed"
    assert (tmp_path / "out").read_text() == subprocess.run(
        [str(fake.programs["threads"]), "3000"], env=fake.env(), capture_output=True,
        text=True, timeout=60).stdout


def _can_mount_tmpfs(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(["unshare", "-rm", "sh", "-c",
                           f"mount -t tmpfs -o size=64k tmpfs {probe}"],
                          capture_output=True, timeout=30)
    return done.returncode == 0


def _on_small_disk(shim_lib, fake, tmp_path: Path, program: list[str],
                   *options: str) -> tuple[int, str, str, Path]:
    """cudump with ZED_RULE, its run directory on a 150 KB tmpfs (in a private mount
    namespace): exit status, stdout, stderr and a copy of the run directory."""
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a tmpfs in a user namespace here (unshare -rm)")
    disk, copy = tmp_path / "disk", tmp_path / "copy"
    disk.mkdir()
    cudump = " ".join([sys.executable, "-m", "cudump", "--out", f"{disk}/run", "--rule",
                       str(ZED_RULE), *options, "--", *program])
    script = (f"mount -t tmpfs -o size=150k tmpfs {disk} || exit 99; {cudump} "
              f"> {tmp_path / 'stdout'} 2> {tmp_path / 'stderr'}; status=$?; "
              f"cp -r {disk}/run {copy}; exit $status")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=cudump_env(fake, shim_lib),
                          cwd=tmp_path, timeout=120)
    return (done.returncode, (tmp_path / "stdout").read_text(),
            (tmp_path / "stderr").read_text(), copy)


def test_by_default_a_run_stops_snapshots_before_the_disk_is_full(shim_lib, fake, bare_run,
                                                                   tmp_path):
    """No --max-bytes: the run may plan half the disk space free at its start, so it stops
    taking snapshots before the disk fills, and says so."""
    program = [str(fake.programs["zed"]), "10", "--size", f"{W}x{H}"]
    status, stdout, stderr, copy = _on_small_disk(shim_lib, fake, tmp_path, program)
    assert status == 0, stderr
    assert stdout == bare_run(program).stdout
    assert "writing snapshots stopped" not in stderr, stderr
    assert stderr.count("(by default half the disk space free at the start; --max-bytes sets "
                        "it) reached; no more snapshots") == 1, stderr
    records = manifest(copy)
    ok = [r for r in records if r["status"] == "ok"]
    assert ok and all((copy / r["file"]).is_file() for r in ok)
    assert any("byte budget" in (r["reason"] or "") for r in records)


def test_a_full_disk_stops_snapshots_not_the_program(shim_lib, fake, bare_run, tmp_path):
    """The run directory on a 150 KB tmpfs, and a byte budget larger than the disk: the disk
    fills up partway through the run."""
    program = [str(fake.programs["zed"]), "10", "--size", f"{W}x{H}"]
    status, stdout, stderr, copy = _on_small_disk(shim_lib, fake, tmp_path, program,
                                                  "--max-bytes", "1G")
    assert status == 0, stderr
    assert stdout == bare_run(program).stdout
    assert stderr.count("writing snapshots stopped") == 1, stderr
    records = manifest(copy)  # every line whole JSON
    ok = [r for r in records if r["status"] == "ok"]
    assert 0 < len(ok) < 60
    for r in ok:  # every record that says ok has its files, readable
        assert np.load(copy / r["file"]).shape == tuple(r["shape"])
    on_disk = {p.name for p in copy.iterdir() if p.suffix in (".npy", ".png")}
    assert on_disk == {r["file"] for r in ok} | {r["png"] for r in ok if r["png"]}
    assert not [p for p in copy.iterdir() if p.name.endswith(".part")]


def test_eight_threads_with_rules_every_snapshot_belongs_to_its_launch(fake, cudump_run,
                                                                        tmp_path):
    rules = tmp_path / "vecadd.yaml"
    rules.write_text('rules:\n  - kernel: vecAdd\n    args: [2]\n    when: after\n'
                     '    format: npy\n    overrides:\n      2: {dtype: float32, count: arg3}\n')
    repeats = 20
    ran = cudump_run([str(fake.programs["threads"]), str(repeats)], "--rule", str(rules),
                     timeout=120)
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert len(records) == 8 * repeats and all(r["status"] == "ok" for r in records)
    seen: Counter[tuple[int, int]] = Counter()
    i = np.arange(4096, dtype=np.float32)
    for r in records:
        c = np.load(ran.run_dir / r["file"])
        # Thread t adds b = (i + t) % 5 to c = a = i + t at each of its launches.
        found = [(t, k) for t in range(8) for k in range(1, repeats + 1)
                 if np.array_equal(c, (i + t) + k * ((i + t) % 5))]
        assert len(found) == 1, r["launch"]
        seen[found[0]] += 1
    assert seen == Counter({(t, k): 1 for t in range(8) for k in range(1, repeats + 1)})
    assert sorted(r["occurrence"] for r in records) == list(range(1, 8 * repeats + 1))


def test_processes_each_snapshot_under_their_own_pid(fake, cudump_run, tmp_path):
    script = tmp_path / "twice.sh"
    zed = fake.programs["zed"]
    script.write_text(f"#!/bin/sh\n{zed} 1 --size {W}x{H}\n{zed} 2 --size {W}x{H}\n")
    script.chmod(0o755)
    ran = cudump_run([str(script)], "--rule", str(ZED_RULE))
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    by_pid = Counter(r["pid"] for r in records)
    assert sorted(by_pid.values()) == [6, 12]
    assert len({r["file"] for r in records}) == len(records)
    for r in records:
        _, left, _ = pipeline(W, H, r["occurrence"] - 1)
        if r["arg"] == 2 and r["phase"] == "after":
            assert np.array_equal(np.load(ran.run_dir / r["file"]), left)


def test_summary_line_counts_in_words(fake, cudump_run):
    ran = cudump_run([str(fake.programs["exitcode"]), "0"])
    assert ran.stderr.strip().splitlines()[-1] == (
        "cudump: 1 process, 1 launch (0 graph launches, 0 captured), 1 kernel, 0 allocations "
        f"(peak 0 B); run: {ran.run_dir}")


@pytest.mark.parametrize("out", [True, False])
def test_the_run_directory_is_named_first_and_last(shim_lib, fake, bare_run, tmp_path, out):
    """stderr's first line says where the files go, and the summary (the last line) ends with
    it, for --out DIR and for a fresh cudump-out/<n>; stdout is the program's alone."""
    program = [str(fake.programs["linked"])]
    argv = [sys.executable, "-m", "cudump", "--timeline", str(tmp_path / "t.json")]
    if out:
        argv += ["--out", str(tmp_path / "mine")]
    done = subprocess.run([*argv, *program], env=cudump_env(fake, shim_lib),
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == bare_run(program).stdout
    run_dir = str(tmp_path / "mine") if out else "cudump-out/1"
    lines = done.stderr.strip().splitlines()
    assert lines[0] == f"cudump: writing to {run_dir}"
    assert lines[-1].startswith("cudump: 1 process, ") and lines[-1].endswith(f"; run: {run_dir}")
    assert (tmp_path / run_dir / "summary.json").is_file()


def test_a_held_launch_goes_on_when_cudump_is_killed(shim_lib, fake, tmp_path, spawn):
    """Stopped at a breakpoint, cudump dies: the program is not left hanging."""
    status = tmp_path / "status"
    zed = fake.programs["zed"]
    script = tmp_path / "target.sh"
    script.write_text(f"#!/bin/sh\n{zed} 3 --size {W}x{H} > {tmp_path / 'out'}\n"
                      f"echo $? > {status}\n")
    script.chmod(0o755)
    proc = spawn([sys.executable, "-m", "cudump", "--out", str(tmp_path / "run"),
                  "--break", "FrP0k5607tPV", str(script)],
                 env=cudump_env(fake, shim_lib), stdin=subprocess.PIPE,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stderr is not None
    assert proc.stderr.readline().decode() == f"cudump: writing to {tmp_path / 'run'}\n"
    line = proc.stderr.readline().decode()
    assert line.startswith("Breakpoint 1, launch 2"), line
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stderr.close()
    assert proc.stdin is not None
    proc.stdin.close()
    deadline = time.monotonic() + 60
    while not status.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status.read_text().strip() == "0"
    assert "verified 3 frames" in (tmp_path / "out").read_text()


def test_odd_input_never_stops_the_connection(fake, cudump_run, tmp_path):
    """A program path that is not UTF-8 and a 5000-term expression: the trace, the snapshots
    and the summary stay whole."""
    odd = tmp_path / "zed-\udcff"  # the byte 0xff in the file name
    os.symlink(fake.programs["zed"], os.fsencode(odd))
    terms = " + ".join(["arg6"] * 5000)
    rules = tmp_path / "long.yaml"
    rules.write_text('rules:\n  - kernel: "FrP0k5607tPV"\n    args: [2]\n    when: after\n'
                     f'    format: npy\n    overrides:\n      2: {{dtype: uint8, width: "arg5 * 4",'
                     f' height: "({terms}) // 5000", pitch: arg4}}\n')
    ran = cudump_run([str(odd), "3", "--size", f"{W}x{H}"], "--trace", "--rule", str(rules))
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert summary["processes"] == 1 and summary["launches"] == 6
    assert len((ran.run_dir / "trace.jsonl").read_text().splitlines()) == 6
    records = manifest(ran.run_dir)
    assert len(records) == 3 and all(r["status"] == "ok" for r in records)
    for r in records:
        _, left, _ = pipeline(W, H, r["occurrence"] - 1)
        assert np.array_equal(np.load(ran.run_dir / r["file"]), left.reshape(H, -1))


def test_the_snapshot_of_a_synchronised_launch_survives_an_abort(fake, cudump_run, tmp_path):
    """fill<int>, cuCtxSynchronize, abort(): the program waited for the launch, so its
    snapshot (made through scratch and the shim's drain thread by default, into the
    write-behind area) is on disk and in the manifest although the process dies right
    after."""
    rule = tmp_path / "fill.yaml"
    rule.write_text('rules:\n  - kernel: "fill*"\n    args: [0]\n    when: after\n'
                    '    format: npy\n')
    ran = cudump_run([str(fake.programs["exitcode"]), "abort"], "--rule", str(rule))
    assert ran.returncode == 128 + signal.SIGABRT, ran.stderr
    assert ran.stdout.endswith("aborting\n")
    records = [r for r in manifest(ran.run_dir) if r["phase"] == "after"]
    assert [r["status"] for r in records] == ["ok"], ran.stderr
    data = np.load(ran.run_dir / records[0]["file"])
    assert data.dtype == np.int32 and data.shape == (1024,) and (data == 7).all()
    # Written from the write-behind area, after the process had gone.
    assert json.loads((ran.run_dir / "summary.json").read_text())["written_behind"] == 1
