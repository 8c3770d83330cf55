"""outputs.jsonl's records (--module-outputs): the tensors each PyTorch module's forward
returned, as the program's own hooks told the shim (MSG_OUTPUT, cudump/target). The
controller writes one line per tensor as they come (OutputWriter); `cudump diff` and
`bisect` read them back (read_outputs) to compare two implementations of a module by
exactly what it handed on, not by every buffer its launches wrote.

A record places its tensor among the process's launches: `launches` is how many the process
had made when the module returned, so the launch that wrote the tensor is numbered at most
that. Its scope is the module's (its chain, outermost first, with its pass and step, as a
launch record names them); `index` is its place among the module's outputs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudump.launches.scopes import Where
from cudump.rundir import reading
from cudump.rundir.files import LineAppender
from cudump.rundir.layout import OUTPUTS_FILE
from cudump.rundir.shapes import Shape, shape_problem

# "float32[8,64,56,56]": a numpy dtype's name and the shape ("float32[]" for a scalar).
_TYPE = re.compile(r"^([a-z][a-z0-9_]*)\[((?:\d+(?:,\d+)*)?)\]$")


class OutputFormatError(ValueError):
    """A line of outputs.jsonl (or a type the shim sent) is not a module output cudump can
    read."""


def parse_type(text: str) -> tuple[str, tuple[int, ...]]:
    """("float32", (8, 64, 56, 56)) of "float32[8,64,56,56]"."""
    m = _TYPE.match(text)
    if m is None:
        raise OutputFormatError(f"a tensor type {text!r}, not dtype[d0,d1,...]")
    dims = m.group(2)
    return m.group(1), tuple(int(d) for d in dims.split(",")) if dims else ()


@dataclass(frozen=True)
class OutputRecord:
    """One tensor a module's forward returned."""

    pid: int
    launches: int              # the process's launches made by then
    index: int                 # its place among the module's outputs, from 0
    address: int
    bytes: int
    dtype: str
    shape: tuple[int, ...]
    where: Where               # the module's scope, pass and step
    rank: int | None = None

    @property
    def chain(self) -> tuple[str, ...]:
        return self.where.scopes

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": self.pid, "launches": self.launches,
                               "index": self.index, "address": hex(self.address),
                               "bytes": self.bytes, "dtype": self.dtype,
                               "shape": list(self.shape)}
        if self.rank is not None:
            out["rank"] = self.rank
        out.update(self.where.fields())
        return out

    @classmethod
    def from_json(cls, data: Any) -> OutputRecord:
        if not isinstance(data, dict):
            raise OutputFormatError(f"not a module output (a JSON {type(data).__name__}, "
                                    "not an object)")
        problem = shape_problem(data, _OUTPUT)
        if problem:
            raise OutputFormatError(f"not a module output: {problem}")
        try:
            address = int(data["address"], 16)
        except ValueError:
            raise OutputFormatError(f"address {data['address']!r} is not hexadecimal") from None
        return cls(pid=data["pid"], launches=data["launches"], index=data["index"],
                   address=address, bytes=data["bytes"], dtype=data["dtype"],
                   shape=tuple(data["shape"]), where=Where.from_fields(data),
                   rank=data.get("rank"))


_OUTPUT: Shape = {"pid": ("count", False), "launches": ("count", False),
                  "index": ("count", False), "address": ("str", False),
                  "bytes": ("count", False), "dtype": ("str", False), "shape": ("ints", False),
                  "rank": ("count", True), "scope": ("strs", True), "pass": ("str", True),
                  "step": ("count", True)}


class OutputWriter:
    """outputs.jsonl, one line per tensor (any connection's thread), created at the first;
    `on_stop` is told once why it stopped, where a write fails."""

    def __init__(self, run_dir: Path, on_stop: Callable[[str], None]) -> None:
        self.lines = LineAppender(run_dir / OUTPUTS_FILE, on_stop)

    def append(self, record: OutputRecord) -> bool:
        return self.lines.append(
            (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode("utf-8"))


def read_outputs(run_dir: Path) -> list[OutputRecord]:
    """A run's module outputs, in the order they were written; none where the run has no
    outputs.jsonl. RunFileError `path:N: why` for a line that is not one (a last line cut
    short, the run killed while writing it, is skipped)."""
    path = Path(run_dir) / OUTPUTS_FILE
    if not reading.present(path):
        return []
    found = []
    for line in reading.json_lines(path, torn_last=True):
        try:
            found.append(OutputRecord.from_json(line.data))
        except OutputFormatError as err:
            raise reading.line_error(path, line.number, err) from None
    return found
