"""shim/cudecl.h declares the driver types the shim uses without the CUDA toolkit.

Where a real cuda.h is installed, compile one program against each header that
prints every size, offset and constant the shim relies on, and compare.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
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


# ---- api.h's table against cuda.h's prototypes and names --------------------------------

# Families whose name in cuda.h means another ABI than the row's, or is not in cuda.h at all:
# their rows are checked by the tests that run them on the stand-in driver only.
NOT_IN_CUDA_H = {
    "cuGetProcAddress": "cuda.h's name is the _v2 form (5 arguments), the row the 4-argument one",
    "cuGraphInstantiate": "cuda.h's name is cuGraphInstantiateWithFlags, the row the pre-12.0 form",
    "cuMemcpyBatchAsync_v1": "the CUDA 12.8 form, not in cuda.h",
    "cuMemcpy3DBatchAsync_v1": "the CUDA 12.8 form, not in cuda.h",
}
# Rows whose list names a type cudecl.h does not declare by one of the same ABI (an int for an
# enum, void * for a pointer the shim never looks into): not compared with cuda.h's types.
ABI_TYPES = {"cuModuleLoadDataEx", "cuLibraryLoadData", "cuLibraryLoadFromFile",
             "cuStreamBeginCaptureToGraph", "cuStreamEndCapture", "cuGraphExecUpdate",
             "cuGraphExecNodeSetParams", "cuGraphExecMemsetNodeSetParams",
             "cuGraphExecHostNodeSetParams", "cuGraphExecExternalSemaphoresSignalNodeSetParams",
             "cuGraphExecExternalSemaphoresWaitNodeSetParams",
             "cuGraphExecBatchMemOpNodeSetParams"}
# Per-thread builds name an inline function of cuda.h's own, which calls cuGetProcAddress_v2.
INLINE_PER_THREAD = {"cuGetProcAddress_v2"}


@dataclass(frozen=True)
class Row:
    """One row of api.h's CUDUMP_API table, as written."""

    family: str
    counts: str
    waits: str
    does: str                           # the behaviour's name: PASSES, SETS, HOOK ...
    variants: tuple[tuple[str, int], ...]  # (symbol, ptsz)

    @property
    def writes(self) -> bool:
        return self.does in ("COPIES_TO_DEVICE", "COPIES_2D", "COPIES_3D", "SETS", "SETS_2D")


ROWS_PROGRAM = r"""
#include <stdio.h>
#include "api.h"
#define ROW(c, family, counts, waits, does, params, args, ...) \
    printf("%s|%s|%s|%s|%s\n", #family, #counts, #waits, #does, #__VA_ARGS__);
int main(void) {
    CUDUMP_API(ROW, ~)
    return 0;
}
"""


def api_rows(tmp_path: Path) -> list[Row]:
    """The rows of api.h, printed by a program that expands the table (no cuda.h needed)."""
    src, exe = tmp_path / "rows.c", tmp_path / "rows"
    src.write_text(ROWS_PROGRAM)
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{ROOT / 'shim'}", "-o", str(exe),
                    str(src)], check=True)
    rows = []
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        family, counts, waits, does, variants = line.split("|")
        rows.append(Row(family, counts, waits, re.match(r"\w+", does).group(0),
                        tuple((sym, int(ptsz)) for sym, ptsz in
                              re.findall(r"\((\w+), ([01])\)", variants))))
    return rows


def test_the_table_is_read_whole(tmp_path):
    """Every row has a variant, a family once, and the words api.h defines."""
    rows = api_rows(tmp_path)
    assert len(rows) > 100
    assert len({r.family for r in rows}) == len(rows)
    assert all(r.variants for r in rows)
    assert {r.counts for r in rows} == {"HOST", "WORK", "ASKS", "LAUNCH"}
    assert {r.waits for r in rows} == {"NO_WAIT", "WAITS", "WAITS_COPY", "WAITS_GPU"}
    assert {r.does for r in rows} >= {"PASSES", "HOOK", "SETS", "COPIES_2D", "ALLOCATES"}


# Compiled only (-fsyntax-only): each family's list is the type of cuda.h's function.
PROTOTYPES = r"""
#include <cuda.h>
#include "api.h"
#define OURS(c, family, counts, waits, does, params, ...) typedef CUresult (*ours_##family) params;
CUDUMP_API(OURS, ~)
CHECKS
"""

# Run: the variant cuda.h's name gives, in the mode compiled (CUDA_API_PER_THREAD_DEFAULT_STREAM
# or not), for each family.
NAMES = r"""
#include <stdio.h>
#include <cuda.h>
#define STR_(x) #x
#define STR(x) STR_(x)
int main(void) {
NAMES
    return 0;
}
"""


def cuda_h_flags(per_thread: bool) -> list[str]:
    flags = ["-std=c11", "-Wall", "-Werror", "-Wincompatible-pointer-types",
             f"-I{CUDA_INCLUDE}", f"-I{ROOT / 'shim'}"]
    return [*flags, "-DCUDA_API_PER_THREAD_DEFAULT_STREAM"] if per_thread else flags


def cuda_h_variants(tmp_path: Path, families: list[str], per_thread: bool) -> dict[str, str]:
    """family -> the variant that cuda.h's name of it gives in that mode."""
    src, exe = tmp_path / "names.c", tmp_path / "names"
    src.write_text(NAMES.replace("NAMES", "\n".join(
        f'    printf("%s %s\\n", "{f}", STR({f}));' for f in families)))
    subprocess.run(["cc", *cuda_h_flags(per_thread), "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return dict(line.split() for line in out.splitlines())


def checked(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.family not in NOT_IN_CUDA_H]


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").is_file(),
                    reason=f"no cuda.h under {CUDA_INCLUDE} to check against")
@pytest.mark.parametrize("per_thread", [False, True])
def test_every_row_s_parameters_are_cuda_h_s_prototype(tmp_path, per_thread):
    """A wrapper called with another list than the driver's would pass the driver its
    arguments in the wrong places: each row's list must be the type of cuda.h's function."""
    rows = [r for r in checked(api_rows(tmp_path)) if r.family not in ABI_TYPES]
    assert len(rows) > 90
    src = tmp_path / "prototypes.c"
    src.write_text(PROTOTYPES.replace("CHECKS", "\n".join(
        f"ours_{r.family} check_{r.family} = {r.family};" for r in rows)))
    done = subprocess.run(["cc", *cuda_h_flags(per_thread), "-fsyntax-only", str(src)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").is_file(),
                    reason=f"no cuda.h under {CUDA_INCLUDE} to check against")
@pytest.mark.parametrize("per_thread", [False, True])
def test_the_variant_cuda_h_names_is_a_row_s(tmp_path, per_thread):
    """A program built either way (plain, or per-thread default stream) reaches the shim's
    wrapper: the variant cuda.h's name gives is one of the family's, of the mode compiled
    where the family has one of that mode. A family that writes device memory from the host
    has exactly one variant of each mode, and it is cuda.h's."""
    rows = [r for r in checked(api_rows(tmp_path))
            if not (per_thread and r.family in INLINE_PER_THREAD)]
    theirs = cuda_h_variants(tmp_path, [r.family for r in rows], per_thread)
    wrong = []
    for r in rows:
        mode = [sym for sym, ptsz in r.variants if ptsz == per_thread]
        want = mode or [sym for sym, ptsz in r.variants if not ptsz]
        if r.writes and len(mode) != 1 or theirs[r.family] not in want:
            wrong.append(f"{r.family}: cuda.h gives {theirs[r.family]}, the row has {want}")
    assert not wrong, "\n".join(wrong)
