"""flight.jsonl's records (--flight): each process's last launches as the flight recorder
kept them, written at the end of the run (controller.flight) and read back by `cudump show
--flight` (analysis.flight).

One line per process (`"record": "process"`: how many launches it recorded, how many the
file keeps, the first CUDA error its calls returned, how the program ended), then one line
per launch it kept, oldest first (`"record": "launch"`: the launch, its kernel and shape,
whether it completed, and its arguments as the report shows them). Reading checks each
value's type, so that a damaged line is named, not an internal error.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cudump.launches.scopes import NOWHERE, Where
from cudump.rundir import files as runfiles
from cudump.rundir import reading
from cudump.rundir.layout import FLIGHT_FILE
from cudump.rundir.shapes import Shape, shape_problem
from cudump.rundir.wheres import WHERE_FIELDS

# What became of a recorded launch: its completion marker was written (or a later launch on
# its stream completed), it was still in flight, its launch call failed, it was recorded
# into a graph by a stream capture, it completed or not without a marker to say which (the
# driver wrote none), or its launch call never returned.
STATUSES = ("completed", "in flight", "failed", "captured", "unknown", "launching")


class FlightFormatError(ValueError):
    """A line of flight.jsonl is not a record cudump can read."""


@dataclass(frozen=True)
class FlightArg:
    """One argument of a recorded launch, as the report prints it."""

    index: int
    type: str | None        # as the kernel's signature writes it; None: no signature
    value: str              # the value as printed: 0x7f00..., 16, 0.5, <8 bytes: ...>
    address: int | None = None      # a pointer's value
    allocation: str | None = None   # where a pointer points: `linear 0x... size N, offset O`,
    #                                 `outside every allocation`, `null`

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FlightLaunch:
    """One launch (or graph launch) the flight recorder kept."""

    pid: int
    launch: int             # the per-process launch number
    kernel: str             # demangled; `graph launch` for a graph launch
    status: str             # one of STATUSES
    stream: str             # hexadecimal
    thread: int
    api: str
    grid: list[int]
    block: list[int]
    smem: int = 0
    mangled: str = ""
    graph: int | None = None        # a graph launch: the process's graph number
    rc: int | None = None           # what the launch call returned, once it returned
    error: str | None = None        # its name, where it is an error
    params: str = ""                # the parameter bytes kept, hexadecimal
    params_size: int = 0            # bytes of the launch's parameters (may be more than kept)
    args: list[FlightArg] = field(default_factory=list)
    culprit: bool = False           # the launch the report names
    where: Where = NOWHERE          # the launch in the program's terms (its record fields)

    @property
    def name(self) -> str:
        """`launch 812 of scale(float*, int)`, `graph launch 9 (graph 2)`, and where the
        launch came from when that is known: `... in layer3.0.conv1 (forward, step 2) at
        train.py:57`."""
        scoped = f" {self.where.text()}" if self.where else ""
        if self.graph is not None:
            return f"graph launch {self.launch} (graph {self.graph}){scoped}"
        return f"launch {self.launch} of {self.kernel}{scoped}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["where"]
        data["args"] = [a.to_json() for a in self.args]
        return {"record": "launch", **data, **self.where.fields()}


@dataclass
class FlightProcess:
    """One process's flight recorder: what it recorded and how the program ended."""

    pid: int
    slots: int              # launches the ring held (--flight N)
    recorded: int           # launches it recorded in all
    kept: int               # of them in the file: its last ones
    first_error: int | None = None  # the first CUDA error a call of the program's returned
    error: str | None = None        # its name
    ended: str = "exited normally"  # `failed with CUDA_ERROR_...`, `was killed by SIGABRT`

    def to_json(self) -> dict[str, Any]:
        return {"record": "process", **asdict(self)}


@dataclass
class FlightLog:
    processes: list[FlightProcess] = field(default_factory=list)
    launches: list[FlightLaunch] = field(default_factory=list)

    def of(self, pid: int) -> list[FlightLaunch]:
        return [launch for launch in self.launches if launch.pid == pid]


def write_flight(run_dir: Path, log: FlightLog) -> Path:
    """Writes flight.jsonl whole (never through a symlink planted under its name)."""
    lines = []
    for proc in log.processes:
        lines.append(json.dumps(proc.to_json()))
        lines.extend(json.dumps(launch.to_json()) for launch in log.of(proc.pid))
    text = ("\n".join(lines) + "\n" if lines else "").encode("utf-8")
    path = run_dir / FLIGHT_FILE
    runfiles.write_whole(path, lambda f: f.write(text))
    return path


# -- reading ----------------------------------------------------------------------------

# Each key cudump reads: its kind and whether it may be missing or null.
_PROCESS: Shape = {"pid": ("count", False), "slots": ("count", False),
                   "recorded": ("count", False), "kept": ("count", False),
                   "first_error": ("int", True), "error": ("str", True), "ended": ("str", True)}
_LAUNCH: Shape = {"pid": ("count", False), "launch": ("count", False),
                  "kernel": ("str", False), "status": ("str", False), "stream": ("str", False),
                  "thread": ("int", False), "api": ("str", False), "grid": ("int3", False),
                  "block": ("int3", False), "smem": ("count", True), "mangled": ("str", True),
                  "graph": ("count", True), "rc": ("int", True), "error": ("str", True),
                  "params": ("str", True), "params_size": ("count", True),
                  "args": ("list", True), "culprit": ("bool", True),
                  # Where.fields(), where the launch's scopes, step or source were known
                  "scope": ("strs", True), "layer": ("str", True), "pass": ("str", True),
                  "step": ("count", True), "source": ("str", True)}
_ARG: Shape = {"index": ("count", False), "type": ("str", True), "value": ("str", False),
               "address": ("u64", True), "allocation": ("str", True)}


def _checked(data: Any, shape: Shape, what: str) -> dict[str, Any]:
    """The record's values of the keys `shape` names, checked; a key left out or null is
    left out (its dataclass field's default stands)."""
    if not isinstance(data, dict):
        raise FlightFormatError(f"not {what} (a JSON {type(data).__name__}, not an object)")
    problem = shape_problem(data, shape)
    if problem:
        raise FlightFormatError(f"not {what}: {problem}")
    return {key: data.get(key) for key in shape if data.get(key) is not None}


def _arg(data: Any, number: int) -> FlightArg:
    fields = _checked(data, _ARG, f"argument {number}")
    return FlightArg(index=fields["index"], type=fields.get("type"), value=fields["value"],
                     address=fields.get("address"), allocation=fields.get("allocation"))


def _launch(data: dict[str, Any]) -> FlightLaunch:
    fields = _checked(data, _LAUNCH, "a recorded launch")
    if fields["status"] not in STATUSES:
        raise FlightFormatError(f"not a recorded launch: status {fields['status']!r:.40}")
    args = [_arg(a, i) for i, a in enumerate(fields.pop("args", []))]
    where = Where.from_fields({k: fields.pop(k) for k in WHERE_FIELDS if k in fields})
    return FlightLaunch(**fields, args=args, where=where)


def read_flight(run_dir: Path) -> FlightLog:
    """flight.jsonl of a run, read as every run file is (rundir.reading): reading.NotThere
    if there is none, RunFileError if it cannot be read or a line is not JSON, and
    FlightFormatError (naming the file, the line and the field) for a line that is not a
    record. The file is written whole at the end of a run: no line of it is cut short."""
    log = FlightLog()
    path = Path(run_dir) / FLIGHT_FILE
    for line in reading.json_lines(path, torn_last=False):
        data = line.data
        try:
            kind = data.get("record") if isinstance(data, dict) else None
            if kind == "process":
                log.processes.append(FlightProcess(**_checked(data, _PROCESS,
                                                              "a process record")))
            elif kind == "launch":
                log.launches.append(_launch(data))
            else:
                raise FlightFormatError("neither a process nor a launch record")
        except FlightFormatError as err:
            raise FlightFormatError(f"{reading.shown(path)}:{line.number}: {err}") from None
    return log
