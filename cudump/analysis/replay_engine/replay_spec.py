"""The launch spec of the replay engine: launch.json (format "cudump-launch/1") read, checked
and written, and the parameter bytes patched with new addresses.

Part of the standalone replay engine (cudump/analysis/replay_engine/): it needs the standard
library and numpy only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# The engine's files import each other by their plain names when they run on their own and
# relatively when they are the package cudump.analysis.replay_engine (see replay.py).
if __package__:
    from .replay_files import (
        BigNumber,
        ReplayError,
        control_character,
        name_problem,
        parse_json,
        read_file,
        show,
        show_path,
    )
else:
    from replay_files import (
        BigNumber,
        ReplayError,
        control_character,
        name_problem,
        parse_json,
        read_file,
        show,
        show_path,
    )

FORMAT = "cudump-launch/1"
SPEC_FILE = "launch.json"
IMAGE_FORMATS = ("cubin", "fatbin", "ptx")
REGION_KINDS = ("linear", "pitched")
POINTER_SIZE = 8

# The bounds every field is checked against, so that nothing the driver is given, and no
# size computed on the host, can be out of its type's range.
SPEC_LIMIT = 64 << 20            # bytes of launch.json
MAX_BYTES = 1 << 48              # a region, buffer or offset in one (GPU address space)
MAX_PARAM_BYTES = 32764          # a launch's parameters (CUDA 12.1 and later)
MAX_SMEM = (1 << 32) - 1         # cuLaunchKernel's sharedMemBytes is an unsigned int
MAX_ENTRIES = 1 << 16            # regions, pointers or buffers
MAX_DIMS = 32                    # a buffer's shape
MAX_TEXT = 1 << 20               # kernel and mangled names
GRID_LIMITS = ((1 << 31) - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)
MAX_THREADS = 1024               # threads of one block
# A dtype is a plain name ("float32", "<u2", "bool"), parsed by numpy only when it is one.
_DTYPE_NAME = re.compile(r"[<>=|]?[A-Za-z][A-Za-z0-9]{0,15}")
_HEX = re.compile(r"(?:[0-9A-Fa-f]{2})*")


class SpecError(ReplayError):
    """launch.json is malformed or inconsistent."""


def _show(value: Any) -> str:
    return str(value) if isinstance(value, BigNumber) else show(value)


def _fail(where: str, problem: str) -> SpecError:
    return SpecError(f"{SPEC_FILE}: {where} {problem}")


def _field(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise _fail(f"{where}.{key}" if where else key, "is missing")
    return obj[key]


def _int(obj: dict[str, Any], key: str, where: str, *, minimum: int = 0,
         maximum: int = MAX_BYTES, default: int | None = None) -> int:
    name = f"{where}.{key}" if where else key
    if key not in obj and default is not None:
        return default
    value = _field(obj, key, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"must be an integer, not {_show(value)}")
    if value < minimum:
        raise _fail(name, f"must be at least {minimum}, not {value}")
    if value > maximum:
        raise _fail(name, f"must be at most {maximum}, not {value}")
    return value


def _text(obj: dict[str, Any], key: str, where: str = "", limit: int = MAX_TEXT) -> str:
    name = f"{where}.{key}" if where else key
    value = _field(obj, key, where)
    if not isinstance(value, str) or not value:
        raise _fail(name, f"must be a non-empty string, not {_show(value)}")
    if len(value) > limit:
        raise _fail(name, f"is {len(value)} characters long, more than {limit}")
    if "\0" in value:
        raise _fail(name, "holds a NUL character")
    if control_character(value):   # printed in messages: shown, never obeyed by a terminal
        raise _fail(name, "holds a control character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(name, "is not valid Unicode text") from None
    return value


def _str(obj: dict[str, Any], key: str, where: str = "") -> str:
    return _text(obj, key, where)


def _optional_path(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _fail(f"{where}.{key}", f"must be a file name or null, not {_show(value)}")
    return value


def _dim3(obj: dict[str, Any], key: str, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    value = _field(obj, key, "")
    if (not isinstance(value, list) or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise _fail(key, f"must be 3 positive integers, not {_show(value)}")
    for axis, v, most in zip("xyz", value, limits, strict=True):
        if v > most:
            raise _fail(key, f"{axis} is {v}, more than CUDA allows ({most})")
    return value[0], value[1], value[2]


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise _fail(key, f"must be a list, not {_show(value)}")
    if len(value) > MAX_ENTRIES:
        raise _fail(key, f"has {len(value)} entries, more than {MAX_ENTRIES}")
    return value


def _entry(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"must be an object, not {_show(value)}")
    return value


def _dtype(value: Any, where: str) -> np.dtype:
    """A buffer's dtype: a plain name of a numeric numpy type, parsed only when it is one."""
    np_dtype = None
    if isinstance(value, str) and _DTYPE_NAME.fullmatch(value):
        try:
            np_dtype = np.dtype(value)
        except (TypeError, ValueError, SyntaxError, OverflowError):
            np_dtype = None
    if (np_dtype is None or np_dtype.kind not in "biufc" or np_dtype.fields is not None
            or np_dtype.subdtype is not None or np_dtype.itemsize == 0):
        raise _fail(f"{where}.dtype", f"{_show(value)} is not a numpy dtype of plain data")
    return np_dtype


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
        if not isinstance(kind, str) or kind not in REGION_KINDS:
            raise _fail(f"{where}.kind", f"must be one of {', '.join(REGION_KINDS)}, "
                                         f"not {_show(kind)}")
        region = cls(size, kind, _int(obj, "pitch", where, default=0),
                     _int(obj, "width", where, default=0), _int(obj, "height", where, default=0),
                     _int(obj, "elem", where, maximum=1024, default=0))
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
        return cls(_int(obj, "arg", where, maximum=MAX_PARAM_BYTES),
                   _int(obj, "offset", where, maximum=MAX_PARAM_BYTES, default=0),
                   _int(obj, "region", where, maximum=MAX_ENTRIES),
                   _int(obj, "delta", where, default=0))

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
        np_dtype = _dtype(dtype, where)
        shape = _field(obj, "shape", where)
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_BYTES
                           for n in shape)):
            raise _fail(f"{where}.shape", f"must be a list of at most {MAX_DIMS} sizes (0 to "
                                          f"{MAX_BYTES}), not {_show(shape)}")
        buffer = cls(_int(obj, "arg", where, maximum=MAX_PARAM_BYTES),
                     _int(obj, "offset", where, maximum=MAX_PARAM_BYTES, default=0),
                     _int(obj, "region", where, maximum=MAX_ENTRIES),
                     _int(obj, "delta", where, default=0), width,
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
            raise _fail("format", f"is {_show(fmt)}, not {json.dumps(FORMAT)}: this "
                                  "replay.py reads only that format")
        image_format = _str(obj, "image_format")
        if image_format not in IMAGE_FORMATS:
            raise _fail("image_format", f"must be one of {', '.join(IMAGE_FORMATS)}, not "
                                        f"{_show(image_format)}")
        hex_params = _field(obj, "params", "")
        if not isinstance(hex_params, str):
            raise _fail("params", f"must be a hex string, not {_show(hex_params)}")
        if len(hex_params) > 2 * MAX_PARAM_BYTES:
            raise _fail("params", f"holds {len(hex_params) // 2} bytes, more than a launch "
                                  f"may have ({MAX_PARAM_BYTES})")
        if not _HEX.fullmatch(hex_params):
            raise _fail("params", "is not a hex string")
        params = bytes.fromhex(hex_params)
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
                   image=_str(obj, "image"), image_format=image_format,
                   grid=_dim3(obj, "grid", GRID_LIMITS), block=_dim3(obj, "block", BLOCK_LIMITS),
                   smem=_int(obj, "smem", "", maximum=MAX_SMEM, default=0),
                   params=params, layout=layout, regions=regions, pointers=pointers,
                   buffers=buffers, extra={k: v for k, v in obj.items() if k not in known})
        threads = math.prod(spec.block)
        if threads > MAX_THREADS:
            raise _fail("block", f"has {threads} threads, more than CUDA allows in a block "
                                 f"({MAX_THREADS})")
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
                                            f"{_show(entry)}")
            if entry[0] + entry[1] > MAX_PARAM_BYTES:
                raise _fail(f"layout[{i}]", f"ends at byte {entry[0] + entry[1]}, past the "
                                            f"{MAX_PARAM_BYTES} bytes a launch's parameters "
                                            "may take")
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
                if kind == "buffers" and e.offset >= self.layout[e.arg][1]:
                    raise _fail(f"{where}.offset", f"{e.offset} is past the end of parameter "
                                                   f"{e.arg} ({self.layout[e.arg][1]} bytes)")
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
        """The launch.json of an extract folder, read (a regular file of the folder, at most
        SPEC_LIMIT bytes) and checked (parse)."""
        try:
            data = read_file(Path(folder), SPEC_FILE, SPEC_FILE, SPEC_LIMIT)
        except FileNotFoundError:
            raise ReplayError(f"no {SPEC_FILE} in {folder}: give the folder of an "
                              "extracted launch") from None
        return cls.parse(data)

    @classmethod
    def parse(cls, data: bytes) -> LaunchSpec:
        """launch.json's bytes as a launch spec: UTF-8 JSON of bounded depth and numbers,
        every field checked (from_json), and every file it names one of the folder's
        (check_names). SpecError, naming the field, where it is not one."""
        spec = cls.from_json(parse_json(data, SPEC_FILE, SpecError))
        spec.check_names()
        return spec

    def check_names(self) -> None:
        """Every file the spec names is a relative name inside its folder (name_problem)."""
        names = [("image", self.image)]
        for i, b in enumerate(self.buffers):
            names += [(f"buffers[{i}].{phase}", name) for phase, name
                      in (("before", b.before), ("after", b.after)) if name is not None]
        for where, name in names:
            problem = name_problem(name)
            if problem is not None:
                raise _fail(where, f"{show_path(name)} {problem}")

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


def raw_bytes(buffer: Buffer, array: np.ndarray) -> bytes:
    """The array's bytes (rows packed), which must be as many as the buffer holds."""
    data = np.ascontiguousarray(array).tobytes()
    if len(data) != buffer.width * buffer.height:
        raise ReplayError(f"the before array of {buffer.label} has {len(data)} bytes, not "
                          f"{buffer.width * buffer.height} ({buffer.height} rows of "
                          f"{buffer.width})")
    return data
