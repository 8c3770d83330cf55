"""Tests of the host-memory stand-in for libcuda.so.1 and its test programs, without the shim."""

from __future__ import annotations

import ctypes
import re
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zedref
from fakecuda_build import FakeCuda, build_fakecuda
from forked import isolated

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
SYMBOL_NOT_FOUND = 1
VERSION_NOT_SUFFICIENT = 2
PER_THREAD = 2

VECADD = b"_Z6vecAddPKfS0_Pfi"
FRP0K = b"_ZN6device12FrP0k5607tPVILN2sl14YUV_CONVENTIONE2EEEvP6uchar4iPNS_6uchar8ES6_iiif"


@pytest.fixture(scope="session")
def fake() -> FakeCuda:
    return build_fakecuda()


def load(fake: FakeCuda) -> ctypes.CDLL:
    driver = ctypes.CDLL(str(fake.library))
    assert driver.cuInit(0) == CUDA_SUCCESS
    return driver


def run(fake: FakeCuda, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(fake.programs[name]), *args],
        env=fake.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def summary(stdout: str) -> tuple[dict[str, int], tuple[int, int]]:
    """The 'launches NAME=N ...' and 'allocs N bytes B' lines a program prints."""
    launches = re.search(r"^launches(.*)$", stdout, re.M)
    allocs = re.search(r"^allocs (\d+) bytes (\d+)$", stdout, re.M)
    assert launches and allocs, stdout
    counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", launches.group(1))}
    return counts, (int(allocs.group(1)), int(allocs.group(2)))


def address(driver: ctypes.CDLL, name: str) -> int:
    return ctypes.cast(getattr(driver, name), ctypes.c_void_p).value


def proc_address(driver: ctypes.CDLL, symbol: bytes, version: int, flags: int):
    fn = ctypes.c_void_p(1)
    status = ctypes.c_int(-1)
    r = driver.cuGetProcAddress_v2(
        symbol, ctypes.byref(fn), ctypes.c_int(version), ctypes.c_uint64(flags),
        ctypes.byref(status),
    )
    return r, fn.value, status.value


# ---------------------------------------------------------------- the library itself


@isolated
def test_library_exports_real_variant_names(fake: FakeCuda) -> None:
    lib = load(fake)
    for name in ("cuMemAlloc_v2", "cuLaunchKernel_ptsz", "cuMemcpy2DAsync_v2_ptsz",
                 "cuStreamBeginCapture_v2", "cuCtxCreate_v4", "cuGetProcAddress"):
        assert address(lib, name)
    with pytest.raises(AttributeError):
        lib.cuMemAlloc  # noqa: B018 - the v1 ABI is not provided


@pytest.mark.parametrize(
    ("symbol", "version", "flags", "variant"),
    [
        ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
        ("cuLaunchKernel", 4000, 0, "cuLaunchKernel"),
        ("cuLaunchKernel", 7000, PER_THREAD, "cuLaunchKernel_ptsz"),
        ("cuLaunchKernel", 4000, PER_THREAD, "cuLaunchKernel"),
        ("cuLaunchKernel", 13000, 0, "cuLaunchKernel"),
        ("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
        ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
        ("cuMemcpyHtoD", 7000, PER_THREAD, "cuMemcpyHtoD_v2_ptds"),
        ("cuMemcpy2DAsync", 12000, PER_THREAD, "cuMemcpy2DAsync_v2_ptsz"),
        ("cuMemAllocAsync", 11020, PER_THREAD, "cuMemAllocAsync_ptsz"),
        ("cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture"),
        ("cuStreamBeginCapture", 10010, PER_THREAD, "cuStreamBeginCapture_v2_ptsz"),
        ("cuCtxCreate", 12000, 0, "cuCtxCreate_v3"),
        ("cuCtxCreate", 13000, 0, "cuCtxCreate_v4"),
        ("cuCtxSynchronize", 12080, 0, "cuCtxSynchronize"),
        ("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"),
    ],
)
@isolated
def test_get_proc_address_gives_newest_variant_at_version(
    fake: FakeCuda, symbol: str, version: int, flags: int, variant: str
) -> None:
    lib = load(fake)
    r, fn, status = proc_address(lib, symbol.encode(), version, flags)
    assert (r, status) == (CUDA_SUCCESS, 0)
    assert fn == address(lib, variant)


@isolated
def test_get_proc_address_old_abi_agrees(fake: FakeCuda) -> None:
    lib = load(fake)
    fn = ctypes.c_void_p()
    r = lib.cuGetProcAddress(b"cuLaunchKernel", ctypes.byref(fn), ctypes.c_int(7000),
                             ctypes.c_uint64(PER_THREAD))
    assert r == CUDA_SUCCESS
    assert fn.value == address(lib, "cuLaunchKernel_ptsz")


@pytest.mark.parametrize(
    ("symbol", "version", "status"),
    [
        (b"", 12000, SYMBOL_NOT_FOUND),
        (b"cuNoSuchThing", 12000, SYMBOL_NOT_FOUND),
        (b"cuMemAlloc_v2", 12000, SYMBOL_NOT_FOUND),
        (b"cuLibraryLoadData", 11080, VERSION_NOT_SUFFICIENT),
    ],
)
@isolated
def test_get_proc_address_not_found(
    fake: FakeCuda, symbol: bytes, version: int, status: int
) -> None:
    lib = load(fake)
    r, fn, got_status = proc_address(lib, symbol, version, 0)
    assert (r, fn, got_status) == (CUDA_ERROR_NOT_FOUND, None, status)


@isolated
def test_get_proc_address_rejects_unknown_flags(fake: FakeCuda) -> None:
    lib = load(fake)
    r, _, _ = proc_address(lib, b"cuInit", 12000, 8)
    assert r == CUDA_ERROR_INVALID_VALUE


def library_kernels(lib: ctypes.CDLL) -> dict[bytes, tuple[int, int]]:
    """(CUkernel, CUfunction) of some built-in kernels, loaded via cuLibraryLoadData."""
    ctx = ctypes.c_void_p()
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == CUDA_SUCCESS
    assert lib.cuCtxSetCurrent(ctx) == CUDA_SUCCESS
    library = ctypes.c_void_p()
    assert lib.cuLibraryLoadData(ctypes.byref(library), b"image", None, None, 0, None, None,
                                 0) == CUDA_SUCCESS
    out = {}
    for name in (VECADD, FRP0K, b"_Z5emptyv"):
        kernel, func = ctypes.c_void_p(), ctypes.c_void_p()
        assert lib.cuLibraryGetKernel(ctypes.byref(kernel), library, name) == CUDA_SUCCESS
        assert lib.cuKernelGetFunction(ctypes.byref(func), kernel) == CUDA_SUCCESS
        out[name] = (kernel.value, func.value)
    return out


@isolated
def test_kernel_and_function_handles_differ_and_name_like_the_driver(fake: FakeCuda) -> None:
    lib = load(fake)
    kernels = library_kernels(lib)
    kernel, func = kernels[VECADD]
    assert kernel != func
    name = ctypes.c_char_p()
    assert lib.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(func)) == CUDA_SUCCESS
    assert name.value == VECADD
    assert lib.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(kernel)) == (
        CUDA_ERROR_INVALID_HANDLE)
    assert lib.cuKernelGetName(ctypes.byref(name), ctypes.c_void_p(kernel)) == CUDA_SUCCESS
    assert name.value == VECADD


def param_layout(lib: ctypes.CDLL, getter: str, handle: int) -> list[tuple[int, int]]:
    layout = []
    offset, size = ctypes.c_size_t(), ctypes.c_size_t()
    for index in range(32):
        r = getattr(lib, getter)(ctypes.c_void_p(handle), ctypes.c_size_t(index),
                                 ctypes.byref(offset), ctypes.byref(size))
        if r == CUDA_ERROR_INVALID_VALUE:
            return layout
        assert r == CUDA_SUCCESS
        layout.append((offset.value, size.value))
    raise AssertionError("no end to the parameter list")


@isolated
def test_param_info_follows_natural_alignment(fake: FakeCuda) -> None:
    lib = load(fake)
    kernels = library_kernels(lib)
    kernel, func = kernels[VECADD]
    expected = [(0, 8), (8, 8), (16, 8), (24, 4)]
    assert param_layout(lib, "cuFuncGetParamInfo", func) == expected
    assert param_layout(lib, "cuKernelGetParamInfo", kernel) == expected
    frp0k = [(0, 8), (8, 4), (16, 8), (24, 8), (32, 4), (36, 4), (40, 4), (44, 4)]
    assert param_layout(lib, "cuFuncGetParamInfo", kernels[FRP0K][1]) == frp0k
    assert param_layout(lib, "cuFuncGetParamInfo", kernels[b"_Z5emptyv"][1]) == []


@isolated
def test_launch_of_unknown_handle_is_invalid_handle(fake: FakeCuda) -> None:
    lib = load(fake)
    kernels = library_kernels(lib)
    bogus = ctypes.c_void_p(address(lib, "cuInit"))
    r = lib.cuLaunchKernel(bogus, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    assert r == CUDA_ERROR_INVALID_HANDLE
    empty_kernel = ctypes.c_void_p(kernels[b"_Z5emptyv"][0])
    assert lib.cuLaunchKernel(empty_kernel, 1, 1, 1, 1, 1, 1, 0, None, None, None) == 0


@isolated
def test_address_range_resolves_interior_pointers_and_copies_stay_inside(fake: FakeCuda) -> None:
    lib = load(fake)
    library_kernels(lib)  # makes a context current
    ptr, pitch = ctypes.c_uint64(), ctypes.c_size_t()
    assert lib.cuMemAllocPitch_v2(ctypes.byref(ptr), ctypes.byref(pitch), ctypes.c_size_t(1000),
                                  ctypes.c_size_t(3), 4) == CUDA_SUCCESS
    assert pitch.value == 1024
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    assert lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                       ctypes.c_uint64(ptr.value + 2000)) == CUDA_SUCCESS
    assert (base.value, size.value) == (ptr.value, 3 * 1024)
    data = (ctypes.c_ubyte * 64)()
    inside = ctypes.c_uint64(ptr.value + 3 * 1024 - 64)
    assert lib.cuMemcpyDtoH_v2(data, inside, ctypes.c_size_t(64)) == CUDA_SUCCESS
    assert lib.cuMemcpyDtoH_v2(data, inside, ctypes.c_size_t(65)) == CUDA_ERROR_INVALID_VALUE
    assert lib.cuMemFree_v2(ctypes.c_uint64(ptr.value + 8)) == CUDA_ERROR_INVALID_VALUE
    assert lib.cuMemFree_v2(ptr) == CUDA_SUCCESS
    assert lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                       ptr) == CUDA_ERROR_NOT_FOUND


@isolated
def test_stream_writes_land_in_mapped_memory_and_break_a_capture(fake: FakeCuda) -> None:
    """cuStreamWriteValue64 writes registered host memory (not memory the device cannot
    map); on a capturing stream it is refused and the capture is lost, as a tool's must never
    be."""
    lib = load(fake)
    library_kernels(lib)  # makes a context current
    word = (ctypes.c_uint64 * 4)()
    where = ctypes.c_uint64(ctypes.addressof(word) + 8)
    write = lib.cuStreamWriteValue64_v2
    write.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
    assert write(None, where, 7, 0) == CUDA_ERROR_INVALID_VALUE     # not registered
    assert lib.cuMemHostRegister_v2(word, ctypes.c_size_t(32), 3) == CUDA_SUCCESS
    assert write(None, where, 7, 0) == CUDA_SUCCESS
    assert list(word) == [0, 7, 0, 0]
    stream, graph = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.cuStreamCreate(ctypes.byref(stream), 0) == CUDA_SUCCESS
    assert lib.cuStreamBeginCapture_v2(stream, 0) == CUDA_SUCCESS
    assert write(stream, where, 9, 0) == 900                       # unsupported in a capture
    assert lib.cuStreamEndCapture(stream, ctypes.byref(graph)) == 901   # and the capture lost
    assert list(word) == [0, 7, 0, 0]


def test_a_bad_pointer_ends_the_context(fake: FakeCuda) -> None:
    """poke through a bad pointer: later work is accepted and never runs, the next sync
    says CUDA_ERROR_ILLEGAL_ADDRESS, and so does every call after it."""
    done = run(fake, "flight", "fault")
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == ["launch after the fault 0", "sync 700"]
    assert run(fake, "flight", "ok").stdout.splitlines() == ["sync 0"]


# ---------------------------------------------------------------- the programs


def test_linked(fake: FakeCuda) -> None:
    done = run(fake, "linked")
    assert done.returncode == 0, done.stderr
    assert summary(done.stdout) == ({"vecAdd": 3, "scale": 2}, (4, 3 * 4000 + 4 * 4096))


@pytest.mark.parametrize("per_thread", [False, True])
def test_cudart_like(fake: FakeCuda, per_thread: bool) -> None:
    done = run(fake, "cudart_like", *(["--per-thread"] if per_thread else []))
    assert done.returncode == 0, done.stderr
    assert summary(done.stdout)[0] == {"vecAdd": 2, "scale": 1, "fill": 1}
    lines = done.stdout.splitlines()
    assert 'resolve "" -> not found' in lines
    assert "resolve cuGetProcAddress 12000 0 -> cuGetProcAddress_v2" in lines
    assert "resolve cuLaunchKernel 7000 2 -> cuLaunchKernel_ptsz" in lines
    ex = "cuLaunchKernelEx_ptsz" if per_thread else "cuLaunchKernelEx"
    assert f"resolve cuLaunchKernelEx 11060 {2 if per_thread else 0} -> {ex}" in lines


def test_dlsym_direct(fake: FakeCuda) -> None:
    done = run(fake, "dlsym_direct")
    assert done.returncode == 0, done.stderr
    assert "function _Z6vecAddPKfS0_Pfi" in done.stdout
    assert summary(done.stdout) == ({"vecAdd": 1, "scale": 1}, (3, 3 * 1200))


def test_threads(fake: FakeCuda) -> None:
    done = run(fake, "threads", "20")
    assert done.returncode == 0, done.stderr
    assert summary(done.stdout) == ({"vecAdd": 8 * 20}, (24, 24 * 4096 * 4))


@pytest.mark.parametrize(
    ("args", "rc", "message"),
    [
        ([], 0, "verified 10 graph replays"),
        (["--copy"], 0, "verified 10 graph replays with a captured copy"),
        (["--legacy-query"], 0, "legacy stream query -> 906"),
        (["--alloc"], 3, "this thread: cuMemAlloc_v2 -> 900"),
        (["--alloc-thread"], 3, "other thread: cuMemAlloc_v2 -> 900"),
        (["--sync-thread"], 3, "other thread: cuCtxSynchronize -> 900"),
        (["--relaxed-thread"], 0, "other thread: cuMemAlloc_v2 -> 0"),
        (["--mode", "thread_local", "--alloc-thread"], 0, "other thread: cuMemAlloc_v2 -> 0"),
        (["--mode", "thread_local", "--alloc"], 3, "this thread: cuMemAlloc_v2 -> 900"),
        (["--mode", "relaxed", "--alloc"], 0, "this thread: cuMemAlloc_v2 -> 0"),
    ],
)
def test_capture(fake: FakeCuda, args: list[str], rc: int, message: str) -> None:
    done = run(fake, "capture", *args)
    assert done.returncode == rc, done.stdout + done.stderr
    assert message in done.stdout.splitlines()
    launches, _ = summary(done.stdout)
    if rc == 3:
        assert "capture invalidated (cuStreamEndCapture -> 901)" in done.stdout
        assert "graph" not in launches
    else:
        assert launches == {"scale": 2, "vecAdd": 1, "graph": 10}


def test_zed_matches_numpy_reference(fake: FakeCuda, tmp_path: Path) -> None:
    width, height, frames = 96, 40, 3
    done = run(fake, "zed", str(frames), "--size", f"{width}x{height}", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    sums = re.findall(r"^frame (\d+) gain ([\d.]+) left (\d+) right (\d+)$", done.stdout, re.M)
    assert len(sums) == frames
    for frame, gain, left_sum, right_sum in sums:
        f = int(frame)
        _, left, right = zedref.pipeline(width, height, f)
        assert float(gain) == zedref.gain_for_frame(f)
        for eye, expected, got_sum in (("left", left, left_sum), ("right", right, right_sum)):
            raw = np.fromfile(tmp_path / f"{eye}_{f}.rgba", dtype=np.uint8)
            np.testing.assert_array_equal(raw.reshape(height, width, 4), expected)
            assert int(got_sum) == zedref.checksum(expected)
    assert summary(done.stdout)[0] == {"nv12_to_uyvy": frames, "FrP0k5607tPV": frames}


def test_zed_default_size(fake: FakeCuda) -> None:
    done = run(fake, "zed")
    assert done.returncode == 0, done.stderr
    _, left, right = zedref.pipeline(zedref.DEFAULT_WIDTH, zedref.DEFAULT_HEIGHT, 1)
    assert f"frame 1 gain 1.25 left {zedref.checksum(left)} right {zedref.checksum(right)}" in (
        done.stdout.splitlines())
    counts, (allocs, _) = summary(done.stdout)
    assert counts == {"nv12_to_uyvy": 2, "FrP0k5607tPV": 2} and allocs == 4


def test_exitcode_status(fake: FakeCuda) -> None:
    done = run(fake, "exitcode", "3")
    assert done.returncode == 3
    assert summary(done.stdout)[0] == {"empty": 1}


def test_exitcode_signal(fake: FakeCuda) -> None:
    done = run(fake, "exitcode", "sig", str(int(signal.SIGSEGV)))
    assert done.returncode == -signal.SIGSEGV
    assert summary(done.stdout)[0] == {"empty": 1}


def test_vmm(fake: FakeCuda) -> None:
    done = run(fake, "vmm")
    assert done.returncode == 0, done.stderr
    assert summary(done.stdout) == ({"fill": 1, "scale": 1}, (1, 2 << 20))


def test_programs_fail_without_the_stand_in(fake: FakeCuda) -> None:
    """The programs really depend on the library they are given."""
    done = subprocess.run(
        [str(fake.programs["dlsym_direct"])],
        env={"LD_LIBRARY_PATH": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Either no libcuda.so.1 at all, or a real driver without a device or with
    # no built-in kernels: never the stand-in's success.
    assert done.returncode != 0 or "verified" not in done.stdout


def test_build_is_cached(fake: FakeCuda) -> None:
    before = {name: path.stat().st_mtime_ns for name, path in fake.programs.items()}
    lib_before = fake.library.stat().st_mtime_ns
    again = build_fakecuda(fake.lib_dir.parent)
    assert {n: p.stat().st_mtime_ns for n, p in again.programs.items()} == before
    assert again.library.stat().st_mtime_ns == lib_before
    assert set(again.programs) == {"linked", "cudart_like", "dlsym_direct", "threads", "capture",
                                   "zed", "exitcode", "vmm", "graphs", "allocs", "structs", "nans",
                                   "diverge", "modules", "procs", "ranks", "chain",
                                   "graph_scans", "tensormaps", "flight", "sets", "lazy", "layers",
                                   "arena", "roomy", "ctxdestroy", "ctxcycle", "programmatic",
                                   "collectives", "steps", "untilfile", "reuse", "xla"}


def test_stand_in_never_loaded_into_the_test_process(fake: FakeCuda) -> None:
    """Runs after the isolated tests above: none of them leaked the library."""
    maps = Path("/proc/self/maps").read_text()
    assert str(fake.library.resolve()) not in maps


CUDA_H = Path("/usr/local/cuda/include/cuda.h")
ABI_PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include HEADER
#define SHOW(x) printf("%s %lld\n", #x, (long long)(x))
int main(void)
{
    SHOW(sizeof(PROP)); SHOW(offsetof(PROP, location)); SHOW(offsetof(PROP, win32HandleMetaData));
    SHOW(offsetof(PROP, allocFlags)); SHOW(sizeof(ACCESS)); SHOW(offsetof(ACCESS, flags));
    SHOW(INVALID_CONTEXT); SHOW(ILLEGAL_STATE); SHOW(CAPTURE_UNSUPPORTED);
    SHOW(CAPTURE_INVALIDATED); SHOW(WRONG_THREAD); SHOW(NON_BLOCKING); SHOW(RANGE_START);
    SHOW(RANGE_SIZE); SHOW(PINNED); SHOW(LOCATION_DEVICE); SHOW(READWRITE);
    return 0;
}
"""
REAL_NAMES = {
    "HEADER": "<cuda.h>", "PROP": "CUmemAllocationProp", "ACCESS": "CUmemAccessDesc",
    "INVALID_CONTEXT": "CUDA_ERROR_INVALID_CONTEXT", "ILLEGAL_STATE": "CUDA_ERROR_ILLEGAL_STATE",
    "CAPTURE_UNSUPPORTED": "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    "CAPTURE_INVALIDATED": "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
    "WRONG_THREAD": "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
    "NON_BLOCKING": "CU_STREAM_NON_BLOCKING",
    "RANGE_START": "CU_POINTER_ATTRIBUTE_RANGE_START_ADDR",
    "RANGE_SIZE": "CU_POINTER_ATTRIBUTE_RANGE_SIZE", "PINNED": "CU_MEM_ALLOCATION_TYPE_PINNED",
    "LOCATION_DEVICE": "CU_MEM_LOCATION_TYPE_DEVICE",
    "READWRITE": "CU_MEM_ACCESS_FLAGS_PROT_READWRITE",
}
OWN_NAMES = {
    "HEADER": '"fakecuda.h"', "PROP": "struct fc_mem_allocation_prop",
    "ACCESS": "struct fc_mem_access_desc", "INVALID_CONTEXT": "FC_ERROR_INVALID_CONTEXT",
    "ILLEGAL_STATE": "FC_ERROR_ILLEGAL_STATE",
    "CAPTURE_UNSUPPORTED": "FC_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    "CAPTURE_INVALIDATED": "FC_ERROR_STREAM_CAPTURE_INVALIDATED",
    "WRONG_THREAD": "FC_ERROR_STREAM_CAPTURE_WRONG_THREAD",
    "NON_BLOCKING": "FC_STREAM_NON_BLOCKING",
    "RANGE_START": "FC_POINTER_ATTRIBUTE_RANGE_START_ADDR",
    "RANGE_SIZE": "FC_POINTER_ATTRIBUTE_RANGE_SIZE", "PINNED": "FC_MEM_ALLOCATION_TYPE_PINNED",
    "LOCATION_DEVICE": "FC_MEM_LOCATION_TYPE_DEVICE",
    "READWRITE": "FC_MEM_ACCESS_FLAGS_PROT_READWRITE",
}


def probe_abi(tmp_path: Path, names: dict[str, str], tag: str) -> str:
    source = tmp_path / f"{tag}.c"
    source.write_text(ABI_PROBE)
    binary = tmp_path / tag
    defines = [f"-D{key}={value}" for key, value in names.items()]
    includes = [f"-I{CUDA_H.parent}", f"-I{Path(__file__).parent / 'fakecuda'}",
                f"-I{Path(__file__).parent.parent / 'shim'}"]
    subprocess.run(["cc", "-std=c11", *includes, *defines, str(source), "-o", str(binary)],
                   check=True)
    return subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(not CUDA_H.exists(), reason="needs the real cuda.h to compare with")
def test_own_declarations_match_cuda_h(tmp_path: Path) -> None:
    real = probe_abi(tmp_path, REAL_NAMES, "real")
    own = probe_abi(tmp_path, OWN_NAMES, "own")
    assert own.splitlines() == real.splitlines()
