"""`cudump --inject RUN:LAUNCH` and `cudump replay --inputs-from RUN` on a GPU: a launch run on
the inputs another run recorded for it.

- samples/nan_source: step 4 of the bad run (BAD 4) gets a zero row from the host, so its
  normalize (launch 11) leaves NaN. Given the good run's (BAD 0) inputs of that launch, it
  leaves the good run's output, the NaN never reaches the accumulator, and the program's own
  check (it expects one NaN row) fails: its exit status is cudump's.
- samples/zed_camera with ZED_GAIN_FROM=1:1.5 (tests/gpu/test_gpu_bisect.py): bisect names
  launch 4 and suggests the confirmation; run, it writes A's pitched images into B's launch
  4 and shows that its outputs still differ from A's exactly where the gains do (the
  launch's parameter, not its inputs, makes the difference).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zedref
from gpurun import TIMEOUT_S, cudump_command, sample

from cudump.rundir.manifest import read_manifest

pytestmark = pytest.mark.gpu

STEPS, BAD = 6, 4
NORMALIZE = 3 * BAD - 1                 # launch 11: step 4's sim::normalize
W, H = zedref.DEFAULT_WIDTH, zedref.DEFAULT_HEIGHT
FRAMES, FROM, GAIN = 3, 1, 1.5
CHANGE = {"ZED_GAIN_FROM": f"{FROM}:{GAIN}"}
ZED = [*sample("zed_camera"), str(FRAMES)]
ZED_LAUNCH = 2 * FROM + 2                # frame 1's FrP0k5607tPV


def cudump(args: list[str], workdir: Path,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cudump_command(), *args], cwd=workdir, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env={**os.environ, **(env or {})})


def inject_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("cudump: inject:")]


def good_normalize(workdir: Path, tmp_path: Path) -> Path:
    """The good run's snapshots of step 4's normalize, before and after."""
    rule = tmp_path / "normalize.yaml"
    rule.write_text(f"rules:\n  - kernel: sim::normalize\n    skip: {BAD - 1}\n    count: 1\n"
                    "    when: both\n    format: npy\n")
    out = tmp_path / "good"
    done = cudump(["--out", str(out), "--rule", str(rule), "--",
                   *sample("nan_source"), str(STEPS), "0"], workdir)
    assert done.returncode == 0, done.stderr[-4000:]
    assert {(r.launch, r.arg, r.phase) for r in read_manifest(out)} == \
        {(NORMALIZE, arg, phase) for arg in range(3) for phase in ("before", "after")}
    return out


def test_nan_source_on_good_inputs_leaves_no_nan(workdir, tmp_path):
    good = good_normalize(workdir, tmp_path)
    out = tmp_path / "bad"
    done = cudump(["--out", str(out), "--inject", f"{good}:{NORMALIZE}", "--",
                   *sample("nan_source"), str(STEPS), str(BAD)], workdir)
    head = (f"cudump: inject: launch {NORMALIZE} of sim::normalize (occurrence {BAD}): inputs "
            f"from {good} written (3 buffers, ")
    lines = inject_lines(done.stderr)
    assert len(lines) == 3 and all(ln.startswith(head) for ln in lines), done.stderr[-4000:]
    for arg, line in enumerate(lines):
        assert line.endswith(f"arg {arg} after now equals {good}'s"), line
    # The program expected step 4's NaN row in its accumulator, and found none.
    assert done.returncode != 0
    assert "accumulator: 0 NaN, expected 64" in done.stderr
    taken = {r.arg: r for r in read_manifest(out)}
    want = {r.arg: r for r in read_manifest(good) if r.phase == "after"}
    assert taken.keys() == want.keys() == {0, 1, 2}
    for arg, record in taken.items():
        assert (record.launch, record.phase, record.extra.get("rule")) == \
            (NORMALIZE, "after", "--inject")
        mine, theirs = np.load(out / str(record.file)), np.load(good / str(want[arg].file))
        assert np.array_equal(mine, theirs) and not np.isnan(mine).any()


def test_replay_of_the_bad_launch_on_good_inputs(workdir, tmp_path):
    good = good_normalize(workdir, tmp_path)
    captured = tmp_path / "captured"
    done = cudump(["--out", str(captured), "--capture-launch", "sim::normalize", "--",
                   *sample("nan_source"), str(STEPS), str(BAD)], workdir)
    assert done.returncode == 0, done.stderr[-4000:]
    replayed = cudump(["replay", str(captured), "--launch", str(NORMALIZE), "--inputs-from",
                       str(good)], workdir)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    lines = [ln for ln in replayed.stdout.splitlines() if " inputs from " in ln]
    assert len(lines) == 3 and all(ln.endswith(f"after now equals {good}'s") for ln in lines)


def test_bisect_confirmation_on_the_zed_pipeline(workdir, tmp_path):
    work = tmp_path / "work"
    done = cudump(["bisect", "--env-b", f"ZED_GAIN_FROM={FROM}:{GAIN}", "--out", str(work),
                   "--", *ZED], workdir)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    a_snap = work / "a-snap"
    spec = f"{a_snap}:{ZED_LAUNCH}"
    command = f"ZED_GAIN_FROM={FROM}:{GAIN} cudump --inject {spec} -- {shlex.join(ZED)}"
    assert (f"confirm: B on A's inputs at launch {ZED_LAUNCH}: {command}"
            in [ln.strip() for ln in done.stdout.splitlines()])

    out = tmp_path / "confirm"
    ran = cudump(["--out", str(out), "--inject", spec, "--", *ZED], workdir, env=CHANGE)
    assert ran.returncode == 0, ran.stderr[-4000:]
    lines = inject_lines(ran.stderr)
    head = (f"cudump: inject: launch {ZED_LAUNCH} of void device::FrP0k5607tPV"
            f"<(sl::YUV_CONVENTION)2> (occurrence {FROM + 1}): inputs from {a_snap} written "
            "(3 buffers, ")
    assert len(lines) == 3 and all(ln.startswith(head) for ln in lines), ran.stderr[-4000:]
    assert lines[0].endswith(f"arg 0 after now equals {a_snap}'s")
    uyvy = zedref.nv12_to_uyvy(*zedref.synth_nv12(W, H, FROM)).reshape(H, 4 * W)
    a_images = zedref.frp0k(uyvy, W, H, zedref.gain_for_frame(FROM))
    b_images = zedref.frp0k(uyvy, W, H, GAIN)
    for line, arg, a, b in zip(lines[1:], (2, 3), a_images, b_images, strict=True):
        differ = int((a != b).sum())
        largest = int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())
        assert line.endswith(f"arg {arg} after still differs from {a_snap}'s in {differ:,} of "
                             f"{H * 4 * W:,} elements (max abs diff {largest})"), line
    # B's own output of that launch is the image at B's gain, from A's inputs.
    records = {r.arg: r for r in read_manifest(out)}
    assert np.array_equal(np.load(out / str(records[2].file)).reshape(H, W, 4), b_images[0])
