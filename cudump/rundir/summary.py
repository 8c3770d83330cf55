"""The end-of-run summary: printed as one line and written to summary.json."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cudump.launches.scopes import NOWHERE, Where
from cudump.rundir import files as runfiles
from cudump.rundir import reading
from cudump.rundir.injections import InjectionFormatError, InjectionRecord
from cudump.rundir.layout import SUMMARY_FILE
from cudump.sizes import human_bytes


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


@dataclass(frozen=True)
class NanLaunch:
    """A launch that left NaN/Inf in a buffer, as the summary names it."""

    pid: int
    launch: int
    kernel: str
    rank: int | None = None        # its process's rank, where it has one
    kind: str = field(default="launch", init=False)   # beside NanHostWrite's kinds
    where: Where = NOWHERE         # the launch in the program's terms (written as its fields)

    def name(self, with_process: bool = False) -> str:
        """`launch L of K`, its where (`in layer3.0.conv1 (forward, step 2) at
        train.py:57`) where known, and `(process P, rank R)`: the process where the run has
        several (`with_process`), the rank where the process has one."""
        where = [f"process {self.pid}"] if with_process else []
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        scoped = f" {self.where.text()}" if self.where else ""
        return f"launch {self.launch} of {self.kernel}{scoped}" + (
            f" ({', '.join(where)})" if where else "")

    @property
    def order(self) -> tuple[int, int]:
        """Where it lies among its process's launches and host writes."""
        return 2 * self.launch, 0


@dataclass(frozen=True)
class NanHostWrite:
    """A write of the program's from the host that left NaN/Inf in device memory: a
    host-to-device copy (kind "copy") or a memset ("memset"), made before launch
    `before_launch` of its process, with the driver call `api`."""

    kind: str
    pid: int
    before_launch: int
    api: str
    address: int
    bytes: int
    rank: int | None = None
    position: int = field(default=0, repr=False, compare=False)   # in its ring: not written

    def name(self, with_process: bool = False) -> str:
        """`a host-to-device copy of 4 bytes at 0x7f00 before launch 59 of process P (rank
        R)`: the process always, since no kernel names it."""
        what = "a memset" if self.kind == "memset" else "a host-to-device copy"
        many = "" if self.bytes == 1 else "s"
        rank = f" (rank {self.rank})" if self.rank is not None else ""
        return (f"{what} of {self.bytes} byte{many} at 0x{self.address:x} before launch "
                f"{self.before_launch} of process {self.pid}{rank}")

    @property
    def order(self) -> tuple[int, int]:
        return 2 * self.before_launch - 1, self.position + 1


NanProducer = NanLaunch | NanHostWrite


@dataclass
class RunSummary:
    processes: int = 0
    pids: list[int] = field(default_factory=list)
    launches: int = 0              # kernel launches that ran (not recorded into a graph)
    captured_launches: int = 0     # launches recorded during stream capture
    graph_launches: int = 0
    kernels: Counter[str] = field(default_factory=Counter)  # demangled name -> launches
    graph_kernel_launches: int = 0  # kernel-node runs of graph launches (in `kernels` too)
    graph_kernels: Counter[str] = field(default_factory=Counter)  # of which from graphs
    allocations: int = 0           # device allocations made
    peak_bytes: int = 0            # most device memory live at once (all processes)
    snapshots: int = 0
    snapshot_errors: int = 0
    snapshot_bytes: int = 0
    digests: int = 0               # buffers digested on the GPU (format: digest)
    nan_reports: int = 0           # NaN/Inf reports (--check-nan): records of manifest.jsonl
    nan_producers: int = 0         # buffers turned NaN/Inf (--check-nan), by launches or the host
    nan_produced: int = 0          # of which from finite inputs, or by the host's writes
    first_nan_producer: NanProducer | None = None   # the first launch or host write that did
    first_nan_report: NanLaunch | None = None     # the run's first report, of either kind
    watch_fallbacks: int = 0       # --watch-nan: processes whose batched scan could not run,
                                   # which scanned every launch exactly from then on
    graph_nodes_left_out: int = 0  # graphs' last kernel nodes a replay's plan had no room
                                   # for (PROTO_MAX_COPIES): neither scanned nor snapshotted
    ranks: dict[int, int] = field(default_factory=dict)   # pid -> rank, where known
    repeated_launches: int = 0     # launches the shim planned itself (a repeated plan)
    planned_launches: int = 0      # launches the controller was asked about (a round trip)
    # of which, by kernel: where a run under --digest or --check-nan spends its round trips
    planned_kernels: Counter[str] = field(default_factory=Counter)
    scans_ahead: int = 0           # of the repeated, those whose scans before them were made
    scans_ahead_void: int = 0      # with the launch before; made so and not used (shim/ahead.h)
    handed_off: int = 0            # launches of cudump's kernel made by the shim's launcher
                                   # thread while the program went on (shim/handoff.h)
    handed_back: int = 0           # those the program's thread made, the launcher being off
    launcher_trials: int = 0       # trials of the launcher on against off (shim/handtune.h)
    launcher_won: int = 0          # of them, those it won
    tools_waiting: int = 0         # launches of cudump's kernel made with programmatic stream
                                   # serialization, right after a launch (shim/toollaunch.h)
    tool_launches: int = 0         # launches of cudump's kernel from the host, however made
                                   # (shim/toollaunch.c; not its kernel nodes inside graphs)
    graph_replays_watched: int = 0       # graph replays run as --watch-nan's copy with a scan
                                         # node after everything, not waited for
    graph_replays_instrumented: int = 0  # graph replays run with cudump's nodes around the
                                         # wanted ones, waited for (shim/graph.c)
    replay_captures: int = 0       # launches captured for replay (captures.jsonl)
    host_writes: int | None = None  # host-to-device copies and memsets recorded (--check-nan)
    trace_dropped: int = 0         # trace events the ring had no room for
    written_behind: int = 0        # deferred launches whose files were written behind the program
    injections: list[InjectionRecord] = field(default_factory=list)   # --inject
    exit_status: int = 0
    flight: str | None = None      # --flight: the flight recorder's file (flight.jsonl)
    ended_at_prompt: str | None = None   # "quit": the prompt's quit ended the program

    def findings(self, flight_named: int = 0) -> list[str]:
        """What this run found, for --error-exitcode: NaN/Inf reported (--check-nan and
        scan rules), launches the flight recorder named, and --inject outputs that still
        differ from the run they were taken from. Empty: nothing found."""
        found: list[str] = self._nan_counts()
        if flight_named:
            found.append(f"the flight recorder named {plural(flight_named, 'launch', 'launches')}")
        differ = sum(1 for r in self.injections for o in r.outputs if o.status == "differs")
        if differ:
            found.append(f"{plural(differ, 'injected output')} differing from the source run")
        return found

    def _nan_counts(self) -> list[str]:
        """NaN/Inf found: reports as ls and stats count them (records of the manifest), and
        the host's writes that left NaN/Inf, which have no record of their own."""
        host = self.nan_producers - self.nan_reports
        return ([plural(self.nan_reports, "NaN/Inf report")] if self.nan_reports else []) + \
            ([f"{plural(host, 'host write')} that left NaN/Inf"] if host > 0 else [])

    def line(self, run_dir: Path | None = None) -> str:
        """The summary line; with `run_dir`, it ends naming the run directory."""
        procs = f"{self.processes} process" + ("" if self.processes == 1 else "es")
        graphs = plural(self.graph_launches, "graph launch", "graph launches")
        if self.graph_kernel_launches:
            graphs += f" running {plural(self.graph_kernel_launches, 'kernel')}"
        text = (
            f"cudump: {procs}, {plural(self.launches, 'launch', 'launches')} "
            f"({graphs}, {self.captured_launches} captured), "
            f"{plural(len(self.kernels), 'kernel')}, "
            f"{plural(self.allocations, 'allocation')} (peak {human_bytes(self.peak_bytes)})"
        )
        if self.snapshots or self.snapshot_errors:
            text += (
                f", {plural(self.snapshots, 'snapshot')} ({human_bytes(self.snapshot_bytes)}"
                + (f", {self.snapshot_errors} failed" if self.snapshot_errors else "")
                + ")"
            )
        if self.digests:
            text += f", {plural(self.digests, 'digest')}"
        if self.replay_captures:
            text += (f", {plural(self.replay_captures, 'launch', 'launches')} captured for "
                     "replay")
        if self.nan_producers:
            text += "".join(f", {part}" for part in self._nan_counts()) + self._nan_first()
        if self.injections:
            made = sum(1 for r in self.injections if r.status in ("written", "failed"))
            asked = plural(len(self.injections), "launch", "launches")
            text += f", inputs injected at {made} of {asked}"
        if self.trace_dropped:
            text += (f", {plural(self.trace_dropped, 'trace event')} dropped (the controller "
                     "fell behind)")
        if run_dir is not None:
            text += f"; run: {run_dir}"
        return text

    @property
    def first_nan_rank(self) -> int | None:
        """The rank of the first launch that produced NaN/Inf (None: no launch produced any,
        or its process has no rank)."""
        return self.first_nan_producer.rank if self.first_nan_producer is not None else None

    def _nan_first(self) -> str:
        """` (first produced by launch L of K (process P, rank R))`: the rank named is the
        producer's. Where no launch produced any, the first launch to leave some, from inputs
        already non-finite, with its own."""
        several = len(self.pids) > 1
        if self.first_nan_producer is not None:
            return f" (first produced by {self.first_nan_producer.name(several)})"
        if self.first_nan_report is not None:
            return (f" (none produced from finite inputs; the first left by "
                    f"{self.first_nan_report.name(several)})")
        return ""

    def write(self, run_dir: Path) -> None:
        data = asdict(self)
        # Written only where processes have ranks (the file stays as it was without).
        for first in ("first_nan_producer", "first_nan_report"):
            if data[first] is not None and data[first]["rank"] is None:
                del data[first]["rank"]
            if data[first] is not None:
                data[first].pop("position", None)
                data[first].pop("where", None)
                made = getattr(self, first)
                if isinstance(made, NanLaunch):     # its where's record fields, if any
                    data[first].update(made.where.fields())
                data[first] = {"kind": data[first].pop("kind"), **data[first]}
        if self.host_writes is None:    # written only where they were recorded
            del data["host_writes"]
        if self.first_nan_rank is not None:     # beside the launch it is the rank of
            items = list(data.items())
            items.insert(list(data).index("first_nan_report") + 1,
                         ("first_nan_rank", self.first_nan_rank))
            data = dict(items)
        if not self.injections:
            del data["injections"]     # written only by runs with --inject
        if self.ranks:
            data["ranks"] = {str(pid): rank for pid, rank in sorted(self.ranks.items())}
        else:
            del data["ranks"]
        if self.flight is None:     # written only by a run with --flight
            del data["flight"]
        if self.ended_at_prompt is None:    # written only by a run quit at the prompt
            del data["ended_at_prompt"]
        data["kernels"] = dict(sorted(self.kernels.items(), key=lambda kv: (-kv[1], kv[0])))
        data["graph_kernels"] = dict(sorted(self.graph_kernels.items(),
                                            key=lambda kv: (-kv[1], kv[0])))
        data["planned_kernels"] = dict(sorted(self.planned_kernels.items(),
                                              key=lambda kv: (-kv[1], kv[0])))
        text = (json.dumps(data, indent=2) + "\n").encode("utf-8")
        # Whole, and never through a symlink planted under its name (runfiles).
        runfiles.write_whole(run_dir / SUMMARY_FILE, lambda f: f.write(text))


# -- reading ----------------------------------------------------------------------------


def _summary(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """summary.json's object, read as every run file is (rundir.reading)."""
    path = Path(run_dir) / SUMMARY_FILE
    data = reading.read_json(path)
    if not isinstance(data, dict):
        raise reading.RunFileError(f"{reading.shown(path)}: not a cudump summary (not a JSON "
                                   "object)")
    return path, data


def _counts(path: Path, data: dict[str, Any], key: str) -> dict[str, int]:
    value = data.get(key, {})
    if not isinstance(value, dict) or not all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 63
            for n in value.values()):
        raise reading.RunFileError(f"{reading.shown(path)}: field '{key}' should map kernel "
                                   "names to launch counts (whole numbers from 0 to 2^63-1)")
    return value


def read_summary_counts(run_dir: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The launches of each kernel (`kernels`) and of them, kernel-node runs of graph
    launches (`graph_kernels`); RunFileError naming the file and the field if not."""
    path, data = _summary(run_dir)
    return _counts(path, data, "kernels"), _counts(path, data, "graph_kernels")


def read_injections(run_dir: Path) -> list[InjectionRecord]:
    """What --inject did, as the run's summary.json says (none: the run had no --inject);
    RunFileError naming the file and the injection's field if a record is not one."""
    path, data = _summary(run_dir)
    records = data.get("injections", [])
    if not isinstance(records, list):
        raise reading.RunFileError(f"{reading.shown(path)}: field 'injections' should be a "
                                   "list")
    found = []
    for i, record in enumerate(records):
        try:
            found.append(InjectionRecord.from_json(record))
        except InjectionFormatError as err:
            raise reading.RunFileError(f"{reading.shown(path)}: injections[{i}]: {err}"
                                       ) from None
    return found


def read_exit_status(run_dir: Path) -> int | None:
    """The program's exit status as summary.json says it; None where there is no summary
    (the run was killed), or it cannot be read or holds no such number."""
    try:
        _, data = _summary(run_dir)
    except reading.RunFileError:
        return None
    status = data.get("exit_status")
    return status if isinstance(status, int) and not isinstance(status, bool) else None
