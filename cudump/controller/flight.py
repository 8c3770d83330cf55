"""The flight recorder at the end of a run (--flight): each process's flight ring, read from
the shared memory the controller keeps mapped after the process has gone, becomes
flight.jsonl and, for a run that did not end cleanly, the report (analysis.flight).

A run ends cleanly when its program exited with status 0 and no call of any of its
processes returned a CUDA error: then nothing is printed. Otherwise each process that has
something to say is reported (every one that recorded launches, where the program failed;
only those that saw a CUDA error, where it exited 0). Arguments are decoded with the
kernel's signature as the prompt does; a pointer is placed in the allocations the process
still had at the end of the run (one freed before that is `outside every allocation` too).
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cudump.analysis.flight import error_name, outcome, report_lines, settle
from cudump.kernels.args import ArgValue, decode_args
from cudump.kernels.geometry import Allocation
from cudump.kernels.signature import parse_signature
from cudump.launches.process import FuncInfo, ProcessState
from cudump.launches.scopes import Where
from cudump.rundir.flight import FlightArg, FlightLaunch, FlightLog, FlightProcess, write_flight
from cudump.rundir.layout import FLIGHT_FILE
from cudump.wire import protocol as p
from cudump.wire.shm import FlightRing

RAW_SHOWN = 16      # bytes of a value that is not one number, shown


@dataclass
class FlightResult:
    log: FlightLog
    lines: list[str] = field(default_factory=list)   # the report; none for a clean run
    written: Path | None = None
    named: int = 0          # launches named as the likely culprit (or the first that failed)


def ended(returncode: int, first_error: int) -> str:
    """How the program ended, as the report says it: its first CUDA error where it saw one."""
    if first_error:
        return f"failed with {error_name(first_error)}"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    if returncode > 0:
        return f"exited with status {returncode}"
    return "exited normally"


def _status(raw: dict[str, int]) -> str:
    flags = p.FlightFlag(raw["flags"] & 0xF)
    if not flags & p.FlightFlag.RETURNED:
        return "launching"
    if raw["rc"] != 0:
        return "failed"
    if flags & p.FlightFlag.CAPTURED:
        return "captured"
    if raw["done"] == raw["position"] + 1:
        return "completed"
    return "in flight" if flags & p.FlightFlag.MARKED else "unknown"


def _allocation_at(allocations: list[Allocation], address: int) -> Allocation | None:
    return next((a for a in allocations if a.base <= address < a.end), None)


def _describe(alloc: Allocation, address: int) -> str:
    text = f"{alloc.kind} 0x{alloc.base:x} size {alloc.size}"
    if alloc.kind == "pitched" and alloc.pitch > 0:
        text += f" pitch {alloc.pitch}"
    return f"{text}, offset {address - alloc.base}"


def _value_text(arg: ArgValue) -> str:
    value = arg.value
    pointer = arg.type is not None and (arg.type.is_pointer or arg.type.reference)
    if isinstance(value, int) and (pointer or (arg.type is None and len(arg.raw) == 8)):
        return f"0x{value:x}"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if value is not None:
        return str(value)
    shown = " ".join(f"{b:02x}" for b in arg.raw[:RAW_SHOWN])
    more = " ..." if len(arg.raw) > RAW_SHOWN else ""
    return f"<{len(arg.raw)} bytes: {shown}{more}>"


def _flight_arg(arg: ArgValue, allocations: list[Allocation]) -> FlightArg:
    typed_pointer = arg.type is not None and arg.type.is_pointer and not arg.type.function
    type_text = arg.type.text if arg.type is not None else f"<{len(arg.raw)} bytes>"
    address = arg.value if isinstance(arg.value, int) and arg.looks_like_pointer else None
    where = None
    if address is not None:
        alloc = _allocation_at(allocations, address)
        if alloc is not None:
            where = _describe(alloc, address)
        elif typed_pointer:
            where = "null" if address == 0 else "outside every allocation"
        else:
            address = None      # an untyped word that points nowhere is no pointer
    return FlightArg(arg.index, type_text, _value_text(arg), address, where)


def _args(func: FuncInfo | None, raw: bytes,
          allocations: list[Allocation]) -> list[FlightArg]:
    """The arguments whose bytes the slot kept whole, decoded by the kernel's signature."""
    if func is None or func.params is None:
        return []
    pieces: list[bytes] = []
    pos = 0
    for _, size in func.params:
        if pos + size > len(raw):
            break
        pieces.append(raw[pos:pos + size])
        pos += size
    sig = parse_signature(func.demangled)
    return [_flight_arg(a, allocations) for a in decode_args(sig, pieces)]


def _where(proc: ProcessState, raw: dict[str, Any]) -> Where:
    """The slot's scope, step and source (proto_flight_slot), in names; nothing where the
    slot does not carry them."""
    where = proc.scopes.where(int(raw.get("scope", 0)), int(raw.get("step", 0)),
                              int(raw.get("source", 0)))
    # The collectives its process launched before it (the controller heard of each).
    place = proc.collectives.before(int(raw["seq"])) if "seq" in raw else None
    if place is not None:
        where = replace(where, collective=place.count, collective_op=place.op)
    return where


def launches_of(proc: ProcessState, ring: FlightRing) -> list[FlightLaunch]:
    """The ring's launches as records, their completion settled (analysis.flight)."""
    allocations = list(proc.allocations.values())
    out: list[FlightLaunch] = []
    for raw in ring.records:
        graph = bool(raw["flags"] & p.FlightFlag.GRAPH)
        func = None if graph else proc.funcs.get(raw["id"])
        kept = bytes(raw["params"][:min(raw["kept"], p.FLIGHT_PARAM_BYTES)])
        rc = raw["rc"] if raw["flags"] & p.FlightFlag.RETURNED else None
        kernel = ("graph launch" if graph else
                  func.demangled if func is not None else f"function {raw['id']}")
        out.append(FlightLaunch(
            pid=proc.pid, launch=raw["seq"], kernel=kernel, status=_status(raw),
            stream=f"0x{raw['stream']:x}", thread=raw["tid"], api=p.api_name(raw["api"]),
            grid=list(raw["grid"]), block=list(raw["block"]), smem=raw["smem"],
            mangled=func.mangled if func is not None else "",
            graph=raw["graph"] if graph else None, rc=rc,
            error=error_name(rc) if rc else None, params=kept.hex(),
            params_size=raw["nbytes"], args=_args(func, kept, allocations),
            where=_where(proc, raw)))
    settle(out)
    return out


def write_now(rings: list[tuple[ProcessState, FlightRing]], run_dir: Path, why: str) -> Path:
    """flight.jsonl while the program runs (another node of a job failed): each process's
    last launches as its ring holds them now, `ended` saying why they were written. The
    file is written again, whole, at the end of the run."""
    log = FlightLog()
    for proc, ring in rings:
        log.processes.append(FlightProcess(
            pid=proc.pid, slots=ring.slots, recorded=ring.head, kept=len(ring.records),
            first_error=ring.first_error or None,
            error=error_name(ring.first_error) if ring.first_error else None,
            ended=f"running ({why})"))
        log.launches.extend(launches_of(proc, ring))
    return write_flight(run_dir, log)


def finish(processes: list[ProcessState], run_dir: Path, returncode: int) -> FlightResult:
    """flight.jsonl, and the report of a run that did not end cleanly."""
    result = FlightResult(FlightLog())
    reported: list[tuple[FlightProcess, list[FlightLaunch]]] = []
    for proc in processes:
        ring = proc.flight
        if ring is None:
            continue
        record = FlightProcess(pid=proc.pid, slots=ring.slots, recorded=ring.head,
                               kept=len(ring.records), first_error=ring.first_error or None,
                               error=error_name(ring.first_error) if ring.first_error else None,
                               ended=ended(returncode, ring.first_error))
        launches = launches_of(proc, ring)
        result.log.processes.append(record)
        result.log.launches.extend(launches)
        if ring.first_error or (returncode != 0 and launches):
            reported.append((record, launches))
    several = len(reported) > 1
    for record, launches in reported:
        lines = report_lines(record, launches, f"process {record.pid}: " if several else "")
        result.lines.extend(lines)
    for _, launches in reported:
        named = outcome(launches).named
        if named is not None:
            named.culprit = True
            result.named += 1
    if result.lines:
        result.lines.append(f"cudump: flight: the last launches of each process are in "
                            f"{run_dir / FLIGHT_FILE}")
    result.written = write_flight(run_dir, result.log)
    return result
