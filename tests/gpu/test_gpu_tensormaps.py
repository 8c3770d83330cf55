"""TMA tensor maps on a Hopper GPU: a kernel that reaches its memory only through
CUtensorMap parameters has each map's tensor snapshotted, digested and scanned with the
map's exact extent, and `info args` shows the maps.

samples/tma_copy.cu (built here with nvcc if it is not built yet): tma_copy(src, dst,
scale) loads 32 x 32 tiles of a 256 x 128 float tensor through one map (rows 1280 bytes
apart, 512 bytes into an allocation that is NaN everywhere else) and stores twice them
through another. samples/torch_tma_gemm.py: a 4096 x 4096 bf16 cuBLAS GEMM, whose Hopper
kernel (sm90_* or nvjet_*) takes its operands as tensor maps.

    python3 -m pytest -m gpu tests/gpu/test_gpu_tensormaps.py -v -rs -p no:cacheprovider
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gpurun import BUILD, SAMPLES, run, sample, under_cudump

from cudump.kernels.pattern import KernelPattern
from cudump.rundir.layout import MANIFEST_FILE
from cudump.rundir.manifest import SnapshotRecord, read_manifest
from cudump.wire.digest import digest, digest_hex

pytestmark = pytest.mark.gpu

W, H, PITCH = 256, 128, 1280
SCALE = 2.0
KERNEL = "tma_copy(CUtensorMap_st, CUtensorMap_st, float)"
BAD = 3 * W + 5                     # the element the NAN option makes NaN: (3, 5)


def source(nan: bool = False) -> np.ndarray:
    """tma_copy's src as the program fills it: element (y, x) holds y * 1000 + x."""
    y, x = np.mgrid[0:H, 0:W]
    data = (y * 1000 + x).astype(np.float32)
    if nan:
        data.reshape(-1)[BAD] = np.nan
    return data


def compute_capability() -> tuple[int, int]:
    libcuda = ctypes.CDLL("libcuda.so.1")
    assert libcuda.cuInit(0) == 0
    dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    assert libcuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR and _MINOR
    assert libcuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) == 0
    assert libcuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev) == 0
    return major.value, minor.value


def hopper_or_skip() -> None:
    major, minor = compute_capability()
    if major != 9:
        pytest.skip(f"TMA samples are sm_90a code; this GPU is compute capability "
                    f"{major}.{minor}")


@pytest.fixture(scope="module")
def tma_copy() -> list[str]:
    """samples/build/tma_copy, made with nvcc where there is one (make does nothing if it is
    up to date)."""
    hopper_or_skip()
    env = dict(os.environ)
    env["PATH"] = f"{env.get('PATH', '')}:/usr/local/cuda/bin"
    if shutil.which("nvcc", path=env["PATH"]):
        made = subprocess.run(["make", "-C", str(SAMPLES), "build/tma_copy"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    elif not (BUILD / "tma_copy").exists():
        pytest.skip("no nvcc to build samples/tma_copy.cu, and it is not built")
    return sample("tma_copy")


def cudump_run(cmd: list[str], workdir: Path, out: Path,
               extra: list[str]) -> subprocess.CompletedProcess[str]:
    """The program bare, then under cudump: both succeed, and print the same."""
    bare = run(cmd, workdir)
    assert bare.returncode == 0, bare.stderr[-3000:]
    ran = run(under_cudump(cmd, out, extra=extra), workdir)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert ran.stdout == bare.stdout
    return ran


def records_of(out: Path) -> list[SnapshotRecord]:
    return read_manifest(out) if (out / MANIFEST_FILE).exists() else []


def by_key(records: list[SnapshotRecord]) -> dict[tuple[int, int, str], SnapshotRecord]:
    """(occurrence, arg, phase) -> record, one of each."""
    table: dict[tuple[int, int, str], SnapshotRecord] = {}
    for r in records:
        key = (r.occurrence, r.arg, r.phase)
        assert key not in table, f"two records for {key}"
        table[key] = r
    return table


def test_tma_copy_runs_bare(tma_copy, workdir):
    ran = run([*tma_copy, "2", "1"], workdir)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [f"tma_copy: {W}x{H} floats at pitch {PITCH}, 1 NaN in dst",
                                       "launches tma_copy=2"]


def test_args_pointers_snapshots_each_map_tensor_exactly(tma_copy, workdir, tmp_path):
    """Both maps are buffers of `args: pointers` (the kernel has no pointer argument): src's
    tensor as the program wrote it, its rows without the NaN padding between them; dst zero
    before the first launch and twice src after each."""
    rule = tmp_path / "tma.yaml"
    rule.write_text('rules:\n  - kernel: "tma_copy"\n    args: pointers\n    when: both\n'
                    "    format: npy\n")
    out = tmp_path / "run"
    cudump_run([*tma_copy, "2"], workdir, out, ["--rule", str(rule)])
    records = records_of(out)
    assert all(r.status == "ok" for r in records), [r.reason for r in records]
    table = by_key(records)
    assert sorted(table) == sorted((occ, arg, phase) for occ in (1, 2) for arg in (0, 1)
                                   for phase in ("before", "after"))
    src = source()
    for (occurrence, arg, phase), r in table.items():
        assert r.kernel == KERNEL
        assert (r.type, r.dtype, r.shape, r.extra.get("extent")) == (
            "CUtensorMap", "float32", [H, W], "tensor-map")
        assert "offset" not in r.extra           # each map is a whole parameter
        assert r.file
        got = np.load(out / r.file)
        if arg == 0:
            want = src
        elif occurrence == 1 and phase == "before":
            want = np.zeros_like(src)
        else:
            want = src * SCALE
        assert np.array_equal(got, want), (occurrence, arg, phase)
    assert table[1, 0, "before"].address != table[1, 1, "before"].address


def test_maps_in_a_graph_kernel_node_are_snapshotted_exactly(tma_copy, workdir, tmp_path):
    """The launch captured into a CUDA graph and the graph launched 3 times: the kernel node
    holds the maps' bytes, and the instrumented copy of the graph copies both tensors around
    the node, replay by replay."""
    rule = tmp_path / "tma.yaml"
    rule.write_text('rules:\n  - kernel: "tma_copy"\n    args: pointers\n    when: both\n'
                    "    format: npy\n")
    out = tmp_path / "run"
    ran = cudump_run([*tma_copy, "3", "0", "graph"], workdir, out, ["--rule", str(rule)])
    assert ran.stdout.splitlines()[-1] == "launches tma_copy=3 graph=3"
    records = records_of(out)
    assert all(r.status == "ok" for r in records), [r.reason for r in records]
    table = {(r.extra["replay"], r.arg, r.phase): r for r in records}
    assert len(table) == len(records) == 12
    src = source()
    for (replay, arg, phase), r in table.items():
        assert (r.extra["graph"], r.extra["node"], r.extra.get("extent"), r.shape) == (
            1, 0, "tensor-map", [H, W])
        assert r.file
        got = np.load(out / r.file)
        if arg == 0:
            want = src
        elif replay == 1 and phase == "before":
            want = np.zeros_like(src)
        else:
            want = src * SCALE
        assert np.array_equal(got, want), (replay, arg, phase)


def test_digests_of_the_map_tensors(tma_copy, workdir, tmp_path):
    """--digest takes each map's tensor exactly: src row by row (1024 bytes of its 1280-byte
    pitch), dst (tight) in one run; the digests equal numpy's over the program's arrays."""
    out = tmp_path / "run"
    cudump_run([*tma_copy, "2"], workdir, out, ["--digest"])
    table = by_key(records_of(out))
    assert sorted(table) == sorted((occ, arg, phase) for occ in (1, 2) for arg in (0, 1)
                                   for phase in ("before", "after"))
    src = source()
    for (occurrence, arg, phase), r in table.items():
        assert r.status == "ok" and r.file is None, r.reason
        assert r.extra["extent"] == "tensor-map"
        assert r.extra["row_bytes"] * r.extra["rows"] == r.extra["bytes"] == W * H * 4
        if arg == 0:
            assert (r.extra["row_bytes"], r.extra["rows"]) == (W * 4, H)
        if arg == 0:
            want = src
        elif occurrence == 1 and phase == "before":
            want = np.zeros_like(src)
        else:
            want = src * SCALE
        assert r.extra["digest"] == digest_hex(digest(want.tobytes(), W * 4)), (
            occurrence, arg, phase)


def test_check_nan_reports_the_map_tensor_that_turned_nan(tma_copy, workdir, tmp_path):
    """src's element (3, 5) is NaN: the first launch stores it into dst, which only a map
    reaches. The report names dst's map (arg 1) and its first NaN (element 773), propagated
    from src's map (arg 0); the snapshots of the launch's buffers are the two tensors,
    exactly: one NaN each."""
    out = tmp_path / "run"
    cudump_run([*tma_copy, "2", "1"], workdir, out, ["--check-nan"])
    records = records_of(out)
    producers = [r for r in records if "nonfinite" in r.extra]
    assert len(producers) == 1, [(r.occurrence, r.arg, r.extra) for r in records]
    (producer,) = producers
    assert (producer.kernel, producer.occurrence, producer.arg) == (KERNEL, 1, 1)
    assert producer.extra["first_nonfinite"] == BAD
    assert producer.extra.get("extent") == "tensor-map"
    # src's map was non-finite before the launch (the program wrote the NaN, no kernel).
    assert (producer.extra["origin"], producer.extra["from_arg"],
            producer.extra["from_launch"]) == ("propagated", 0, None)
    snaps = {r.arg: r for r in records if r.file}
    assert sorted(snaps) == [0, 1]
    src = np.load(out / snaps[0].file)
    dst = np.load(out / snaps[1].file)
    assert src.shape == dst.shape == (H, W)
    want = source(nan=True)
    assert np.array_equal(src, want, equal_nan=True)
    assert np.array_equal(dst, want * SCALE, equal_nan=True)
    assert np.isnan(src).sum() == np.isnan(dst).sum() == 1


def test_check_nan_looks_only_inside_the_maps(tma_copy, workdir, tmp_path):
    """Without the NaN element, nothing is reported: the NaN bytes around and between src's
    rows are outside its map."""
    out = tmp_path / "run"
    cudump_run([*tma_copy, "2"], workdir, out, ["--check-nan"])
    assert not [r for r in records_of(out) if "nonfinite" in r.extra]


def test_break_and_info_args_show_the_maps(tma_copy, workdir, tmp_path):
    batch = tmp_path / "commands.txt"
    batch.write_text("info args\ncontinue\n")
    out = tmp_path / "run"
    ran = cudump_run([*tma_copy, "2"], workdir, out,
                     ["--break", "tma_copy", "--batch", str(batch)])
    lines = [ln for ln in ran.stderr.splitlines() if not ln.startswith("cudump: writing to ")]
    stops = [ln for ln in lines if ln.startswith("Breakpoint 1, ")]
    assert len(stops) == 2 and all(ln.endswith(f" of {KERNEL}") for ln in stops), stops
    at = lines.index("(cudump) info args")
    shown = lines[at + 1:at + 4]
    assert re.fullmatch(r"  arg0  CUtensorMap = tiled float32 rank 2 dims \[256, 128\] "
                        r"strides \[1280\] -> 0x[0-9a-f]+ \(159\.8 KiB\)", shown[0]), shown
    assert re.fullmatch(r"  arg1  CUtensorMap = tiled float32 rank 2 dims \[256, 128\] "
                        r"strides \[1024\] -> 0x[0-9a-f]+ \(128\.0 KiB\)", shown[1]), shown
    assert re.fullmatch(r"  arg2  float\s+= 2(\.0*)?", shown[2]), shown


# ---- cuBLAS on Hopper -------------------------------------------------------------------

# Hopper GEMM kernels by name: cuBLAS's sm90_xmma_* and CUTLASS's *sm90*, and nvJet, which
# newer cuBLAS versions pick for many Hopper GEMMs (its names do not say sm90).
GEMM_PATTERNS = ["*sm90*", "nvjet*"]


@pytest.mark.parametrize("pattern", GEMM_PATTERNS)
def test_cublas_hopper_gemm_operands_snapshotted_exactly(pattern, workdir, tmp_path):
    """A 4096 x 4096 bf16 GEMM: under a rule on the Hopper kernel cuBLAS picks (args: pointers,
    before and after), the snapshots from A's and B's addresses are A and B, bit for bit, and
    C's is zero before and the program's result after. Through tensor maps where cudump saw
    them made; cuBLAS's nvjet kernels (seen on an H100, CUDA 13) get maps cuBLAS builds
    without the driver's encode functions, and their parameters also hold A's, B's and C's
    addresses as plain words, whose snapshots (to the allocation's end) hold each tensor
    whole. Skipped where no kernel the pattern names ran (the skip says which did)."""
    pytest.importorskip("torch")
    hopper_or_skip()
    rule = tmp_path / "gemm.yaml"
    rule.write_text(f'rules:\n  - name: gemm\n    kernel: "{pattern}"\n    args: pointers\n'
                    "    when: both\n    format: npy\n")
    data, out = tmp_path / "data", tmp_path / "run"
    ran = run(under_cudump([*sample("torch_tma_gemm.py"), str(data)], out,
                           extra=["--rule", str(rule)]), workdir)
    assert ran.returncode == 0, ran.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    kernels = sorted(summary.get("kernels", {}))
    matcher = KernelPattern(pattern)
    matched = [k for k in kernels if matcher.matches(k)]
    if not matched:
        print("kernels seen:", *kernels, sep="\n  ")
        pytest.skip(f"no {pattern} kernel ran, so no Hopper GEMM to check; kernels seen: "
                    f"{kernels}")
    records = records_of(out)
    maps = [r for r in records if r.extra.get("extent") == "tensor-map"]
    described = [(r.kernel[:60], r.arg, r.extra.get("offset"), r.phase, r.address, r.shape,
                  r.extra.get("extent"), r.status, r.reason) for r in records]
    print(f"{matched}: {len(maps)} tensor-map snapshots")
    pointers = json.loads((data / "pointers.json").read_text())
    arrays = {name: np.load(data / f"{name}.npy") for name in ("a", "b", "c")}

    def at(name: str, candidates: list[SnapshotRecord], exact: bool) -> list[SnapshotRecord]:
        """The snapshots from the tensor's address that hold it whole: exactly its bytes (a
        map's extent), or at least them (a pointer's extent reaches the allocation's end)."""
        address, size = pointers[name]["address"], pointers[name]["bytes"]
        found = [r for r in candidates if int(r.address, 16) == address and r.file
                 and r.status == "ok"]
        return [r for r in found if (np.load(out / r.file).nbytes == size if exact
                                     else np.load(out / r.file).nbytes >= size)]

    for name in ("a", "b"):
        size = pointers[name]["bytes"]
        whole = at(name, maps, exact=True) or at(name, records, exact=False)
        assert whole, f"no snapshot of {name.upper()} whole; records: {described}"
        for r in whole:
            got = np.load(out / r.file).tobytes()[:size]
            assert got == arrays[name].tobytes(), (name, r.phase, r.shape)
        assert {r.phase for r in whole} == {"before", "after"}
    # cuBLAS may store C through a map or through a pointer.
    c_records = at("c", maps, exact=True) or at("c", records, exact=False)
    assert c_records, f"no snapshot of C whole; records: {described}"
    size = pointers["c"]["bytes"]
    for r in c_records:
        got = np.load(out / r.file).tobytes()[:size]
        want = arrays["c"].tobytes() if r.phase == "after" else bytes(size)
        assert got == want, ("c", r.phase, r.shape, r.extra.get("extent"))
    assert {r.phase for r in c_records} == {"before", "after"}
