"""Replay on a GPU: a launch captured from a real program, run again alone by `cudump replay`
(cuda-python in the controller's process), writes what the program's launch wrote, bit for
bit; a changed kernel shows as exactly the change; an extracted folder runs on its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpurun import BUILD, cudump_command, run, sample, under_cudump

pytestmark = pytest.mark.gpu

FRAMES = 3
FRP0K = "device::FrP0k5607tPV*"


def capture(cmd: list[str], pattern: str, workdir: Path, out: Path) -> list[dict]:
    bare = run(cmd, workdir)
    assert bare.returncode == 0, bare.stderr
    wrapped = run(under_cudump(cmd, out, extra=["--capture-launch", pattern]), workdir)
    assert wrapped.returncode == 0, wrapped.stderr[-4000:]
    assert wrapped.stdout == bare.stdout
    lines = (out / "captures.jsonl").read_text().splitlines()
    captures = [json.loads(line) for line in lines]
    assert captures and all(c["problems"] == [] for c in captures), captures
    return captures


def replay(run_dir: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run([*cudump_command(), "replay", str(run_dir), *args], workdir)


def test_pitched_uchar4_launch_of_a_runtime_program_replays_bit_exactly(workdir, tmp_path):
    out = tmp_path / "run"
    captures = capture([*sample("zed_camera"), str(FRAMES)], FRP0K, workdir, out)
    assert len(captures) == FRAMES
    first = captures[0]
    assert first["image_format"] == "fatbin"          # nvcc's runtime program: a fat binary
    kinds = {p["alloc"]["kind"] for p in first["pointers"]}
    assert kinds == {"pitched"}
    image = next(b for b in first["buffers"] if b["arg"] == 0)
    assert image["dtype"] == "uint8" and image["shape"][-1] == 4
    for c in captures:
        done = replay(out, workdir, "--launch", str(c["launch"]), "--runs", "3")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "replay: all 3 buffers equal to the capture" in done.stdout
        assert "replay: all 3 runs wrote the same bytes" in done.stdout


def test_nvrtc_float_kernel_from_cuda_python_replays_bit_exactly(workdir, tmp_path):
    out = tmp_path / "run"
    captures = capture([*sample("nvrtc_template.py"), "4"], "jit::axpb*", workdir, out)
    assert len(captures) == 4
    assert captures[0]["kernel"] == "void jit::axpb<float, 3>(float*, float const*, float, int)"
    for c in captures:
        done = replay(out, workdir, "--launch", str(c["launch"]))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "arg0 (float32 [" in done.stdout and "equal to the captured after" in done.stdout
    # Each launch adds to y, so replaying launch 3 on launch 1's inputs is not launch 3.
    y1 = np.load(out / captures[0]["buffers"][0]["after"])
    y3 = np.load(out / captures[2]["buffers"][0]["after"])
    assert not np.array_equal(y1, y3)


def test_every_launch_of_a_runtime_program_replays(workdir, tmp_path):
    out = tmp_path / "run"
    captures = capture(sample("runtime_app"), "*", workdir, out)
    assert {c["image_format"] for c in captures} == {"fatbin"}
    for c in captures:
        done = replay(out, workdir, "--launch", str(c["launch"]))
        assert done.returncode == 0, f"{c['kernel']}: {done.stdout}{done.stderr}"


def test_modified_ptx_shows_exactly_the_changed_pixel(workdir, tmp_path):
    out = tmp_path / "run"
    captures = capture([*sample("zed_camera"), "1"], FRP0K, workdir, out)
    launch = str(captures[0]["launch"])
    same = replay(out, workdir, "--launch", launch, "--ptx", str(BUILD / "zed_kernels.ptx"))
    assert same.returncode == 0, same.stdout + same.stderr
    poked = replay(out, workdir, "--launch", launch, "--ptx", str(BUILD / "zed_poke.ptx"),
                   "--out", str(tmp_path / "poked"))
    assert poked.returncode == 1, poked.stdout + poked.stderr
    lines = poked.stdout.splitlines()
    left = next(ln for ln in lines if ln.startswith("arg2 "))
    right = next(ln for ln in lines if ln.startswith("arg3 "))
    # uchar8* is no element type cudump knows: the image is rows of bytes, and the change
    # is the first byte (red of the first pixel) of row 7.
    assert " 1 of " in left and " differ " in left, left
    assert "at (7,0) " in left and "(captured 0, replayed 255)" in left, left
    assert "equal to the captured after" in right
    assert "replay: 1 of 3 buffers differ from the capture" in lines
    diff = run([*cudump_command(), "diff", str(out), str(tmp_path / "poked")], workdir)
    assert "differ" in diff.stdout


def test_extracted_folder_replays_without_cudump(workdir, tmp_path):
    out = tmp_path / "run"
    captures = capture([*sample("zed_camera"), "1"], FRP0K, workdir, out)
    folder = tmp_path / "repro"
    done = run([*cudump_command(), "extract", str(out), "--launch",
                str(captures[0]["launch"]), str(folder)], workdir)
    assert done.returncode == 0, done.stderr
    alone = tmp_path / "elsewhere"
    alone.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD")}
    ran = subprocess.run([sys.executable, str(folder / "replay.py"), str(folder)],
                         cwd=alone, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.count("equal to the captured after") == 3


def test_module_variables_of_an_nvcc_cubin_are_found(tmp_path):
    """The note `cudump replay` prints for kernels with __device__/__constant__ state reads
    nvcc's real ELF layout (.nv.global*, .nv.constant3 and the symbol table)."""
    from cudump.analysis.replay import module_variables

    src = tmp_path / "state.cu"
    src.write_text("__device__ int frames;\n__device__ float gain = 2.0f;\n"
                   "__constant__ float lut[16];\n"
                   "extern \"C\" __global__ void k(float* p) { p[0] = gain * lut[frames]; }\n")
    cubin = tmp_path / "state.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-o", str(cubin), str(src)], check=True)
    assert module_variables(cubin.read_bytes()) == ["frames", "gain", "lut"]
