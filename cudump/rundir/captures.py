"""captures.jsonl's records: one per launch captured for replay, written by the snapshot
planner (policy.snapshot.capture.CaptureWriter) and read back by `cudump replay` and
`cudump extract` (analysis.replay).

A record holds facts as the shim saw them: the kernel and its launch configuration, the
module image saved under modules/, the parameter bytes and their layout, every pointer
word and the allocation it points into, and the snapshot files of each buffer. Reading
checks each value's type first (`capture_problem`), so that a damaged line is named, not
an internal error; keys cudump does not read are left alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cudump.kernels.geometry import Allocation


class CaptureFormatError(ValueError):
    """A line of captures.jsonl is not a captured launch cudump can read."""


@dataclass(frozen=True)
class CapturedAllocation:
    """The allocation a captured pointer points into, as the shim tracked it."""

    base: int
    size: int
    kind: str
    pitch: int
    width: int          # bytes per row of a pitched allocation
    height: int
    elem: int

    @classmethod
    def of(cls, alloc: Allocation) -> CapturedAllocation:
        return cls(alloc.base, alloc.size, alloc.kind, alloc.pitch, alloc.width_bytes,
                   alloc.height, alloc.elem_size)

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "size": self.size, "kind": self.kind, "pitch": self.pitch,
                "width": self.width, "height": self.height, "elem": self.elem}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CapturedAllocation:
        return cls(data["base"], data["size"], data["kind"], data["pitch"], data["width"],
                   data["height"], data["elem"])


@dataclass(frozen=True)
class CapturedPointer:
    """A pointer word in the parameters: at byte `offset` of argument `arg`."""

    arg: int
    offset: int
    value: int
    alloc: CapturedAllocation

    def to_json(self) -> dict[str, Any]:
        return {"arg": self.arg, "offset": self.offset, "value": self.value,
                "alloc": self.alloc.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CapturedPointer:
        return cls(data["arg"], data["offset"], data["value"],
                   CapturedAllocation.from_json(data["alloc"]))


@dataclass
class CapturedBuffer:
    """One snapshot pair of a captured launch: the buffer at byte `offset` of argument `arg`."""

    arg: int
    offset: int
    address: int
    width: int          # bytes per row
    height: int
    pitch: int
    dtype: str
    shape: list[int]
    before: str | None = None
    after: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"arg": self.arg, "offset": self.offset, "address": self.address,
                "width": self.width, "height": self.height, "pitch": self.pitch,
                "dtype": self.dtype, "shape": self.shape, "before": self.before,
                "after": self.after}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CapturedBuffer:
        return cls(data["arg"], data["offset"], data["address"], data["width"],
                   data["height"], data["pitch"], data["dtype"], list(data["shape"]),
                   data.get("before"), data.get("after"))


@dataclass
class CaptureRecord:
    """One line of captures.jsonl. Optional values read as their defaults where a line
    leaves them out (or null)."""

    pid: int
    launch: int
    kernel: str
    mangled: str
    grid: list[int]
    block: list[int]
    occurrence: int = 0
    smem: int = 0
    api: str | None = None
    device: int | None = None
    stream: str | None = None          # hexadecimal, as the trace writes it
    image: str | None = None           # the module image, relative to the run directory
    image_format: str | None = None
    params: str = ""                   # the parameter bytes, hexadecimal
    layout: list[Any] | None = None    # [offset, size] per parameter, from the driver
    pointers: list[CapturedPointer] = field(default_factory=list)
    buffers: list[CapturedBuffer] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The line's object, keys in the order cudump writes them."""
        return {"pid": self.pid, "launch": self.launch, "occurrence": self.occurrence,
                "kernel": self.kernel, "mangled": self.mangled, "grid": self.grid,
                "block": self.block, "smem": self.smem, "api": self.api,
                "device": self.device, "stream": self.stream, "image": self.image,
                "image_format": self.image_format, "params": self.params,
                "layout": self.layout, "pointers": [p.to_json() for p in self.pointers],
                "buffers": [b.to_json() for b in self.buffers], "problems": self.problems}

    @classmethod
    def from_json(cls, data: Any) -> CaptureRecord:
        """A parsed line as a record; CaptureFormatError where a value cudump reads has the
        wrong type or is missing."""
        problem = capture_problem(data)
        if problem is not None:
            raise CaptureFormatError(problem)

        def get(key: str, default: Any) -> Any:
            value = data.get(key)
            return default if value is None else value

        return cls(
            pid=data["pid"], launch=data["launch"], kernel=data["kernel"],
            mangled=data["mangled"], grid=list(data["grid"]), block=list(data["block"]),
            occurrence=get("occurrence", 0), smem=get("smem", 0), api=get("api", None),
            device=get("device", None), stream=get("stream", None),
            image=get("image", None), image_format=get("image_format", None),
            params=get("params", ""), layout=get("layout", None),
            pointers=[CapturedPointer.from_json(p) for p in get("pointers", [])],
            buffers=[CapturedBuffer.from_json(b) for b in get("buffers", [])],
            problems=list(get("problems", [])))


# What cudump reads of a captured launch, key by key: the type of each value ("int", "str",
# "int3" a list of 3 whole numbers, "ints" a list of them, "strs" a list of strings, or a
# nested shape), and whether it may be missing or null. Everything else is left alone.
_Shape = dict[str, tuple[Any, bool]]
_ALLOC: _Shape = {"base": ("int", False), "size": ("int", False), "kind": ("str", False),
                  "pitch": ("int", False), "width": ("int", False), "height": ("int", False),
                  "elem": ("int", False)}
_POINTER: _Shape = {"arg": ("int", False), "offset": ("int", False), "value": ("int", False),
                    "alloc": (_ALLOC, False)}
_BUFFER: _Shape = {"arg": ("int", False), "offset": ("int", False), "address": ("int", False),
                   "width": ("int", False), "height": ("int", False), "pitch": ("int", False),
                   "dtype": ("str", False), "shape": ("ints", False), "before": ("str", True),
                   "after": ("str", True)}
_CAPTURE: _Shape = {"pid": ("int", False), "launch": ("int", False), "kernel": ("str", False),
                    "mangled": ("str", False), "occurrence": ("int", True),
                    "grid": ("int3", False), "block": ("int3", False), "smem": ("int", True),
                    "api": ("str", True), "stream": ("str", True), "image": ("str", True),
                    "image_format": ("str", True), "params": ("str", True),
                    "layout": ("list", True), "problems": ("strs", True),
                    "pointers": ([_POINTER], True), "buffers": ([_BUFFER], True)}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _expected(kind: Any) -> str:
    if isinstance(kind, dict):
        return "an object"
    if isinstance(kind, list):
        return "a list"
    return {"int": "a whole number", "str": "a string", "int3": "a list of 3 whole numbers",
            "ints": "a list of whole numbers", "strs": "a list of strings",
            "list": "a list"}[kind]


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _check(data: Any, shape: _Shape, prefix: str) -> str | None:
    """The first field of `data` that does not fit `shape`: "field 'x': expected ..."."""
    for key, (kind, optional) in shape.items():
        name = f"{prefix}{key}"
        if key not in data or data[key] is None:
            if optional:
                continue
            return f"field '{name}' is missing"
        value = data[key]
        if isinstance(kind, dict):
            ok = isinstance(value, dict)
        elif isinstance(kind, list):
            ok = isinstance(value, list)
            if ok:
                bad = next((i for i, v in enumerate(value) if not isinstance(v, dict)), None)
                if bad is not None:
                    return f"field '{name}[{bad}]': expected an object, got {_shown(value[bad])}"
        else:
            ok = {"int": _is_int(value), "str": isinstance(value, str),
                  "int3": isinstance(value, list) and len(value) == 3
                  and all(_is_int(v) for v in value),
                  "ints": isinstance(value, list) and all(_is_int(v) for v in value),
                  "strs": isinstance(value, list) and all(isinstance(v, str) for v in value),
                  "list": isinstance(value, list)}[kind]
        if not ok:
            return f"field '{name}': expected {_expected(kind)}, got {_shown(value)}"
        if isinstance(kind, dict):
            problem = _check(value, kind, f"{name}.")
        elif isinstance(kind, list):
            problem = next((found for i, item in enumerate(value)
                            if (found := _check(item, kind[0], f"{name}[{i}]."))), None)
        else:
            problem = None
        if problem:
            return problem
    return None


def capture_problem(data: Any) -> str | None:
    """Why a line of captures.jsonl is not a captured launch cudump can read, or None."""
    if not isinstance(data, dict):
        return f"not a captured launch (a JSON {type(data).__name__}, not an object)"
    problem = _check(data, _CAPTURE, "")
    return f"not a captured launch: {problem}" if problem else None
