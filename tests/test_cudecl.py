"""shim/cudecl.h declares the driver types the shim uses without the CUDA toolkit.

Where a real cuda.h is installed, compile one program against each header that
prints every size, offset and constant the shim relies on, and compare.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"

PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include HEADER
#define SZ(t) printf("sizeof %s %zu\n", #t, sizeof(t));
#define OFF(t, m) printf("offsetof %s.%s %zu\n", #t, #m, offsetof(t, m));
#define VAL(v) printf("value %s %lld\n", #v, (long long)(v));
int main(void) {
    SZ(CUresult) SZ(CUdevice) SZ(CUdeviceptr) SZ(cuuint64_t) SZ(CUmemGenericAllocationHandle)
    SZ(CUDA_MEMCPY2D) SZ(CUlaunchConfig) SZ(CUlaunchAttribute) SZ(CUmemorytype)
    SZ(CUstreamCaptureStatus) SZ(CUstreamCaptureMode) SZ(CUdriverProcAddressQueryResult)
    OFF(CUDA_MEMCPY2D, srcXInBytes) OFF(CUDA_MEMCPY2D, srcY) OFF(CUDA_MEMCPY2D, srcMemoryType)
    OFF(CUDA_MEMCPY2D, srcHost) OFF(CUDA_MEMCPY2D, srcDevice) OFF(CUDA_MEMCPY2D, srcArray)
    OFF(CUDA_MEMCPY2D, srcPitch) OFF(CUDA_MEMCPY2D, dstXInBytes) OFF(CUDA_MEMCPY2D, dstY)
    OFF(CUDA_MEMCPY2D, dstMemoryType) OFF(CUDA_MEMCPY2D, dstHost)
    OFF(CUDA_MEMCPY2D, dstDevice) OFF(CUDA_MEMCPY2D, dstArray) OFF(CUDA_MEMCPY2D, dstPitch)
    OFF(CUDA_MEMCPY2D, WidthInBytes) OFF(CUDA_MEMCPY2D, Height)
    OFF(CUlaunchConfig, gridDimX) OFF(CUlaunchConfig, gridDimY) OFF(CUlaunchConfig, gridDimZ)
    OFF(CUlaunchConfig, blockDimX) OFF(CUlaunchConfig, blockDimY) OFF(CUlaunchConfig, blockDimZ)
    OFF(CUlaunchConfig, sharedMemBytes) OFF(CUlaunchConfig, hStream)
    OFF(CUlaunchConfig, attrs) OFF(CUlaunchConfig, numAttrs)
    OFF(CUlaunchAttribute, id) OFF(CUlaunchAttribute, value)
    VAL(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    VAL(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT)
    VAL(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) VAL(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    VAL(CUDA_SUCCESS) VAL(CUDA_ERROR_INVALID_VALUE) VAL(CUDA_ERROR_OUT_OF_MEMORY)
    VAL(CUDA_ERROR_NOT_INITIALIZED) VAL(CUDA_ERROR_DEINITIALIZED) VAL(CUDA_ERROR_INVALID_CONTEXT)
    VAL(CUDA_ERROR_INVALID_HANDLE)
    VAL(CUDA_ERROR_NOT_FOUND)
    VAL(CUDA_ERROR_NOT_SUPPORTED) VAL(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
    VAL(CU_GET_PROC_ADDRESS_DEFAULT) VAL(CU_GET_PROC_ADDRESS_LEGACY_STREAM)
    VAL(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) VAL(CU_GET_PROC_ADDRESS_SUCCESS)
    VAL(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) VAL(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
    VAL(CU_MEMORYTYPE_HOST) VAL(CU_MEMORYTYPE_DEVICE) VAL(CU_MEMORYTYPE_ARRAY)
    VAL(CU_MEMORYTYPE_UNIFIED) VAL(CU_STREAM_CAPTURE_STATUS_NONE)
    VAL(CU_STREAM_CAPTURE_STATUS_ACTIVE) VAL(CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    VAL(CU_STREAM_CAPTURE_MODE_GLOBAL) VAL(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    VAL(CU_STREAM_CAPTURE_MODE_RELAXED) VAL((size_t)CU_STREAM_LEGACY)
    VAL((size_t)CU_STREAM_PER_THREAD) VAL(CU_MEMHOSTREGISTER_PORTABLE)
    VAL(CU_MEMHOSTREGISTER_DEVICEMAP)
    VAL(CU_EVENT_DISABLE_TIMING)
    SZ(CUmemLocation) SZ(CUmemPoolProps) OFF(CUmemPoolProps, allocType)
    OFF(CUmemPoolProps, handleTypes) OFF(CUmemPoolProps, location)
    OFF(CUmemPoolProps, win32SecurityAttributes) OFF(CUmemPoolProps, maxSize)
    OFF(CUmemPoolProps, usage) OFF(CUmemLocation, id)
    VAL(CU_MEM_ALLOCATION_TYPE_PINNED) VAL(CU_MEM_HANDLE_TYPE_NONE)
    VAL(CU_MEM_LOCATION_TYPE_DEVICE) VAL(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    VAL(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    SZ(CUDA_KERNEL_NODE_PARAMS) OFF(CUDA_KERNEL_NODE_PARAMS, func)
    OFF(CUDA_KERNEL_NODE_PARAMS, gridDimX) OFF(CUDA_KERNEL_NODE_PARAMS, gridDimY)
    OFF(CUDA_KERNEL_NODE_PARAMS, gridDimZ) OFF(CUDA_KERNEL_NODE_PARAMS, blockDimX)
    OFF(CUDA_KERNEL_NODE_PARAMS, blockDimY) OFF(CUDA_KERNEL_NODE_PARAMS, blockDimZ)
    OFF(CUDA_KERNEL_NODE_PARAMS, sharedMemBytes) OFF(CUDA_KERNEL_NODE_PARAMS, kernelParams)
    OFF(CUDA_KERNEL_NODE_PARAMS, extra) OFF(CUDA_KERNEL_NODE_PARAMS, kern)
    OFF(CUDA_KERNEL_NODE_PARAMS, ctx)
    SZ(CUDA_MEMCPY3D) OFF(CUDA_MEMCPY3D, srcMemoryType) OFF(CUDA_MEMCPY3D, srcDevice)
    OFF(CUDA_MEMCPY3D, srcPitch) OFF(CUDA_MEMCPY3D, srcHeight) OFF(CUDA_MEMCPY3D, dstMemoryType)
    OFF(CUDA_MEMCPY3D, dstHost) OFF(CUDA_MEMCPY3D, dstPitch) OFF(CUDA_MEMCPY3D, dstHeight)
    OFF(CUDA_MEMCPY3D, WidthInBytes) OFF(CUDA_MEMCPY3D, Height) OFF(CUDA_MEMCPY3D, Depth)
    OFF(CUDA_MEMCPY3D, dstXInBytes) OFF(CUDA_MEMCPY3D, dstY) OFF(CUDA_MEMCPY3D, dstZ)
    OFF(CUDA_MEMCPY3D, dstDevice)
    VAL(CU_GRAPH_NODE_TYPE_KERNEL) VAL(CU_GRAPH_NODE_TYPE_GRAPH) VAL(CU_GRAPH_NODE_TYPE_MEM_ALLOC)
    VAL(CU_GRAPH_NODE_TYPE_MEM_FREE) VAL(CU_GRAPH_NODE_TYPE_CONDITIONAL)
    SZ(CUDA_GRAPH_INSTANTIATE_PARAMS) OFF(CUDA_GRAPH_INSTANTIATE_PARAMS, flags)
    OFF(CUDA_GRAPH_INSTANTIATE_PARAMS, hUploadStream)
    OFF(CUDA_GRAPH_INSTANTIATE_PARAMS, hErrNode_out)
    OFF(CUDA_GRAPH_INSTANTIATE_PARAMS, result_out)
    VAL(CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) VAL(CU_STREAM_NON_BLOCKING)
    SZ(CUtensorMap) VAL(CU_TENSOR_MAP_NUM_QWORDS)
    SZ(CUtensorMapDataType) SZ(CUtensorMapInterleave) SZ(CUtensorMapSwizzle)
    SZ(CUtensorMapL2promotion) SZ(CUtensorMapFloatOOBfill) SZ(CUtensorMapIm2ColWideMode)
    VAL(CU_TENSOR_MAP_DATA_TYPE_UINT8) VAL(CU_TENSOR_MAP_DATA_TYPE_UINT16)
    VAL(CU_TENSOR_MAP_DATA_TYPE_UINT32) VAL(CU_TENSOR_MAP_DATA_TYPE_INT32)
    VAL(CU_TENSOR_MAP_DATA_TYPE_UINT64) VAL(CU_TENSOR_MAP_DATA_TYPE_INT64)
    VAL(CU_TENSOR_MAP_DATA_TYPE_FLOAT16) VAL(CU_TENSOR_MAP_DATA_TYPE_FLOAT32)
    VAL(CU_TENSOR_MAP_DATA_TYPE_FLOAT64) VAL(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16)
    VAL(CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ) VAL(CU_TENSOR_MAP_DATA_TYPE_TFLOAT32)
    VAL(CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ) VAL(CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B)
    VAL(CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B) VAL(CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B)
    return 0;
}
"""


def probe(tmp_path: Path, header: str, include: Path) -> str:
    src = tmp_path / f"probe_{include.name}.c"
    exe = tmp_path / f"probe_{include.name}"
    src.write_text(PROBE.replace("HEADER", f'"{header}"'))
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{include}", "-o", str(exe),
                    str(src)], check=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").is_file(),
                    reason=f"no cuda.h under {CUDA_INCLUDE} to check against")
def test_declarations_match_the_real_cuda_h(tmp_path):
    ours = probe(tmp_path, "cudecl.h", ROOT / "shim")
    theirs = probe(tmp_path, "cuda.h", CUDA_INCLUDE)
    assert ours.count("\n") > 60
    assert ours == theirs


# api.h's parameter lists of the tensor-map functions and cuMemGetInfo, against cuda.h's
# prototypes: a wrapper called with another list would pass the driver its arguments in the
# wrong places.
PROTOTYPES = r"""
#include <cuda.h>
#include "api.h"
#define SAME(name) CUresult (*check_##name) CUDUMP_P_##name = name;
SAME(cuTensorMapEncodeTiled) SAME(cuTensorMapEncodeIm2col) SAME(cuTensorMapEncodeIm2colWide)
SAME(cuTensorMapReplaceAddress) SAME(cuMemGetInfo)
int main(void) { return 0; }
"""


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").is_file(),
                    reason=f"no cuda.h under {CUDA_INCLUDE} to check against")
def test_prototypes_match_the_real_cuda_h(tmp_path):
    src = tmp_path / "prototypes.c"
    src.write_text(PROTOTYPES)
    done = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-Wincompatible-pointer-types",
                           "-fsyntax-only", f"-I{CUDA_INCLUDE}", f"-I{ROOT / 'shim'}", str(src)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# The families of the program's writes from the host (shim/hostwrite.c), named as cuda.h names
# each API. cuda.h maps the name to the variant a program gets: with
# CUDA_API_PER_THREAD_DEFAULT_STREAM the _ptds or _ptsz one, else the plain one (cuMemsetD8 ->
# cuMemsetD8_v2 or cuMemsetD8_v2_ptds). For each, api.h's parameter list must be that
# prototype's, and its VARIANT rows must name exactly those symbols.
HOST_WRITE_FAMILIES = (
    "cuMemcpyHtoD", "cuMemcpyHtoDAsync", "cuMemcpy2D", "cuMemcpy2DUnaligned", "cuMemcpy2DAsync",
    "cuMemcpy3D", "cuMemcpy3DAsync", "cuMemsetD8", "cuMemsetD16", "cuMemsetD32",
    "cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async", "cuMemsetD2D8", "cuMemsetD2D16",
    "cuMemsetD2D32", "cuMemsetD2D8Async", "cuMemsetD2D16Async", "cuMemsetD2D32Async")

# Compiled only (-fsyntax-only): each family's list is the type of cuda.h's function.
HOST_WRITE_PROTOTYPES = r"""
#include <cuda.h>
#include "api.h"
#define SAME(name) CUresult (*check_##name) CUDUMP_P_##name = name;
CHECKS
"""

# Run: the variant each VARIANT row names beside the one cuda.h's name gives, for the rows
# of the mode compiled (PTSZ).
HOST_WRITE_NAMES = r"""
#include <stdio.h>
#include <string.h>
#include <cuda.h>
#include "api.h"
#define STR_(x) #x
#define STR(x) STR_(x)
int main(void) {
#define NAME(sym, family, ptsz) \
    if (ptsz == PTSZ && strstr(FAMILIES, " " #family " ")) printf("%s %s\n", #sym, STR(family));
    CUDUMP_VARIANTS(NAME)
    return 0;
}
"""


def variant_pairs(tmp_path: Path, families: tuple[str, ...], per_thread: bool
                  ) -> list[list[str]]:
    """Compiles each family's parameter list against cuda.h's prototype (failing the test
    where one differs), then pairs each VARIANT row of those families (of the mode compiled)
    with the variant cuda.h's name gives: [row symbol, cuda.h's]."""
    flags = ["-std=c11", "-Wall", "-Werror", "-Wincompatible-pointer-types",
             f"-I{CUDA_INCLUDE}", f"-I{ROOT / 'shim'}"]
    if per_thread:
        flags.append("-DCUDA_API_PER_THREAD_DEFAULT_STREAM")
    src = tmp_path / "prototypes.c"
    src.write_text(HOST_WRITE_PROTOTYPES.replace(
        "CHECKS", " ".join(f"SAME({f})" for f in families)))
    done = subprocess.run(["cc", *flags, "-fsyntax-only", str(src)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    src, exe = tmp_path / "names.c", tmp_path / "names"
    src.write_text(HOST_WRITE_NAMES.replace(
        "FAMILIES", '" ' + " ".join(families) + ' "').replace(
        "PTSZ", "1" if per_thread else "0"))
    subprocess.run(["cc", *flags, "-o", str(exe), str(src)], check=True)
    return [line.split() for line in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()]


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").is_file(),
                    reason=f"no cuda.h under {CUDA_INCLUDE} to check against")
@pytest.mark.parametrize("per_thread", [False, True])
def test_host_write_prototypes_and_variants_match_the_real_cuda_h(tmp_path, per_thread):
    pairs = variant_pairs(tmp_path, HOST_WRITE_FAMILIES, per_thread)
    assert len(pairs) == len(HOST_WRITE_FAMILIES)
    assert all(ours == theirs for ours, theirs in pairs), pairs


# The families the shim only counts (api.h's CUDUMP_PASSED: shim/calls.h), named as cuda.h
# names each API; the two CUDA 12.8 batch forms (_v1) are not in cuda.h's public names.
PASSED_FAMILIES = (
    "cuMemcpyAsync", "cuMemcpyDtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyPeer",
    "cuMemcpyPeerAsync", "cuMemcpy3DPeer", "cuMemcpy3DPeerAsync", "cuMemcpyAtoD",
    "cuMemcpyBatchAsync", "cuMemcpy3DBatchAsync", "cuEventRecord", "cuEventRecordWithFlags",
    "cuStreamWaitEvent", "cuLaunchHostFunc", "cuStreamWriteValue32", "cuStreamWriteValue64",
    "cuStreamWaitValue32", "cuStreamWaitValue64", "cuStreamBatchMemOp",
    "cuWaitExternalSemaphoresAsync", "cuStreamAddCallback", "cuGraphicsMapResources",
    "cuGraphicsUnmapResources", "cuStreamCreate", "cuStreamCreateWithPriority",
    "cuStreamDestroy", "cuStreamQuery", "cuEventQuery", "cuSignalExternalSemaphoresAsync")
# Counted too, and the shim's hooks note that the context ended (shim/ctxlife.h).
CONTEXT_END_FAMILIES = ("cuCtxDestroy", "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset")


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").is_file(),
                    reason=f"no cuda.h under {CUDA_INCLUDE} to check against")
@pytest.mark.parametrize("per_thread", [False, True])
def test_passed_prototypes_and_variants_match_the_real_cuda_h(tmp_path, per_thread):
    """Each counted family's list is cuda.h's prototype, and the variant cuda.h's name gives
    (plain, or per-thread) is one of the family's VARIANT rows: a program built either way
    reaches the shim's wrapper."""
    families = PASSED_FAMILIES + CONTEXT_END_FAMILIES
    pairs = variant_pairs(tmp_path, families, per_thread)
    gives = {theirs for _, theirs in pairs}
    rows: dict[str, set[str]] = {}
    for ours, theirs in pairs:
        rows.setdefault(theirs, set()).add(ours)
    # every family's variant named by cuda.h is a row of that family
    assert len(gives) == len(families) or per_thread
    assert all(theirs in rows[theirs] for theirs in gives), rows
