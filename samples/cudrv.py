"""Small helpers the Python samples share: checked cuda.bindings calls, a
context, NVRTC compilation with name expressions, and kernel launches."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from cuda.bindings import driver as cu
from cuda.bindings import nvrtc


class SampleFailure(Exception):
    """A CUDA call or a result check failed; the sample exits non-zero."""


def check(result):
    """Unwrap a cuda.bindings (status, value...) tuple, raising on any error."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if isinstance(status, cu.CUresult) and status != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(status)
        raise SampleFailure(f"driver call failed: {name.decode() if name else status}")
    if isinstance(status, nvrtc.nvrtcResult) and status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise SampleFailure(f"NVRTC call failed: {status}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def open_device(ordinal: int = 0) -> tuple[cu.CUdevice, str]:
    """Make the device's primary context current; return it and its sm_XY name."""
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(ordinal))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    attr = cu.CUdevice_attribute
    major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    return dev, f"sm_{major}{minor}"


@dataclass
class Compiled:
    cubin: bytes
    lowered: dict[str, str]   # name expression -> mangled name


def compile_cuda(source: str, name_expressions: Sequence[str], arch: str,
                 program_name: str = "sample.cu") -> Compiled:
    """Compile with NVRTC to a cubin for `arch` (machine code, so a newer NVRTC
    than the driver does not matter) and resolve each name expression."""
    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), program_name.encode(), 0, [], []))
    try:
        for expr in name_expressions:
            check(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        options = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
        status, = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = check(nvrtc.nvrtcGetProgramLogSize(prog))
            log = b" " * size
            check(nvrtc.nvrtcGetProgramLog(prog, log))
            raise SampleFailure(f"NVRTC: {status}\n{log.decode(errors='replace')}")
        lowered = {}
        for expr in name_expressions:
            name = check(nvrtc.nvrtcGetLoweredName(prog, expr.encode()))
            lowered[expr] = name.decode() if isinstance(name, bytes) else str(name)
        size = check(nvrtc.nvrtcGetCUBINSize(prog))
        cubin = b" " * size
        check(nvrtc.nvrtcGetCUBIN(prog, cubin))
        return Compiled(cubin=cubin, lowered=lowered)
    finally:
        check(nvrtc.nvrtcDestroyProgram(prog))


def load_functions(compiled: Compiled) -> dict[str, cu.CUfunction]:
    """Load the cubin and look each kernel up by its mangled name."""
    module = check(cu.cuModuleLoadData(compiled.cubin))
    return {expr: check(cu.cuModuleGetFunction(module, name.encode()))
            for expr, name in compiled.lowered.items()}


def ptr(value) -> np.ndarray:
    """A device pointer argument."""
    return np.array([int(value)], dtype=np.uint64)


def i32(value: int) -> np.ndarray:
    return np.array([value], dtype=np.int32)


def u32(value: int) -> np.ndarray:
    return np.array([value], dtype=np.uint32)


def f32(value: float) -> np.ndarray:
    return np.array([value], dtype=np.float32)


def launch(fn: cu.CUfunction, grid: tuple[int, int, int], block: tuple[int, int, int],
           args: Sequence[np.ndarray], stream: cu.CUstream | int = 0) -> None:
    """cuLaunchKernel with kernelParams built from one small array per argument."""
    params = np.array([a.ctypes.data for a in args], dtype=np.uint64)
    check(cu.cuLaunchKernel(fn, *grid, *block, 0, stream, params.ctypes.data, 0))


def to_device(host: np.ndarray) -> cu.CUdeviceptr:
    dptr = check(cu.cuMemAlloc(host.nbytes))
    check(cu.cuMemcpyHtoD(dptr, host.ctypes.data, host.nbytes))
    return dptr


def from_device(dptr, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    check(cu.cuMemcpyDtoH(out.ctypes.data, dptr, out.nbytes))
    return out


def copy_2d(dst, dst_pitch: int, src, src_pitch: int, width_bytes: int, height: int,
            to_device: bool) -> None:
    """cuMemcpy2D between a host array and a pitched device allocation."""
    copy = cu.CUDA_MEMCPY2D()
    host_type, dev_type = cu.CUmemorytype.CU_MEMORYTYPE_HOST, cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    if to_device:
        copy.srcMemoryType, copy.srcHost = host_type, src.ctypes.data
        copy.dstMemoryType, copy.dstDevice = dev_type, dst
    else:
        copy.srcMemoryType, copy.srcDevice = dev_type, src
        copy.dstMemoryType, copy.dstHost = host_type, dst.ctypes.data
    copy.srcPitch, copy.dstPitch = src_pitch, dst_pitch
    copy.WidthInBytes, copy.Height = width_bytes, height
    check(cu.cuMemcpy2D(copy))


def run_main(main) -> None:
    """Run a sample's main; any failure is one line on stderr and exit status 1."""
    try:
        main()
    except SampleFailure as err:
        print(f"{sys.argv[0]}: {err}", file=sys.stderr)
        sys.exit(1)
