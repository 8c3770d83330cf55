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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudump.kernels.geometry import Allocation
from cudump.rundir import reading
from cudump.rundir.layout import CAPTURES_FILE
from cudump.rundir.shapes import Shape, shape_problem


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


# What cudump reads of a captured launch, key by key (shapes.Shape); everything else is
# left alone.
_ALLOC: Shape = {"base": ("u64", False), "size": ("count", False), "kind": ("str", False),
                 "pitch": ("count", False), "width": ("count", False),
                 "height": ("count", False), "elem": ("count", False)}
_POINTER: Shape = {"arg": ("count", False), "offset": ("count", False),
                   "value": ("u64", False), "alloc": (_ALLOC, False)}
_BUFFER: Shape = {"arg": ("count", False), "offset": ("count", False),
                  "address": ("u64", False), "width": ("count", False),
                  "height": ("count", False), "pitch": ("count", False),
                  "dtype": ("str", False), "shape": ("ints", False), "before": ("str", True),
                  "after": ("str", True)}
_CAPTURE: Shape = {"pid": ("count", False), "launch": ("count", False),
                   "kernel": ("str", False), "mangled": ("str", False),
                   "occurrence": ("count", True), "grid": ("int3", False),
                   "block": ("int3", False), "smem": ("count", True), "api": ("str", True),
                   "device": ("int", True), "stream": ("str", True), "image": ("str", True),
                   "image_format": ("str", True), "params": ("str", True),
                   "layout": ("list", True), "problems": ("strs", True),
                   "pointers": ([_POINTER], True), "buffers": ([_BUFFER], True)}


def capture_problem(data: Any) -> str | None:
    """Why a line of captures.jsonl is not a captured launch cudump can read, or None."""
    if not isinstance(data, dict):
        return f"not a captured launch (a JSON {type(data).__name__}, not an object)"
    problem = shape_problem(data, _CAPTURE)
    return f"not a captured launch: {problem}" if problem else None


@dataclass(frozen=True)
class CaptureLine:
    """A record of captures.jsonl and the line it is on (from 1)."""

    number: int
    record: CaptureRecord


def read_capture_lines(run_dir: Path) -> list[CaptureLine]:
    """The records of a run's captures.jsonl, read as every run file is (rundir.reading):
    reading.NotThere where the run has none, RunFileError `path:N: why` for a line that is
    not a captured launch. A last line cut short (the run was killed writing it) is
    skipped: the file is written as the run goes."""
    path = Path(run_dir) / CAPTURES_FILE
    found = []
    for line in reading.json_lines(path, torn_last=True):
        try:
            found.append(CaptureLine(line.number, CaptureRecord.from_json(line.data)))
        except CaptureFormatError as err:
            raise reading.line_error(path, line.number, err) from None
    return found
