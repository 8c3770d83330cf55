"""The replay engine's driver side: the kernel loaded, its regions allocated and its launch run
through cuda-python's `cuda.bindings.driver`, with failures said in one line.

Part of the standalone replay engine (cudump/analysis/replay_engine/): it needs the standard
library, numpy and cuda.bindings (imported when a Replayer is made) only.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

# The engine's files import each other by their plain names when they run on their own (copies
# in an extract folder, whose folder Python puts on sys.path) and relatively when they are the
# package cudump.analysis.replay_engine (__package__ names it then; it is empty or None in a
# script and in a module imported by its plain name). More in cudump's
# cudump/analysis/replay_engine/__init__.py.
if __package__:
    from .replay_spec import Buffer, LaunchSpec, Region, ReplayError, patch_params, raw_bytes
else:
    from replay_spec import Buffer, LaunchSpec, Region, ReplayError, patch_params, raw_bytes

# Above this much dynamic shared memory a kernel must opt in
# (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
DEFAULT_SMEM_LIMIT = 48 * 1024
# cuMemAllocPitch accepts only these element sizes.
PITCH_ELEMENT_SIZES = (4, 8, 16)


# What to say about some failures, by call and error name ("*": any call).
_HINTS: dict[tuple[str, str], str] = {
    ("cuInit", "CUDA_ERROR_NO_DEVICE"): "no CUDA device is visible: check nvidia-smi and "
                                        "CUDA_VISIBLE_DEVICES",
    ("cuInit", "CUDA_ERROR_INSUFFICIENT_DRIVER"): "the NVIDIA driver is too old for this "
                                                  "cuda-python: update the driver",
    ("cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE"): "no such device: pass --device with a "
                                                  "smaller number",
    ("cuModuleLoadData", "CUDA_ERROR_NO_BINARY_FOR_GPU"): "the image has no code for this "
                                                          "GPU: replay on a GPU of the "
                                                          "architecture it was captured on",
    ("cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE"): "the image file is damaged or not of "
                                                      "its image_format",
    ("cuModuleLoadData", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"): "the PTX is newer than this "
                                                                "driver: update the driver",
    ("cuModuleLoadData", "CUDA_ERROR_INVALID_PTX"): "the driver's compiler rejected the PTX",
    ("cuModuleGetFunction", "CUDA_ERROR_NOT_FOUND"): "the image has no kernel of that name",
    ("cuFuncSetAttribute", "CUDA_ERROR_INVALID_VALUE"): "this GPU cannot give the kernel "
                                                        "that much dynamic shared memory",
    ("*", "CUDA_ERROR_OUT_OF_MEMORY"): "the GPU has not enough free memory: free some (see "
                                       "nvidia-smi) or use another --device",
    ("cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE"): "the grid, block or shared memory size is "
                                                    "not valid for this kernel on this GPU",
    ("cuLaunchKernel", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"): "the block needs more registers "
                                                              "or shared memory than this GPU "
                                                              "has",
    ("sync", "CUDA_ERROR_ILLEGAL_ADDRESS"): "it reached memory outside the captured regions "
                                            "(a pointer the capture did not see?)",
    ("sync", "CUDA_ERROR_MISALIGNED_ADDRESS"): "a pointer it was given is not aligned as it "
                                               "needs",
    ("sync", "CUDA_ERROR_LAUNCH_TIMEOUT"): "it ran longer than the display watchdog allows",
}


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError:
        raise ReplayError("cuda.bindings is not installed: pip install cuda-python") from None
    return driver


def _error_name(driver: Any, err: Any) -> tuple[str, int]:
    try:
        code = int(err)
    except (TypeError, ValueError):
        return str(err), -1
    name = getattr(err, "name", None)
    if not name:
        try:
            name = driver.CUresult(code).name
        except ValueError:
            name = f"CUresult {code}"
    return name, code


def _describe(driver: Any, err: Any) -> str:
    try:
        result, text = driver.cuGetErrorString(err)
        if int(result) == 0 and text:
            return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # a description is optional
        pass
    return "no description"


def _error_message(driver: Any, call: str, err: Any) -> str:
    name, code = _error_name(driver, err)
    api = call.split("(")[0]
    hint = _HINTS.get((api, name)) or _HINTS.get(("*", name)) or _describe(driver, err)
    return f"{call} failed: {name} ({code}): {hint}"


def _check(driver: Any, call: str, result: Any) -> Any:
    """Unpacks a cuda.bindings result tuple: raises ReplayError unless it says success;
    returns the one value (or the tuple of values, or None)."""
    err, values = result[0], result[1:]
    if int(err) != 0:
        raise ReplayError(_error_message(driver, call, err))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


class Replayer:
    """The kernel loaded and its regions allocated on one GPU, ready to run the launch."""

    def __init__(self, spec: LaunchSpec, image: bytes, device: int = 0) -> None:
        self.spec = spec
        self.device_index = device
        self.region_addresses: list[int] = []
        self.pitched_as_pitched: list[bool] = []
        self.module: Any = None
        self.function: Any = None
        self.device_name = ""
        self._device: Any = None
        self._context: Any = None
        self._cu = _driver()
        try:
            self._open(image)
        except BaseException:
            self.close()
            raise

    def _call(self, call: str, fn: Any, *args: Any) -> Any:
        return _check(self._cu, call, fn(*args))

    def _open(self, image: bytes) -> None:
        cu, spec = self._cu, self.spec
        try:
            init = cu.cuInit(0)
        except Exception as e:  # cuda.bindings' load failures share no base class
            raise ReplayError(f"cannot load the CUDA driver libcuda.so.1 ({type(e).__name__}): "
                              "install the NVIDIA driver, or put the folder that holds "
                              "libcuda.so.1 on LD_LIBRARY_PATH") from None
        _check(cu, "cuInit", init)
        self._device = self._call(f"cuDeviceGet({self.device_index})", cu.cuDeviceGet,
                                  self.device_index)
        name = self._call("cuDeviceGetName", cu.cuDeviceGetName, 256, self._device)
        self.device_name = bytes(name).split(b"\0", 1)[0].decode(errors="replace")
        self._context = self._call("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain,
                                   self._device)
        self._call("cuCtxSetCurrent", cu.cuCtxSetCurrent, self._context)
        if spec.image_format == "ptx" and not image.endswith(b"\0"):
            image += b"\0"
        # cuda.bindings takes the image through the buffer protocol: bytes work as they are.
        self.module = self._call(f"cuModuleLoadData({spec.image})", cu.cuModuleLoadData, image)
        self.function = self._call(f"cuModuleGetFunction({spec.mangled})",
                                   cu.cuModuleGetFunction, self.module, spec.mangled.encode())
        if spec.smem > DEFAULT_SMEM_LIMIT:
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._call(f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {spec.smem})",
                       cu.cuFuncSetAttribute, self.function, attr, spec.smem)
        for i, region in enumerate(spec.regions):
            address, pitched = self._allocate(i, region)
            self.region_addresses.append(address)
            self.pitched_as_pitched.append(pitched)

    def _allocate(self, index: int, region: Region) -> tuple[int, bool]:
        cu = self._cu
        if region.kind == "pitched":
            elem = region.elem if region.elem in PITCH_ELEMENT_SIZES else 4
            err, ptr, pitch = cu.cuMemAllocPitch(region.width, region.height, elem)
            if int(err) == 0:
                if pitch == region.pitch and region.size <= pitch * region.height:
                    return int(ptr), True
                self._call("cuMemFree", cu.cuMemFree, ptr)
        ptr = self._call(f"cuMemAlloc(region {index}, {region.size} bytes)", cu.cuMemAlloc,
                         region.size)
        return int(ptr), False

    # ---- copies

    def _copy(self, buffer: Buffer, host: int, to_device: bool) -> None:
        """Moves a buffer between host memory (rows packed) and its place in its region (rows
        `pitch` apart), either way."""
        cu = self._cu
        device = self.region_addresses[buffer.region] + buffer.delta
        what = f"copying {buffer.label} in" if to_device else f"reading {buffer.label} back"
        name, one = (("cuMemcpyHtoD", cu.cuMemcpyHtoD) if to_device
                     else ("cuMemcpyDtoH", cu.cuMemcpyDtoH))

        def rows(first: int, nbytes: int) -> tuple[int, int, int]:
            dev, mem = device + first * buffer.pitch, host + first * buffer.width
            return (dev, mem, nbytes) if to_device else (mem, dev, nbytes)

        if buffer.height == 1 or buffer.pitch == buffer.width:
            self._call(f"{name}({what})", one, *rows(0, buffer.width * buffer.height))
            return
        kind = cu.CUmemorytype
        copy = cu.CUDA_MEMCPY2D()
        if to_device:
            copy.srcMemoryType, copy.srcHost, copy.srcPitch = kind.CU_MEMORYTYPE_HOST, host, \
                buffer.width
            copy.dstMemoryType, copy.dstDevice, copy.dstPitch = kind.CU_MEMORYTYPE_DEVICE, \
                device, buffer.pitch
        else:
            copy.srcMemoryType, copy.srcDevice, copy.srcPitch = kind.CU_MEMORYTYPE_DEVICE, \
                device, buffer.pitch
            copy.dstMemoryType, copy.dstHost, copy.dstPitch = kind.CU_MEMORYTYPE_HOST, host, \
                buffer.width
        copy.WidthInBytes = buffer.width
        copy.Height = buffer.height
        if int(cu.cuMemcpy2D(copy)[0]) == 0:
            return
        for row in range(buffer.height):  # pitches cuMemcpy2D refuses: one row at a time
            self._call(f"{name}({what}, row {row})", one, *rows(row, buffer.width))

    def _copy_in(self, buffer: Buffer, data: bytes) -> None:
        host = np.frombuffer(data, np.uint8)  # no copy: the driver only reads it
        self._copy(buffer, host.ctypes.data, True)

    def _copy_out(self, buffer: Buffer) -> np.ndarray:
        host = np.empty(buffer.width * buffer.height, np.uint8)
        self._copy(buffer, host.ctypes.data, False)
        return host.view(np.dtype(buffer.dtype)).reshape(buffer.shape)

    # ---- the launch

    def run(self, before: list[np.ndarray | None]) -> list[np.ndarray]:
        """Zero-fills the regions, copies the `before` arrays in, launches, waits, and
        returns every buffer's contents after the launch."""
        cu, spec = self._cu, self.spec
        if self.function is None:
            raise ReplayError("the replayer is closed")
        if len(before) != len(spec.buffers):
            raise ReplayError(f"run() got {len(before)} before arrays for "
                              f"{len(spec.buffers)} buffers")
        self._call("cuCtxSetCurrent", cu.cuCtxSetCurrent, self._context)
        for i, (region, address) in enumerate(zip(spec.regions, self.region_addresses,
                                                  strict=True)):
            self._call(f"cuMemsetD8(region {i})", cu.cuMemsetD8, address, 0, region.size)
        for buffer, array in zip(spec.buffers, before, strict=True):
            if array is not None:
                self._copy_in(buffer, raw_bytes(buffer, array))
        params = patch_params(spec, self.region_addresses)
        # kernelParams: an array of pointers to each parameter's bytes. cuda.bindings takes
        # an int as the address of a ready-made void** array; the ctypes objects must live
        # until the launch has copied the parameters.
        holders = [ctypes.create_string_buffer(p, len(p)) for p in params]
        pointers = (ctypes.c_void_p * max(len(holders), 1))(
            *[ctypes.addressof(h) for h in holders])
        kernel_params = ctypes.addressof(pointers) if holders else 0
        self._call(f"cuLaunchKernel({spec.kernel})", cu.cuLaunchKernel, self.function,
                   *spec.grid, *spec.block, spec.smem, 0, kernel_params, 0)
        err = cu.cuCtxSynchronize()[0]
        if int(err) != 0:
            name, code = _error_name(cu, err)
            hint = _HINTS.get(("sync", name)) or _describe(cu, err)
            raise ReplayError(f"the kernel failed: {name} ({code}): {hint}; the context is "
                              "unusable now, so the replay stops")
        del holders, pointers
        return [self._copy_out(buffer) for buffer in spec.buffers]

    def close(self) -> None:
        """Frees the regions, unloads the module and releases the primary context."""
        cu = getattr(self, "_cu", None)
        if cu is None:
            return
        if self._context is not None:
            cu.cuCtxSetCurrent(self._context)
        for address in self.region_addresses:
            cu.cuMemFree(address)
        self.region_addresses = []
        self.pitched_as_pitched = []
        if self.module is not None:
            cu.cuModuleUnload(self.module)
            self.module = None
        self.function = None
        if self._context is not None:
            cu.cuDevicePrimaryCtxRelease(self._device)
            self._context = None

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
