"""What `cudump --inject` did, as summary.json's `injections`: one record per --inject, with
one record per output compared. Written and read by the same classes.

An injection's `status`:
- "written": RUN's "before" snapshots of the launch were written into its buffers while it
  was held, and it ran on them; `outputs` says how its buffers after it compare with RUN's;
- "refused": nothing was written (another kernel at that launch, sizes that differ ...),
  `reason` says why; the program ran untouched;
- "failed": writing stopped part way (`reason`); the launch ran on what had been written;
- "not-reached": no process of the run made that launch.

An output's `status`: "equal", "differs" (in `differing` of `elements` elements, the
largest difference `max_abs`), or "missing" (not snapshotted here: `reason`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from cudump.rundir.shapes import Shape, shape_problem, unknown_field

INJECTION_STATUSES = ("written", "refused", "failed", "not-reached")
OUTPUT_STATUSES = ("equal", "differs", "missing")


class InjectionFormatError(ValueError):
    """A summary's injection record is not one cudump wrote."""


@dataclass
class OutputCheck:
    """One buffer the launch left, against RUN's `after` snapshot of it."""

    arg: int
    offset: int                      # byte offset of the pointer inside the argument
    status: str                      # OUTPUT_STATUSES
    elements: int | None = None
    differing: int | None = None
    max_abs: float | None = None     # largest finite |this run - RUN| (None: equal)
    file: str | None = None          # this run's snapshot, relative to its directory
    reason: str | None = None        # "missing": why

    @property
    def label(self) -> str:
        return f"arg {self.arg}" if not self.offset else f"arg {self.arg} (+{self.offset})"

    @classmethod
    def from_json(cls, data: Any) -> OutputCheck:
        return cls(**_fields(data, _OUTPUT_SHAPE, "output"))


@dataclass
class InjectionRecord:
    """One --inject RUN:LAUNCH and what became of it."""

    source: str                      # RUN as given on the command line
    launch: int                      # the per-process launch number
    kernel: str                      # RUN's kernel at that launch (demangled)
    occurrence: int                  # its occurrence in RUN
    source_pid: int                  # RUN's process the snapshots are from
    status: str                      # INJECTION_STATUSES
    source_rank: int | None = None
    pid: int | None = None           # this run's process it was made in
    live_kernel: str | None = None   # this run's kernel at that launch
    live_occurrence: int | None = None
    buffers: int = 0                 # buffers written
    bytes: int = 0                   # bytes written
    reason: str | None = None
    outputs: list[OutputCheck] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> InjectionRecord:
        """A record as to_json wrote it; InjectionFormatError says what is wrong."""
        values = _fields(data, _INJECTION_SHAPE, "injection")
        outputs = values.pop("outputs", [])
        return cls(**values, outputs=[OutputCheck.from_json(o) for o in outputs])


# name -> (type, may be missing or null): rundir/shapes.py
_OUTPUT_SHAPE: Shape = {
    "arg": ("count", False), "offset": ("count", False), "status": ("str", False),
    "elements": ("count", True), "differing": ("count", True), "max_abs": ("num", True),
    "file": ("str", True), "reason": ("str", True),
}
_INJECTION_SHAPE: Shape = {
    "source": ("str", False), "launch": ("count", False), "kernel": ("str", False),
    "occurrence": ("count", False), "source_pid": ("count", False), "status": ("str", False),
    "source_rank": ("int", True), "pid": ("count", True), "live_kernel": ("str", True),
    "live_occurrence": ("count", True), "buffers": ("count", True), "bytes": ("count", True),
    "reason": ("str", True), "outputs": ("list", True),
}
_STATUSES = {"output": OUTPUT_STATUSES, "injection": INJECTION_STATUSES}


def _fields(data: Any, shape: Shape, what: str) -> dict[str, Any]:
    """The record's fields, checked against `shape` (no field it does not name); a null
    stands for a field left out."""
    if not isinstance(data, dict):
        raise InjectionFormatError(f"{what}: expected an object")
    unknown = unknown_field(data, shape)
    if unknown is not None:
        raise InjectionFormatError(f"{what}: unknown field '{unknown}'")
    problem = shape_problem(data, shape)
    if problem is not None:
        raise InjectionFormatError(f"{what}: {problem}")
    if data["status"] not in _STATUSES[what]:
        raise InjectionFormatError(f"{what}: unknown status {data['status']!r:.40}")
    return {name: value for name, value in data.items() if value is not None}
