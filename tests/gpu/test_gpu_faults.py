"""Faults and load on a GPU: the program keeps its output and exit status, and what cudump
wrote is complete and true."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from gpurun import cudump_command, run, sample, under_cudump

from cudump.rundir.manifest import read_manifest

pytestmark = pytest.mark.gpu


def rule_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rule.yaml"
    path.write_text(text)
    return path


def test_controller_killed_mid_run(workdir, tmp_path):
    status, out = tmp_path / "status", tmp_path / "out"
    script = tmp_path / "target.sh"
    script.write_text(f"#!/bin/sh\n{' '.join(sample('threads'))} 20000 > {out}\n"
                      f"echo $? > {status}\n")
    script.chmod(0o755)
    shm_before = set(os.listdir("/dev/shm"))
    proc = subprocess.Popen([*cudump_command(), "--trace", "--out", str(tmp_path / "run"),
                             str(script)], cwd=workdir, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(3.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 120
    while not status.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status.read_text().strip() == "0"
    assert out.read_text().strip().splitlines()[-1] == "launches bump=160000"
    assert not [n for n in set(os.listdir("/dev/shm")) - shm_before if "cudump" in n]


def test_illegal_address_in_a_kernel(workdir, tmp_path):
    rules = rule_file(tmp_path, 'rules:\n  - kernel: "*"\n    args: [0]\n    format: npy\n'
                                '    overrides:\n      0: {dtype: float32, count: 32}\n')
    bare = run(sample("fault"), workdir)
    assert bare.returncode == 3, bare.stdout + bare.stderr
    out = tmp_path / "run"
    ran = run(under_cudump(sample("fault"), out, rules=[rules]), workdir)
    assert ran.returncode == 3, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout
    records = read_manifest(out)  # every line whole
    fill = [r for r in records if r.kernel.startswith("fill")]
    assert [(r.phase, r.status) for r in fill] == [("before", "ok"), ("after", "ok")]
    after = np.load(out / next(r.file for r in fill if r.phase == "after"))
    assert np.array_equal(after, np.full(32, 2.0, np.float32))
    smash = [r for r in records if r.kernel.startswith("smash")]
    assert smash and all(r.status == "error" and r.reason for r in smash), smash
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_status"] == 3


def test_eight_threads_with_a_rule(workdir, tmp_path):
    rules = rule_file(tmp_path, 'rules:\n  - kernel: "worker::bump*"\n    args: [0]\n'
                                '    when: after\n    format: npy\n    overrides:\n'
                                '      0: {dtype: int32, count: arg1}\n')
    n = 25
    bare = run([*sample("threads"), str(n)], workdir)
    out = tmp_path / "run"
    ran = run(under_cudump([*sample("threads"), str(n)], out, rules=[rules]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout
    records = read_manifest(out)
    assert len(records) == 8 * n and all(r.status == "ok" for r in records)
    values = Counter()
    for r in records:
        array = np.load(out / r.file)
        assert (array == array[0]).all()  # one launch's result, never a torn mix
        values[int(array[0])] += 1
    # Thread t adds t+1 per launch: after its k-th launch its buffer holds k*(t+1).
    assert values == Counter(k * (t + 1) for t in range(8) for k in range(1, n + 1))
    assert sorted(r.occurrence for r in records) == list(range(1, 8 * n + 1))


def test_multiprocessing_spawn_each_process_under_its_pid(workdir, tmp_path):
    pytest.importorskip("torch")
    rules = Path(__file__).resolve().parent / "rules" / "torch_add.yaml"
    dump = tmp_path / "dump"
    dump.mkdir()
    out = tmp_path / "run"
    ran = run(under_cudump([*sample("torch_spawn.py"), str(dump)], out, rules=[rules]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    records = [r for r in read_manifest(out) if r.status == "ok"]
    saved = {int(p.stem.split("-")[1]): np.load(p) for p in dump.glob("add-*.npy")}
    assert len(saved) == 2
    assert {r.pid for r in records} == set(saved)
    for r in records:
        assert np.array_equal(np.load(out / r.file), saved[r.pid])
    summary = json.loads((out / "summary.json").read_text())
    assert set(saved) <= set(summary["pids"])
