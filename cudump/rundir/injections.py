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
        return cls(**_fields(data, _OUTPUT_TYPES, "output"))


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
        values = _fields(data, _INJECTION_TYPES, "injection")
        outputs = values.pop("outputs", [])
        if not isinstance(outputs, list):
            raise InjectionFormatError("injection: 'outputs' should be a list")
        return cls(**values, outputs=[OutputCheck.from_json(o) for o in outputs])


_INT, _STR, _NUM = (int,), (str,), (int, float)
# name -> (accepted types, may be null, required)
_OUTPUT_TYPES: dict[str, tuple[tuple[type, ...], bool, bool]] = {
    "arg": (_INT, False, True), "offset": (_INT, False, True), "status": (_STR, False, True),
    "elements": (_INT, True, False), "differing": (_INT, True, False),
    "max_abs": (_NUM, True, False), "file": (_STR, True, False),
    "reason": (_STR, True, False),
}
_INJECTION_TYPES: dict[str, tuple[tuple[type, ...], bool, bool]] = {
    "source": (_STR, False, True), "launch": (_INT, False, True),
    "kernel": (_STR, False, True), "occurrence": (_INT, False, True),
    "source_pid": (_INT, False, True), "status": (_STR, False, True),
    "source_rank": (_INT, True, False), "pid": (_INT, True, False),
    "live_kernel": (_STR, True, False), "live_occurrence": (_INT, True, False),
    "buffers": (_INT, False, False), "bytes": (_INT, False, False),
    "reason": (_STR, True, False), "outputs": ((list,), False, False),
}
_STATUSES = {"output": OUTPUT_STATUSES, "injection": INJECTION_STATUSES}


def _fields(data: Any, types: dict[str, tuple[tuple[type, ...], bool, bool]],
            what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InjectionFormatError(f"{what}: expected an object")
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise InjectionFormatError(f"{what}: unknown field '{unknown[0]}'")
    for name, (kinds, nullable, required) in types.items():
        if name not in data:
            if required:
                raise InjectionFormatError(f"{what}: lacks the field '{name}'")
            continue
        value = data[name]
        if value is None and nullable:
            continue
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise InjectionFormatError(f"{what}: field '{name}' has the wrong type")
    if data["status"] not in _STATUSES[what]:
        raise InjectionFormatError(f"{what}: unknown status {data['status']!r:.40}")
    return dict(data)
