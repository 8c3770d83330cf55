"""Scopes on the stand-in driver: NVTX ranges (pushed, in domains, registered strings,
start/end), a graph captured under a range, steps counted by a range's name, the shim's own
push/pop/step calls from a Python target, and the user's Python source line behind a launch;
each launch's place as trace.jsonl records it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pytargets import DRIVER_START

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "scopes" / "nvtx_ranges.c"


def nvtx_include() -> Path | None:
    """NVTX 3's headers from the nvidia-nvtx wheel (the test extra), wherever that wheel's
    version puts them (nvidia/nvtx/include, nvidia/cu13/include)."""
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return None
    for base in map(Path, nvidia.__path__):
        for header in sorted(base.glob("*/include/nvtx3/nvToolsExt.h")):
            return header.parent.parent
    return None


@pytest.fixture(scope="module")
def nvtx_program(fake, tmp_path_factory) -> Path:
    include = nvtx_include()
    if include is None:
        pytest.skip("NVTX 3's headers are not installed (pip install nvidia-nvtx: the test "
                    "extra)")
    out = tmp_path_factory.mktemp("nvtx") / "nvtx_ranges"
    cmd = [os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2",
           f"-I{ROOT / 'tests' / 'fakecuda'}", f"-I{ROOT / 'tests' / 'fakecuda' / 'progs'}",
           f"-I{ROOT / 'shim'}", f"-I{include}", str(SOURCE), "-o", str(out),
           f"-L{fake.lib_dir}", "-lcuda", "-ldl", "-pthread"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]


def launches(run_dir: Path, event: str = "launch") -> list[dict]:
    return sorted((r for r in records(run_dir) if r["event"] == event),
                  key=lambda r: (r["launch"], r.get("node", 0)))


def test_nvtx_ranges_name_each_launchs_scope(nvtx_program, cudump_run):
    ran = cudump_run([str(nvtx_program)], "--trace", "--step-range", "step")
    assert ran.returncode == 0, ran.stderr
    expected = [line.split()[2] for line in ran.stdout.splitlines()
                if line.startswith("expect ") and line.split()[1] != "graph"]
    made = launches(ran.run_dir)
    direct = [r for r in made if not r["captured"]]
    assert [("/".join(r.get("scope", [])) or "-") for r in direct] == expected
    assert [r.get("scope") for r in made if r["captured"]] == [["captured"], ["captured"]]
    assert direct[1]["layer"] == "forward"
    # Steps: counted from the first push of the range named by --step-range (two pushes
    # before launch 9: step 1); none before it.
    assert "step" not in direct[0] and direct[8]["step"] == 1
    # The graph's two kernel nodes were captured under "captured", launched outside it.
    nodes = launches(ran.run_dir, "graph-kernel")
    assert [r.get("scope") for r in nodes] == [["captured"], ["captured"]]
    assert [r["step"] for r in nodes] == [1, 1]


def test_only_a_mode_that_reads_scopes_gives_the_target_an_nvtx_tool(cudump_run, shim_lib,
                                                                     tmp_path):
    show = [sys.executable, "-c", "import os; print(os.environ.get('NVTX_INJECTION64_PATH'), "
            "os.environ.get('CUDUMP_SCOPES'), os.environ.get('CUDUMP_STEP_RANGE'))"]
    plain = cudump_run(show, run_dir=tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split() == ["None", "None", "None"]
    traced = cudump_run(show, "--trace", "--step-range", "train step",
                        run_dir=tmp_path / "traced")
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout.strip() == f"{shim_lib} 1 train step"


def test_a_users_own_nvtx_tool_is_kept(nvtx_program, cudump_run, tmp_path):
    ran = cudump_run([str(nvtx_program)], "--trace",
                     env_extra={"NVTX_INJECTION64_PATH": str(tmp_path / "their-tool.so")})
    assert ran.returncode == 0, ran.stderr
    assert "scopes from NVTX are off" in ran.stderr
    assert not any("scope" in r for r in launches(ran.run_dir))


# A Python target's start: the stand-in driver and the shim's calls by ctypes, a buffer of
# 64 floats (1.0, so that scaling changes it) and the arguments of `scale` over it.
TARGET_START = DRIVER_START + textwrap.dedent("""
    buf = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(buf), 256))
    check(cuda.cuMemsetD32_v2(buf, 0x3F800000, 64))
    two, n = ctypes.c_float(2.0), ctypes.c_int(64)
    args = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                   for v in (buf, two, n)])


""")

PYTHON_TARGET = TARGET_START + textwrap.dedent("""
    def launch():
        check(cuda.cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, None, args, None))


    launch()
    assert shim.cudump_scope_push(2, b"Net") == 0
    assert shim.cudump_scope_push(2, b"layer1") == 0
    print("inside a scope:", shim.cudump_scope_current() != 0)
    shim.cudump_scope_step(3)
    launch()
    shim.cudump_scope_pop()
    shim.cudump_scope_pop()
    assert shim.cudump_scope_current() == 0
    # Deeper than a thread's stack: still balanced.
    for _ in range(300):
        shim.cudump_scope_push(1, b"deep")
    for _ in range(300):
        shim.cudump_scope_pop()
    assert shim.cudump_scope_current() == 0
    launch()
    check(cuda.cuCtxSynchronize())
""")


def test_python_hooks_and_source_lines(cudump_run, tmp_path):
    """A Python target: the shim's exported calls open FORWARD scopes and set the step;
    with CUDUMP_SOURCES=1 each launch names the line of the target that made it."""
    target = tmp_path / "target.py"
    target.write_text(PYTHON_TARGET)
    ran = cudump_run([sys.executable, str(target)], "--trace",
                     env_extra={"CUDUMP_SOURCES": "1"})
    assert ran.returncode == 0, ran.stderr
    assert "inside a scope: True" in ran.stdout
    first, inside, after = launches(ran.run_dir)
    assert "scope" not in first and "step" not in first
    assert (inside["scope"], inside["layer"], inside["pass"], inside["step"]) == \
        (["Net", "layer1"], "layer1", "forward", 2)
    assert "scope" not in after and after["step"] == 2
    line = next(i for i, text in enumerate(PYTHON_TARGET.splitlines(), 1)
                if "cuLaunchKernel" in text)
    # The line of the launch itself is in the target's own function: the innermost frame
    # of the user's code (the path relative to the working directory where inside it).
    assert {r["source"] for r in (first, inside, after)} == {f"{target.name}:{line}"} or \
        {r["source"] for r in (first, inside, after)} == {f"{target}:{line}"}


def test_digests_of_repeated_launches_keep_each_launchs_scope(nvtx_program, cudump_run):
    """Under --digest the shim repeats a kernel's plan on its own and its digests are
    written in bulk; a launch in a scope must still carry its own scope in the manifest
    (diff and bisect align runs by it), not the scope of the plan's first launch."""
    from cudump.rundir.manifest import read_manifest

    ran = cudump_run([str(nvtx_program)], "--digest", "--step-range", "step")
    assert ran.returncode == 0, ran.stderr
    expected = {int(line.split()[1]): line.split()[2] for line in ran.stdout.splitlines()
                if line.startswith("expect ") and line.split()[1] != "graph"}
    direct = sorted({r.launch: r for r in read_manifest(ran.run_dir)
                     if "graph" not in r.extra}.values(), key=lambda r: r.launch)
    assert len(direct) >= len(expected) > 3
    seen = ["/".join(r.extra.get("scope", [])) or "-" for r in direct[:len(expected)]]
    assert seen == [expected[n] for n in sorted(expected)]


OUTPUT_TARGET = TARGET_START + textwrap.dedent("""
    def launch():
        check(cuda.cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, None, args, None))


    launch()
    shim.cudump_scope_step(1)
    assert shim.cudump_scope_push(2, b"Net") == 0
    assert shim.cudump_scope_push(2, b"layer1") == 0
    launch()
    launch()
    # layer1 returned the 32 floats from byte 64 of the buffer, and a type cudump refuses
    assert shim.cudump_scope_output(buf.value + 64, 128, 0, b"float32[32]") == 0
    shim.cudump_scope_output(buf.value, 4, 1, b"float32[oops")
    shim.cudump_scope_output(buf.value, 4, 2, b"float32[oops")
    shim.cudump_scope_pop()
    shim.cudump_scope_pop()
    check(cuda.cuCtxSynchronize())
    print("buffer at", hex(buf.value))
""")


def test_a_modules_declared_output_is_recorded_and_compared_as_itself(cudump_run, tmp_path):
    """A tensor the program's hooks say a module returned (cudump_scope_output): a line of
    outputs.jsonl naming its scope and the launches made before it; read back, it is the
    scope's output, the part of the last launch's record it lies in, with its own type."""
    from cudump.analysis.diff.declared import OutputSnapshot
    from cudump.analysis.diff.scope_tree import scope_tree
    from cudump.rundir.outputs import read_outputs
    from cudump.rundir.runs import Run

    target = tmp_path / "target.py"
    target.write_text(OUTPUT_TARGET)
    ran = cudump_run([sys.executable, str(target)], "--module-outputs", "--digest")
    assert ran.returncode == 0, ran.stderr
    base = int(ran.stdout.split("buffer at ")[1].split()[0], 16)
    assert ran.stderr.count("a module output is left out") == 1, ran.stderr
    assert "float32[oops" in ran.stderr
    (out,) = read_outputs(ran.run_dir)
    assert (out.launches, out.index, out.address, out.bytes, out.dtype, out.shape) == \
        (3, 0, base + 64, 128, "float32", (32,))
    assert (out.chain, out.where.pass_, out.where.step) == (("Net", "layer1"), "forward", 0)
    tree = scope_tree(Run.open(ran.run_dir))
    layer1 = next(occ for occ in tree.walk() if occ.key.chain == ("Net", "layer1"))
    (found,) = layer1.outputs()
    assert isinstance(found, OutputSnapshot) and found.offset == 64 and not found.whole
    assert found.record.launch == 3 and (found.record.dtype, found.record.shape) == \
        ("float32", [32])
    # the model's own occurrence declared nothing: its outputs are the buffers it wrote
    net = next(occ for occ in tree.walk() if occ.key.chain == ("Net",))
    assert not any(isinstance(s, OutputSnapshot) for s in net.outputs())
