"""Replays one captured CUDA kernel launch and compares its output with the capture.

A standalone script: it needs only the standard library, numpy and cuda-python's
`cuda.bindings.driver`, so that a copy of it can sit in an extract folder beside
the captured launch and run on any machine with a GPU:

    python replay_engine.py [FOLDER] [--runs N] [--device D]

FOLDER holds launch.json (format "cudump-launch/1"), the kernel's image and the
buffers' .npy files. Every region the kernel's pointers reach is allocated once,
zero-filled before each run, and the captured `before` contents are copied into
the buffers; the kernel is launched with its captured parameters, the pointer
words in them patched to the new allocations, and the buffers are read back and
compared bit for bit with the captured `after` contents.

Exit status: 0 when every compared buffer is equal to its capture (and runs agree
with each other), 1 when something differs, 2 when the replay could not be done.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "cudump-launch/1"
SPEC_FILE = "launch.json"
IMAGE_FORMATS = ("cubin", "fatbin", "ptx")
REGION_KINDS = ("linear", "pitched")
POINTER_SIZE = 8
# Above this much dynamic shared memory a kernel must opt in
# (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
DEFAULT_SMEM_LIMIT = 48 * 1024
# cuMemAllocPitch accepts only these element sizes.
PITCH_ELEMENT_SIZES = (4, 8, 16)


class ReplayError(Exception):
    """A replay that could not be done: one line saying what and, where possible, how to fix it."""


class SpecError(ReplayError):
    """launch.json is malformed or inconsistent."""


# ---------------------------------------------------------------- the launch spec


def _fail(where: str, problem: str) -> SpecError:
    return SpecError(f"{SPEC_FILE}: {where} {problem}")


def _field(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise _fail(f"{where}.{key}" if where else key, "is missing")
    return obj[key]


def _int(obj: dict[str, Any], key: str, where: str, *, minimum: int | None = 0,
         default: int | None = None) -> int:
    name = f"{where}.{key}" if where else key
    if key not in obj and default is not None:
        return default
    value = _field(obj, key, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"must be an integer, not {json.dumps(value)}")
    if minimum is not None and value < minimum:
        raise _fail(name, f"must be at least {minimum}, not {value}")
    return value


def _str(obj: dict[str, Any], key: str, where: str = "") -> str:
    name = f"{where}.{key}" if where else key
    value = _field(obj, key, where)
    if not isinstance(value, str) or not value:
        raise _fail(name, f"must be a non-empty string, not {json.dumps(value)}")
    return value


def _optional_path(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _fail(f"{where}.{key}", f"must be a file name or null, not {json.dumps(value)}")
    return value


def _dim3(obj: dict[str, Any], key: str) -> tuple[int, int, int]:
    value = _field(obj, key, "")
    if (not isinstance(value, list) or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise _fail(key, f"must be 3 positive integers, not {json.dumps(value)}")
    return value[0], value[1], value[2]


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise _fail(key, f"must be a list, not {json.dumps(value)}")
    return value


def _entry(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"must be an object, not {json.dumps(value)}")
    return value


@dataclass(frozen=True)
class Region:
    """One allocation the kernel reaches; pitched ones came from cuMemAllocPitch."""

    size: int
    kind: str = "linear"
    pitch: int = 0
    width: int = 0
    height: int = 0
    elem: int = 0

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str) -> Region:
        size = _int(obj, "size", where, minimum=1)
        kind = obj.get("kind", "linear")
        if kind not in REGION_KINDS:
            raise _fail(f"{where}.kind", f"must be one of {', '.join(REGION_KINDS)}, "
                                         f"not {json.dumps(kind)}")
        region = cls(size, kind, _int(obj, "pitch", where, default=0),
                     _int(obj, "width", where, default=0), _int(obj, "height", where, default=0),
                     _int(obj, "elem", where, default=0))
        if kind == "pitched":
            if region.width < 1 or region.height < 1:
                raise _fail(where, f"is pitched but its width {region.width} or height "
                                   f"{region.height} is 0")
            if region.pitch < region.width:
                raise _fail(f"{where}.pitch", f"{region.pitch} is less than its width "
                                              f"{region.width}")
        return region

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "kind": self.kind, "pitch": self.pitch, "width": self.width,
                "height": self.height, "elem": self.elem}


@dataclass(frozen=True)
class Pointer:
    """The 8-byte word at byte `offset` of parameter `arg` points `delta` bytes into `region`."""

    arg: int
    offset: int
    region: int
    delta: int

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str) -> Pointer:
        return cls(_int(obj, "arg", where), _int(obj, "offset", where, default=0),
                   _int(obj, "region", where), _int(obj, "delta", where, default=0))

    def to_json(self) -> dict[str, Any]:
        return {"arg": self.arg, "offset": self.offset, "region": self.region,
                "delta": self.delta}


@dataclass(frozen=True)
class Buffer:
    """`height` rows of `width` bytes, `pitch` apart, `delta` bytes into `region`, as
    captured before and after the launch (rows packed in the .npy files)."""

    arg: int
    offset: int
    region: int
    delta: int
    width: int
    height: int
    pitch: int
    dtype: str
    shape: tuple[int, ...]
    before: str | None = None
    after: str | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str) -> Buffer:
        width = _int(obj, "width", where, minimum=1)
        height = _int(obj, "height", where, minimum=1, default=1)
        pitch = _int(obj, "pitch", where, default=width)
        dtype = _field(obj, "dtype", where)
        try:
            np_dtype = np.dtype(dtype) if isinstance(dtype, str) and dtype else None
        except TypeError:
            np_dtype = None
        if np_dtype is None or np_dtype.hasobject or np_dtype.itemsize == 0:
            raise _fail(f"{where}.dtype", f"{json.dumps(dtype)} is not a numpy dtype of "
                                          "plain data")
        shape = _field(obj, "shape", where)
        if (not isinstance(shape, list)
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                           for n in shape)):
            raise _fail(f"{where}.shape", f"must be a list of sizes, not {json.dumps(shape)}")
        buffer = cls(_int(obj, "arg", where), _int(obj, "offset", where, default=0),
                     _int(obj, "region", where), _int(obj, "delta", where, default=0), width,
                     height, pitch, str(dtype), tuple(shape),
                     _optional_path(obj, "before", where), _optional_path(obj, "after", where))
        if height > 1 and pitch < width:
            raise _fail(f"{where}.pitch", f"{pitch} is less than its width {width}")
        nbytes = math.prod(shape) * np_dtype.itemsize
        if nbytes != width * height:
            raise _fail(where, f"holds {width * height} bytes ({height} x {width}) but "
                               f"{dtype} {format_shape(buffer.shape)} is {nbytes} bytes")
        return buffer

    def to_json(self) -> dict[str, Any]:
        return {"arg": self.arg, "offset": self.offset, "region": self.region,
                "delta": self.delta, "width": self.width, "height": self.height,
                "pitch": self.pitch, "dtype": self.dtype, "shape": list(self.shape),
                "before": self.before, "after": self.after}

    @property
    def extent(self) -> int:
        """Bytes from the buffer's first byte to one past its last."""
        return (self.height - 1) * self.pitch + self.width

    @property
    def label(self) -> str:
        return f"arg{self.arg}" if self.offset == 0 else f"arg{self.arg}+{self.offset}"

    def describe(self) -> str:
        return f"{self.label} ({self.dtype} {format_shape(self.shape)})"

    def as_array(self, data: bytes | bytearray | memoryview) -> np.ndarray:
        return np.frombuffer(bytes(data), dtype=np.dtype(self.dtype)).reshape(self.shape).copy()


@dataclass(frozen=True)
class LaunchSpec:
    """One captured launch: the kernel, its configuration, its parameter bytes and the
    memory its pointers reach."""

    kernel: str
    mangled: str
    image: str
    image_format: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    params: bytes
    layout: tuple[tuple[int, int], ...]
    regions: tuple[Region, ...] = ()
    pointers: tuple[Pointer, ...] = ()
    buffers: tuple[Buffer, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, obj: Any) -> LaunchSpec:
        if not isinstance(obj, dict):
            raise SpecError(f"{SPEC_FILE}: must hold a JSON object, not {type(obj).__name__}")
        fmt = obj.get("format")
        if fmt != FORMAT:
            raise _fail("format", f"is {json.dumps(fmt)}, not {json.dumps(FORMAT)}: this "
                                  "replay_engine.py reads only that format")
        image_format = _str(obj, "image_format")
        if image_format not in IMAGE_FORMATS:
            raise _fail("image_format", f"must be one of {', '.join(IMAGE_FORMATS)}, not "
                                        f"{json.dumps(image_format)}")
        hex_params = _field(obj, "params", "")
        if not isinstance(hex_params, str):
            raise _fail("params", f"must be a hex string, not {json.dumps(hex_params)}")
        try:
            params = bytes.fromhex(hex_params)
        except ValueError:
            raise _fail("params", "is not a hex string") from None
        layout = cls._layout(obj, len(params))
        regions = tuple(Region.from_json(_entry(r, f"regions[{i}]"), f"regions[{i}]")
                        for i, r in enumerate(_list(obj, "regions")))
        pointers = tuple(Pointer.from_json(_entry(p, f"pointers[{i}]"), f"pointers[{i}]")
                         for i, p in enumerate(_list(obj, "pointers")))
        buffers = tuple(Buffer.from_json(_entry(b, f"buffers[{i}]"), f"buffers[{i}]")
                        for i, b in enumerate(_list(obj, "buffers")))
        known = {"format", "kernel", "mangled", "image", "image_format", "grid", "block", "smem",
                 "params", "layout", "regions", "pointers", "buffers"}
        spec = cls(kernel=_str(obj, "kernel"), mangled=_str(obj, "mangled"),
                   image=_str(obj, "image"), image_format=image_format, grid=_dim3(obj, "grid"),
                   block=_dim3(obj, "block"), smem=_int(obj, "smem", "", default=0),
                   params=params, layout=layout, regions=regions, pointers=pointers,
                   buffers=buffers, extra={k: v for k, v in obj.items() if k not in known})
        spec._check_references()
        return spec

    @staticmethod
    def _layout(obj: dict[str, Any], nbytes: int) -> tuple[tuple[int, int], ...]:
        raw = _list(obj, "layout")
        layout: list[tuple[int, int]] = []
        end = 0
        for i, entry in enumerate(raw):
            if (not isinstance(entry, list) or len(entry) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in entry)
                    or entry[0] < 0 or entry[1] < 1):
                raise _fail(f"layout[{i}]", f"must be [offset, size] with size > 0, not "
                                            f"{json.dumps(entry)}")
            offset, size = entry
            if offset < end:
                raise _fail(f"layout[{i}]", f"offset {offset} overlaps the parameter before it "
                                            f"(which ends at {end})")
            end = offset + size
            layout.append((offset, size))
        total = sum(size for _, size in layout)
        if total != nbytes:
            raise _fail("params", f"holds {nbytes} bytes but the layout's {len(layout)} "
                                  f"parameters take {total}")
        return tuple(layout)

    def _check_references(self) -> None:
        nregions, nargs = len(self.regions), len(self.layout)
        for kind, entries in (("pointers", self.pointers), ("buffers", self.buffers)):
            for i, e in enumerate(entries):
                where = f"{kind}[{i}]"
                if e.arg >= nargs:
                    raise _fail(f"{where}.arg", f"{e.arg} does not exist ({nargs} parameters)")
                if e.region >= nregions:
                    raise _fail(f"{where}.region", f"{e.region} does not exist "
                                                   f"({nregions} regions)")
                size = self.regions[e.region].size
                if kind == "pointers":
                    if e.offset + POINTER_SIZE > self.layout[e.arg][1]:
                        raise _fail(f"{where}.offset", f"{e.offset}: an 8-byte pointer there "
                                                       f"does not fit in parameter {e.arg} "
                                                       f"({self.layout[e.arg][1]} bytes)")
                    if e.delta > size:
                        raise _fail(f"{where}.delta", f"{e.delta} is past the end of region "
                                                      f"{e.region} ({size} bytes)")
                else:
                    assert isinstance(e, Buffer)
                    if e.delta + e.extent > size:
                        raise _fail(where, f"ends at byte {e.delta + e.extent} of region "
                                           f"{e.region}, which has {size} bytes")

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "kernel": self.kernel, "mangled": self.mangled,
                "image": self.image, "image_format": self.image_format, "grid": list(self.grid),
                "block": list(self.block), "smem": self.smem, "params": self.params.hex(),
                "layout": [list(entry) for entry in self.layout],
                "regions": [r.to_json() for r in self.regions],
                "pointers": [p.to_json() for p in self.pointers],
                "buffers": [b.to_json() for b in self.buffers], **self.extra}

    @classmethod
    def load(cls, folder: Path) -> LaunchSpec:
        path = Path(folder) / SPEC_FILE
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ReplayError(f"no {SPEC_FILE} in {folder}: give the folder of an extracted "
                              "launch") from None
        except OSError as e:
            raise ReplayError(f"cannot read {path}: {e.strerror}") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{SPEC_FILE}: not valid JSON: {e.msg} at line {e.lineno} column "
                            f"{e.colno}") from None
        return cls.from_json(obj)

    def param_bytes(self) -> list[bytes]:
        """Each parameter's captured bytes."""
        out, at = [], 0
        for _, size in self.layout:
            out.append(self.params[at:at + size])
            at += size
        return out


def format_shape(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def patch_params(spec: LaunchSpec, region_addresses: list[int]) -> list[bytes]:
    """Each parameter's bytes with every pointer word replaced by the address of its
    region plus its delta (uint64, little endian)."""
    if len(region_addresses) != len(spec.regions):
        raise ReplayError(f"patch_params: {len(region_addresses)} region addresses given for "
                          f"{len(spec.regions)} regions")
    params = [bytearray(b) for b in spec.param_bytes()]
    for p in spec.pointers:
        address = (region_addresses[p.region] + p.delta) & 0xFFFF_FFFF_FFFF_FFFF
        params[p.arg][p.offset:p.offset + POINTER_SIZE] = address.to_bytes(POINTER_SIZE,
                                                                            "little")
    return [bytes(b) for b in params]


# ---------------------------------------------------------------- the driver

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
                self._copy_in(buffer, _raw_bytes(buffer, array))
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


def _raw_bytes(buffer: Buffer, array: np.ndarray) -> bytes:
    data = np.ascontiguousarray(array).tobytes()
    if len(data) != buffer.width * buffer.height:
        raise ReplayError(f"the before array of {buffer.label} has {len(data)} bytes, not "
                          f"{buffer.width * buffer.height} ({buffer.height} rows of "
                          f"{buffer.width})")
    return data


# ---------------------------------------------------------------- comparing


def _element_bytes(array: np.ndarray) -> np.ndarray:
    """The array's elements as rows of raw bytes: equal rows are bit-for-bit equal elements."""
    flat = np.ascontiguousarray(array).reshape(-1)
    return flat.view(np.uint8).reshape(flat.size, array.dtype.itemsize)


def bit_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaNs with the same bit pattern are equal)."""
    return (a.dtype == b.dtype and a.shape == b.shape
            and np.array_equal(_element_bytes(a), _element_bytes(b)))


def differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Flat indices of the elements whose bytes differ (same dtype and shape)."""
    return np.flatnonzero(np.any(_element_bytes(a) != _element_bytes(b), axis=1))


def compare(buffer: Buffer, got: np.ndarray, want: np.ndarray) -> str | None:
    """None when `got` is bit for bit `want`, else what differs, in one line."""
    if bit_equal(got, want):
        return None
    if got.dtype != want.dtype or got.shape != want.shape:
        return (f"the captured after is {want.dtype} {format_shape(want.shape)}, the replay "
                f"gave {got.dtype} {format_shape(got.shape)}")
    where = differing(got, want)
    first = int(where[0])
    index = tuple(int(i) for i in np.unravel_index(first, got.shape)) if got.shape else ()
    return (f"{len(where)} of {got.size} elements differ from the captured after; first at "
            f"index {index}: {got.reshape(-1)[first]} != {want.reshape(-1)[first]}")


def load_array(folder: Path, name: str, buffer: Buffer) -> np.ndarray:
    path = folder / name
    try:
        array = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ReplayError(f"{path} is missing: the extract is incomplete") from None
    except (OSError, ValueError) as e:
        raise ReplayError(f"{path} is not a readable .npy file: {e}") from None
    data = _raw_bytes(buffer, array)
    return buffer.as_array(data)


def read_image(folder: Path, spec: LaunchSpec) -> bytes:
    path = folder / spec.image
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ReplayError(f"{path} is missing: the extract is incomplete") from None
    except OSError as e:
        raise ReplayError(f"cannot read {path}: {e.strerror}") from None


def replay(folder: Path, runs: int = 1, device: int = 0, out: Any = None) -> int:
    """Replays the launch in `folder` `runs` times, prints what it finds; the exit status."""
    out = out or sys.stdout
    spec = LaunchSpec.load(folder)
    image = read_image(folder, spec)
    before = [None if b.before is None else load_array(folder, b.before, b)
              for b in spec.buffers]
    after = [None if b.after is None else load_array(folder, b.after, b) for b in spec.buffers]
    status = 0
    results: list[list[np.ndarray]] = []
    with Replayer(spec, image, device) as replayer:
        for run in range(1, runs + 1):
            got = replayer.run(list(before))
            results.append(got)
            prefix = f"run {run}: " if runs > 1 else ""
            for buffer, array, want in zip(spec.buffers, got, after, strict=True):
                if want is None:
                    continue
                problem = compare(buffer, array, want)
                if problem is not None:
                    status = 1
                print(f"{prefix}{buffer.describe()}: "
                      f"{problem or 'equal to the captured after'}", file=out)
    if not any(a is not None for a in after):
        print("no buffer has a captured after to compare with", file=out)
    if runs > 1:
        deterministic = True
        for run in range(1, runs):
            for buffer, first, later in zip(spec.buffers, results[0], results[run],
                                            strict=True):
                if not bit_equal(first, later):
                    deterministic = False
                    print(f"runs 1 and {run + 1} differ in {buffer.label}: the kernel is not "
                          "deterministic", file=out)
        if deterministic:
            print(f"all {runs} runs gave the same buffers", file=out)
        else:
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="replay_engine.py",
        description="Replays one captured CUDA kernel launch and compares its output with the "
                    "capture.")
    parser.add_argument("folder", nargs="?", type=Path, default=Path(__file__).resolve().parent,
                        help="the folder with launch.json (default: this script's folder)")
    parser.add_argument("--runs", type=int, default=1, help="replay this many times (default 1)")
    parser.add_argument("--device", type=int, default=0, help="the GPU to use (default 0)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.device < 0:
        parser.error("--device must be 0 or more")
    try:
        return replay(args.folder, args.runs, args.device)
    except ReplayError as e:
        print("replay: " + " ".join(str(e).split()), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
