"""The shim sees every launch: each sample runs bare and under
`cudump --trace`; its stdout and exit status must not change, and cudump must
report exactly the launches the program made, under their demangled names."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from gpurun import RunDir, launches_printed, run, sample, under_cudump

pytestmark = pytest.mark.gpu

# What each sample's `launches label=N` labels stand for.
DRIVER = {
    "vecAdd": "vecAdd(float const*, float const*, float*, int)",
    "scale2d": "scale2d(float*, unsigned long, int, int, float)",
}
RUNTIME = {
    "fill": "void ns::detail::fill<float>(float*, float, int)",
    "saxpy": "void ns::saxpy<float>(float, float const*, float*, int)",
    "brighten": "void ns::img::brighten<unsigned char>(unsigned char*, unsigned long, int, int, "
                "int)",
}
NVRTC = {"axpb": "void jit::axpb<float, 3>(float*, float const*, float, int)"}
THREADS = {"bump": "void worker::bump<int>(int*, int, int)"}
ZED = {
    "nv12_to_uyvy": "nv12_to_uyvy(unsigned char const*, unsigned int, unsigned char*, "
                    "unsigned int, unsigned int, unsigned int)",
    "FrP0k5607tPV": "void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4*, int, "
                    "device::uchar8*, device::uchar8*, int, int, int, float)",
}
STDERR_LAUNCH = re.compile(
    r"^cudump: #(\d+) pid=(\d+) dev=0 (.+) grid=\((\d+),(\d+),(\d+)\) block=\((\d+),(\d+),(\d+)\) "
    r"smem=(\d+) stream=(0x[0-9a-f]+)$")


def traced(cmd: list[str], workdir: Path, tmp_path: Path):
    """Run bare, then under `cudump --trace`; check that the program did not notice."""
    bare = run(cmd, workdir)
    assert bare.returncode == 0, bare.stderr
    out = tmp_path / "run"
    wrapped = run(under_cudump(cmd, out, trace=True), workdir)
    assert wrapped.returncode == bare.returncode, wrapped.stderr[-4000:]
    assert wrapped.stdout == bare.stdout
    return bare, wrapped, RunDir(out)


def check_counts(stdout: str, names: dict[str, str], runs: RunDir, stderr: str) -> list[dict]:
    """summary.json, trace.jsonl and the stderr lines all count what the program launched."""
    made = {names[label]: n for label, n in launches_printed(stdout).items() if n}
    total = sum(made.values())
    summary = runs.summary()
    assert summary["kernels"] == made
    assert summary["launches"] == total
    assert summary["captured_launches"] == 0 and summary["graph_launches"] == 0
    assert summary["processes"] == 1 and len(summary["pids"]) == 1
    assert summary["exit_status"] == 0

    events = runs.launches()
    assert Counter(e["kernel"] for e in events) == Counter(made)
    assert sorted(e["launch"] for e in events) == list(range(1, total + 1))
    assert {e["pid"] for e in events} == set(summary["pids"])
    assert not any(e["captured"] for e in events)
    assert {e["device"] for e in events} == {0}
    assert all(e["mangled"].startswith("_Z") for e in events)

    lines = [m for m in map(STDERR_LAUNCH.match, stderr.splitlines()) if m]
    assert Counter(m.group(3) for m in lines) == Counter(made)
    assert sorted(int(m.group(1)) for m in lines) == list(range(1, total + 1))
    return events


def test_driver_ptx(workdir, tmp_path):
    bare, wrapped, runs = traced(sample("driver_ptx"), workdir, tmp_path)
    events = check_counts(bare.stdout, DRIVER, runs, wrapped.stderr)
    assert {e["api"] for e in events} == {"cuLaunchKernel"}
    by_kernel = {e["kernel"]: e for e in events}
    assert by_kernel[DRIVER["vecAdd"]]["grid"] == [16, 1, 1]
    assert by_kernel[DRIVER["vecAdd"]]["block"] == [256, 1, 1]
    assert by_kernel[DRIVER["scale2d"]]["grid"] == [10, 10, 1]
    assert by_kernel[DRIVER["scale2d"]]["block"] == [32, 8, 1]
    assert runs.summary()["allocations"] >= 4          # three cuMemAlloc, one cuMemAllocPitch


# The driver entry points the CUDA 13 runtime uses for each build (DESIGN.md).
@pytest.mark.parametrize(("binary", "args", "api_ok"), [
    ("runtime_app", [], lambda api: not api.endswith("_ptsz")),
    ("runtime_app_ptds", [], lambda api: api.endswith("_ptsz")),
    ("runtime_app_ex", [], lambda api: api.startswith("cuLaunchKernelEx")),
    ("runtime_app", ["--pitch"], lambda api: not api.endswith("_ptsz")),
], ids=["default", "per-thread-stream", "launch-ex", "pitched"])
def test_runtime_app(workdir, tmp_path, binary, args, api_ok):
    bare, wrapped, runs = traced([*sample(binary), *args], workdir, tmp_path)
    events = check_counts(bare.stdout, RUNTIME, runs, wrapped.stderr)
    assert all(api_ok(e["api"]) for e in events), {e["api"] for e in events}
    if args == ["--pitch"]:
        assert launches_printed(bare.stdout)["brighten"] == 2
        brighten = [e for e in events if e["kernel"] == RUNTIME["brighten"]]
        assert all(e["block"] == [32, 8, 1] and e["grid"] == [11, 6, 1] for e in brighten)


def test_nvrtc_template(workdir, tmp_path):
    bare, wrapped, runs = traced([*sample("nvrtc_template.py"), "7"], workdir, tmp_path)
    assert launches_printed(bare.stdout) == {"axpb": 7}
    check_counts(bare.stdout, NVRTC, runs, wrapped.stderr)


def test_zed_camera_launches(workdir, tmp_path):
    bare, wrapped, runs = traced([*sample("zed_camera"), "3"], workdir, tmp_path)
    events = check_counts(bare.stdout, ZED, runs, wrapped.stderr)
    assert [e["kernel"] for e in events] == [ZED["nv12_to_uyvy"], ZED["FrP0k5607tPV"]] * 3


def test_threads(workdir, tmp_path):
    per_thread = 250
    bare, wrapped, runs = traced([*sample("threads"), str(per_thread)], workdir, tmp_path)
    assert launches_printed(bare.stdout) == {"bump": 8 * per_thread}
    events = check_counts(bare.stdout, THREADS, runs, wrapped.stderr)
    # Each thread launched on its own stream: eight streams, N launches each.
    assert sorted(Counter(e["stream"] for e in events).values()) == [per_thread] * 8


def test_torch_ops(workdir, tmp_path):
    pytest.importorskip("torch")
    bare, wrapped, runs = traced(sample("torch_ops.py"), workdir, tmp_path)
    expected_lines = [line for line in bare.stdout.splitlines() if line.startswith("expected ")]
    assert len(expected_lines) == 1
    expected = json.loads(expected_lines[0].removeprefix("expected "))

    summary = runs.summary()
    assert summary["graph_launches"] == expected["graph_launches"] == 10
    assert summary["launches"] == expected["launches"]
    assert summary["captured_launches"] == expected["captured_launches"]
    assert summary["processes"] == 1

    events = runs.launches()
    direct = Counter(e["kernel"] for e in events if not e["captured"])
    captured = Counter(e["kernel"] for e in events if e["captured"])
    # The profiler's names come from the same C++ ABI demangler, so they match.
    assert direct == Counter(expected["kernels"])
    assert captured == Counter(expected["captured_kernels"])
    assert any("CUDAFunctor_add<float>" in name for name in direct)
    gemm = re.compile(r"gemm|nvjet|cutlass|xmma", re.IGNORECASE)
    assert any(gemm.search(name) for name in direct), sorted(direct)
    assert any(gemm.search(name) for name in captured), sorted(captured)

    graphs = runs.graph_launches()
    assert len(graphs) == 10
    assert len({g["graph"] for g in graphs}) == 1
    # Each replay reports the kernels it runs: what CUPTI saw in the ten replays.
    nodes = [e for e in runs.trace() if e["event"] == "graph-kernel"]
    assert Counter(e["kernel"] for e in nodes) == Counter(
        {k: 10 * n for k, n in expected["captured_kernels"].items()})
    assert summary["graph_kernel_launches"] == len(nodes)


def test_torch_graph_kernels_are_counted_without_trace(workdir, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    ran = run(under_cudump(sample("torch_ops.py"), out), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    expected = json.loads(next(line for line in ran.stdout.splitlines()
                               if line.startswith("expected ")).removeprefix("expected "))
    summary = RunDir(out).summary()
    want = Counter({k: 10 * n for k, n in expected["captured_kernels"].items()})
    assert Counter(summary["graph_kernels"]) == want
    assert summary["graph_kernel_launches"] == sum(want.values())
    assert f"running {sum(want.values())} kernels" in ran.stderr


def test_kernels_in_nested_child_graphs_are_traced_and_counted(workdir, tmp_path):
    """graph_nodes: kernels two child graphs deep are reported with each replay, in run
    order, and counted as graph kernels; the program's own count is the reference."""
    bare, wrapped, runs = traced(sample("graph_nodes"), workdir, tmp_path)
    made = launches_printed(bare.stdout)
    graphs = made.pop("graph")
    summary = runs.summary()
    assert summary["graph_launches"] == graphs == 6
    assert {k.split("(")[0]: n for k, n in summary["graph_kernels"].items()} == made
    nodes = [e for e in runs.trace() if e["event"] == "graph-kernel"]
    first = [e["kernel"].split("(")[0] for e in nodes if e["graph"] == 1 and e["replay"] == 1]
    assert first == ["bump", "fill", "scale", "offset"]
