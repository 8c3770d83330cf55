"""Breakpoints on a GPU: `x`, `print` and `dump` show exactly the bytes the kernel read and
wrote (checked against numpy references and the programs' own dumps), `step` runs the
kernel and shows what changed, `bt` shows the host frames, and the program's output and
exit status are its own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import zedref
from gpurun import run, sample, under_cudump

from cudump.rundir.manifest import read_manifest

pytestmark = pytest.mark.gpu

FRP0K = ("void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4*, int, device::uchar8*, "
         "device::uchar8*, int, int, int, float)")


def debug_run(cmd: list[str], breaks: list[str], commands: list[str], workdir: Path,
              tmp_path: Path):
    batch = tmp_path / "commands.txt"
    batch.write_text("\n".join(commands) + "\n")
    out = tmp_path / "run"
    extra: list[str] = ["--batch", str(batch)]
    for pattern in breaks:
        extra += ["--break", pattern]
    bare = run(cmd, workdir)
    assert bare.returncode == 0, bare.stderr
    ran = run(under_cudump(cmd, out, extra=extra), workdir)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert ran.stdout == bare.stdout
    # The prompt's lines, without cudump's first line naming the run directory.
    return out, [ln for ln in ran.stderr.splitlines() if not ln.startswith("cudump: writing to ")]


@pytest.mark.parametrize("program", ["zed_camera", "zed_camera.py"])
def test_pitched_uchar4_kernel_at_a_breakpoint(program, workdir, tmp_path):
    width, height = zedref.DEFAULT_WIDTH, zedref.DEFAULT_HEIGHT
    out, lines = debug_run(
        [*sample(program), "2"], ["device::FrP0k5607tPV*"],
        ["info args", "x/16xb arg0", "dump arg0 src.npy", "dump arg2 left-before.npy", "step",
         "dump arg2 left-after.npy", "dump arg3 right-after.npy", "bt", "continue"],
        workdir, tmp_path)
    uyvy, left, right = zedref.pipeline(width, height, 0)
    assert lines[0] == f"Breakpoint 1, launch 2 (occurrence 1) of {FRP0K}"
    assert re.match(r"  pid \d+ thread \d+ device 0 grid \(20,45,1\) block \(32,8,1\) smem 0 "
                    r"stream 0x[0-9a-f]+$", lines[1])
    first = "  ".join(f"0x{b:02x}" for b in uyvy.reshape(-1)[:8])
    assert any(line.split(":  ", 1)[-1].startswith(first) for line in lines), "x/16xb arg0"
    assert np.array_equal(np.load(out / "src.npy").reshape(height, -1), uyvy)
    assert not np.load(out / "left-before.npy").any()
    assert np.array_equal(np.load(out / "left-after.npy"), left.reshape(height, -1))
    assert np.array_equal(np.load(out / "right-after.npy"), right.reshape(height, -1))
    changed = int((left.reshape(height, -1) != 0).sum())
    assert f"arg2 (device::uchar8*): {changed} of {height * width * 4} elements changed" in lines
    at = lines.index("(cudump) bt")
    frames = [ln for ln in lines[at + 1:] if re.match(r"#\d+ ", ln)]
    assert frames, "no host frames"
    # The launching code: the binary (static cudart inside it), or Python and cuda.bindings.
    host = "python" if program.endswith(".py") else "zed_camera"
    assert any(host in f for f in frames), frames
    dumps = [r for r in read_manifest(out) if r.extra.get("source") == "dump"]
    assert [r.file for r in dumps] == ["src.npy", "left-before.npy", "left-after.npy",
                                       "right-after.npy"]


def test_runtime_api_kernel_print_and_step(workdir, tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    n = 4096
    out, lines = debug_run(
        [*sample("runtime_app"), "--dump", str(dump), "--n", str(n)], ["ns::saxpy*"],
        ["p arg0", "p arg3", "p arg2[0]@4", f"dump arg2 y-before.npy as float32 {n}", "step",
         f"dump arg2 y-after.npy as float32 {n}", "bt", "delete", "continue"],
        workdir, tmp_path)
    y0, y1 = np.load(dump / "y0.npy"), np.load(dump / "y1.npy")
    assert np.array_equal(np.load(out / "y-before.npy").view(np.uint32), y0.view(np.uint32))
    assert np.array_equal(np.load(out / "y-after.npy").view(np.uint32), y1.view(np.uint32))
    assert f"arg3 = {n}" in lines
    at = lines.index("(cudump) p arg2[0]@4")
    values = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", lines[at + 1])[-4:]]
    assert np.allclose(values, y0[:4])
    at = lines.index("(cudump) bt")
    frames = [ln for ln in lines[at + 1:] if re.match(r"#\d+ ", ln)]
    assert any(" in main" in f for f in frames), frames  # symbolised from the executable


def test_pytorch_elementwise_kernel_at_a_breakpoint(workdir, tmp_path):
    pytest.importorskip("torch")
    out, lines = debug_run([*sample("torch_ops.py")], ["*elementwise_kernel*"],
                           ["info launch", "info args", "bt", "delete", "continue"],
                           workdir, tmp_path)
    stops = [ln for ln in lines if ln.startswith("Breakpoint 1, launch ")]
    assert stops and "elementwise_kernel" in stops[0], lines[:20]
    at = lines.index("(cudump) bt")
    frames = [ln for ln in lines[at + 1:] if re.match(r"#\d+ ", ln)]
    assert any("libtorch" in f or "libc10" in f for f in frames), frames
    assert any("python" in f.lower() for f in frames), frames


def test_set_var_writes_device_memory_the_kernel_then_reads(workdir, tmp_path):
    """`set var` at a stop writes the element on the GPU before the launch runs: the kernel
    computes with it, and the program's own check of saxpy against the host's fma fails."""
    n = 4096
    batch = tmp_path / "commands.txt"
    batch.write_text("set var arg2[5] = 7\np arg2[5]\nstep\np arg2[5]\ndelete\ncontinue\n")
    cmd = [*sample("runtime_app"), "--n", str(n)]
    ran = run(under_cudump(cmd, tmp_path / "run",
                           extra=["--break", "ns::saxpy*", "--batch", str(batch)]), workdir)
    lines = ran.stderr.splitlines()
    at = lines.index("(cudump) p arg2[5]")
    assert lines[at + 1] == "arg2[5] = 7", lines[at:at + 2]
    after = lines.index("(cudump) p arg2[5]", at + 1)
    # y[5] = fma(1.5, x[5], 7) with x[5] = -7.1e-8: the kernel read the 7 written at the stop
    value = float(lines[after + 1].split(" = ")[1])
    assert abs(value - 7.0) < 1e-5, lines[after + 1]
    assert ran.returncode != 0
    assert "saxpy 1: result differs from the host's fma" in ran.stderr


@pytest.mark.parametrize("trace", [False, True])
def test_a_program_killed_at_the_prompt_is_counted(workdir, tmp_path, trace):
    """Stopped at the first saxpy of runtime_app and killed there: the summary counts the two
    fill launches that ran (from the counts the shim keeps in shared memory, without --trace
    too), not the held one."""
    batch = tmp_path / "commands.txt"
    batch.write_text("kill\n")
    out = tmp_path / "run"
    ran = run(under_cudump([*sample("runtime_app")], out, trace=trace,
                           extra=["--break", "ns::saxpy*", "--batch", str(batch)]), workdir)
    assert ran.returncode == 128 + 9, ran.stderr[-3000:]
    totals = json.loads((out / "summary.json").read_text())
    assert totals["launches"] == 2, totals
    assert list(totals["kernels"].values()) == [2] and "fill" in next(iter(totals["kernels"]))
