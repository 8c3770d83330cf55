"""Snapshots of kernel argument buffers: plans copies for the shim and writes what comes back.

For each launch of a function some rule wants, the shim sends the raw
parameter bytes and the allocation behind each pointer-sized value. This
module decides, per rule, whether this launch is taken (skip/count/every),
plans the copies (geometry.py), places them in the process's staging file,
and once the shim reports the copies done, takes the bytes out of the staging
file and hands them to a writer thread that writes the .npy, the PNG and the
manifest record. PNG encoding never happens while the target waits.
"""

from __future__ import annotations

import mmap
import os
import queue
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cudump.args import ArgValue, arg_values, decode_args
from cudump.errors import CudumpError
from cudump.geometry import Allocation, CopyPlan, GeometryError, plan_copy
from cudump.imaging import is_image_like, render, save_png
from cudump.manifest import ManifestWriter, SnapshotRecord
from cudump.rules import ArgOverride, Rule
from cudump.signature import Signature, parse_signature
from cudump.summary import RunSummary

if TYPE_CHECKING:
    from cudump.session import FuncInfo, ProcessState, ReplyFn

STAGING_ALIGN = 256
MAX_COPIES = 120  # the shim takes at most 128 copies per launch
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(text: str, limit: int = 60) -> str:
    """A readable file-name fragment: no <>:*/ or spaces from template names."""
    name = _UNSAFE.sub("_", text).strip("_.")
    return name[:limit] or "kernel"


@dataclass
class PlannedCopy:
    plan: CopyPlan
    phase: str          # "before" | "after"
    offset: int         # in the staging file
    rule: Rule


@dataclass
class PendingLaunch:
    func: FuncInfo
    message: dict[str, Any]
    copies: list[PlannedCopy]


@dataclass
class FuncRules:
    signature: Signature
    rules: list[Rule]


@dataclass
class ProcessSnapshots:
    staging_path: Path
    staging_size: int
    staging: mmap.mmap | None = None
    matches: dict[int, int] = field(default_factory=dict)   # id(rule) -> matching launches
    pending: dict[int, PendingLaunch] = field(default_factory=dict)  # seq -> launch


@dataclass
class WriteJob:
    record: SnapshotRecord
    array: np.ndarray
    formats: frozenset[str]
    value_range: tuple[float, float] | None


class Snapshotter:
    """The snapshot policy of one run (implements session.SnapshotPolicy)."""

    def __init__(self, rules: list[Rule], run_dir: Path, staging_dir: Path,
                 max_bytes: int | None, staging_bytes: int) -> None:
        self.rules = rules
        self.run_dir = run_dir
        self.staging_dir = staging_dir
        self.max_bytes = max_bytes
        self.staging_bytes = staging_bytes
        self.lock = threading.Lock()
        self.func_rules: dict[tuple[int, int], FuncRules] = {}
        self.processes: dict[int, ProcessSnapshots] = {}
        self.planned_bytes = 0
        self.stopped = False
        self.written = 0
        self.failed = 0
        self.bytes_written = 0
        self.manifest = ManifestWriter(run_dir)
        self.jobs: queue.Queue[WriteJob | None] = queue.Queue(maxsize=64)
        self.writer = threading.Thread(target=self._write_loop, name="cudump-writer", daemon=True)
        self.writer.start()

    # -- per process -----------------------------------------------------------

    def greeting(self, proc: ProcessState) -> tuple[str, int]:
        """Create the process's staging file; returns its path and size for the shim."""
        path = self.staging_dir / f"staging-{proc.pid}"
        with open(path, "wb") as f:
            f.truncate(self.staging_bytes)  # sparse until the shim writes into it
        with self.lock:
            self.processes[proc.pid] = ProcessSnapshots(path, self.staging_bytes)
        return str(path), self.staging_bytes

    def _staging(self, ps: ProcessSnapshots) -> mmap.mmap:
        if ps.staging is None:
            with open(ps.staging_path, "r+b") as f:
                ps.staging = mmap.mmap(f.fileno(), ps.staging_size)
        return ps.staging

    # -- decisions ----------------------------------------------------------------

    def wants(self, func: FuncInfo) -> bool:
        matched = [r for r in self.rules if r.matches(func.demangled, func.mangled)]
        if not matched:
            return False
        sig = parse_signature(func.demangled)
        with self.lock:
            self.func_rules[(id(func), func.id)] = FuncRules(sig, matched)
        return True

    def handle(self, proc: ProcessState, message: dict[str, Any], reply: ReplyFn) -> None:
        ev = message.get("ev")
        if ev == "snap":
            reply(self._plan(proc, message))
        elif ev == "snapped":
            self._collect(proc, message)
            reply("done")

    def _plan(self, proc: ProcessState, message: dict[str, Any]) -> str:
        func = proc.funcs.get(int(message["id"]))
        ps = self.processes.get(proc.pid)
        if func is None or ps is None:
            return "plan"
        fr = self.func_rules.get((id(func), func.id))
        if fr is None:
            return "plan"
        taken: list[Rule] = []
        for rule in fr.rules:
            n = ps.matches.get(id(rule), 0) + 1
            ps.matches[id(rule)] = n
            if rule.selects(n):
                taken.append(rule)
        if not taken or self.stopped:
            return "plan"
        if message.get("args") is None:
            for rule in taken:
                self._error(proc, func, message, None, "before", rule,
                            "the driver gave no parameter layout for this kernel "
                            "(cuFuncGetParamInfo needs driver 12.4 or newer)")
            return "plan"
        raw = [bytes.fromhex(h) if h is not None else b"" for h in message["args"]]
        args = decode_args(fr.signature, raw)
        values = arg_values(args)
        allocs = {(int(p["arg"]), int(p.get("off", 0))): _allocation(p)
                  for p in message.get("ptrs", [])}
        copies: list[PlannedCopy] = []
        offset = 0
        for rule in taken:
            for index in rule.selected_args(args):
                override = rule.overrides.get(index)
                if (rule.args == "pointers" and args[index].type is None and override is None
                        and (index, 0) not in allocs):
                    continue  # an untyped word that points nowhere is not a pointer
                arg, where = _pointer_of(args[index], override)
                for phase in ("before", "after"):
                    if phase not in rule.when:
                        continue
                    try:
                        if arg is None:
                            raise GeometryError(
                                f"argument {index} has {len(args[index].raw)} bytes, no pointer "
                                f"at byte {where}")
                        plan = plan_copy(arg, allocs.get((index, where)), override, values)
                    except GeometryError as err:
                        self._error(proc, func, message, arg, phase, rule, str(err))
                        continue
                    if not message.get("staging"):
                        self._error(proc, func, message, arg, phase, rule,
                                    "the shim could not map the staging area")
                        continue
                    if offset + plan.nbytes > ps.staging_size or len(copies) >= MAX_COPIES:
                        self._error(proc, func, message, arg, phase, rule,
                                    f"{plan.nbytes} bytes do not fit the staging area "
                                    f"({ps.staging_size} bytes); raise --staging")
                        continue
                    if not self._budget(plan.nbytes):
                        return self._encode(copies)
                    copies.append(PlannedCopy(plan, phase, offset, rule))
                    offset += -(-plan.nbytes // STAGING_ALIGN) * STAGING_ALIGN
        if copies:
            ps.pending[int(message["seq"])] = PendingLaunch(func, message, copies)
        return self._encode(copies)

    def _budget(self, nbytes: int) -> bool:
        with self.lock:
            if self.stopped:
                return False
            if self.max_bytes is not None and self.planned_bytes + nbytes > self.max_bytes:
                self.stopped = True
                print(f"cudump: --max-bytes {self.max_bytes} reached; no more snapshots "
                      f"(the program carries on)", file=sys.stderr)
                return False
            self.planned_bytes += nbytes
            return True

    @staticmethod
    def _encode(copies: list[PlannedCopy]) -> str:
        parts = ["plan"]
        for c in copies:
            p = c.plan
            parts.append(f"{c.phase[0]}:{p.address:x}:{p.width_bytes}:{p.height}:{p.pitch}:"
                         f"{c.offset}")
        return " ".join(parts)

    # -- results ------------------------------------------------------------------

    def _collect(self, proc: ProcessState, message: dict[str, Any]) -> None:
        ps = self.processes.get(proc.pid)
        pending = ps.pending.pop(int(message["seq"]), None) if ps else None
        if ps is None or pending is None:
            return
        codes = message.get("rc", [])
        sync_rc = int(message.get("sync_rc", 0))
        staging = self._staging(ps)
        for i, copy in enumerate(pending.copies):
            rc = int(codes[i]) if i < len(codes) else -1
            record = self._record(proc, pending.func, pending.message, copy.plan.arg,
                                  copy.phase, copy.plan)
            if rc == -1:
                self._fail(record, "the launch failed, so there is nothing after it to copy")
                continue
            if rc != 0:
                self._fail(record, f"the copy failed with CUDA error {rc}")
                continue
            if sync_rc != 0:
                self._fail(record, f"waiting for the copy failed with CUDA error {sync_rc}")
                continue
            plan = copy.plan
            data = np.frombuffer(staging, dtype=np.uint8, count=plan.nbytes, offset=copy.offset)
            array = data.view(np.dtype(plan.dtype)).reshape(plan.shape).copy()
            override = copy.rule.overrides.get(plan.arg)
            value_range = override.range if override is not None else None
            self.jobs.put(WriteJob(record, array, copy.rule.formats, value_range))

    def _record(self, proc: ProcessState, func: FuncInfo, message: dict[str, Any], arg: int,
                phase: str, plan: CopyPlan | None, type_text: str | None = None) -> SnapshotRecord:
        seq = int(message["seq"])
        stem = f"{seq:06d}-{proc.pid}-{safe_name(_base_name(func))}-arg{arg}-{phase}"
        record = SnapshotRecord(
            kernel=func.demangled, mangled=func.mangled, launch=seq,
            occurrence=int(message.get("occ", 0)), pid=proc.pid, grid=list(message["grid"]),
            block=list(message["block"]), stream=message["stream"], arg=arg,
            type=plan.type_text if plan is not None else type_text, phase=phase,
            address=f"0x{plan.address:x}" if plan is not None else "",
            dtype=plan.dtype if plan is not None else None,
            shape=list(plan.shape) if plan is not None else None,
            file=f"{stem}.npy" if plan is not None else None,
        )
        if plan is not None and plan.note:
            record.extra["note"] = plan.note
        return record

    def _error(self, proc: ProcessState, func: FuncInfo, message: dict[str, Any],
               arg: ArgValue | None, phase: str, rule: Rule, reason: str) -> None:
        index = arg.index if arg is not None else -1
        record = self._record(proc, func, message, index, phase, None,
                              arg.type.text if arg is not None and arg.type else None)
        if arg is not None and isinstance(arg.value, int):
            record.address = f"0x{arg.value:x}"
        record.extra["rule"] = f"{rule.path}:{rule.line}"
        self._fail(record, reason)

    def _fail(self, record: SnapshotRecord, reason: str) -> None:
        record.status = "error"
        record.reason = reason
        record.file = None
        print(f"cudump: warning: no snapshot of {record.kernel} arg {record.arg} "
              f"({record.phase}, launch {record.launch}): {reason}", file=sys.stderr)
        with self.lock:
            self.failed += 1
            self.manifest.append(record)

    # -- writing ------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                self._write(job)
            except Exception as err:  # a bad write must not stop the others
                job.record.png = None
                self._fail(job.record, f"could not write the snapshot: {err}")

    def _write(self, job: WriteJob) -> None:
        record = job.record
        assert record.file is not None
        npy = self.run_dir / record.file
        np.save(npy, job.array)
        if "png" in job.formats and is_image_like(job.array.dtype, job.array.shape):
            rendered = render(job.array, value_range=job.value_range)
            png = npy.with_suffix(".png")
            save_png(rendered, png, {"kernel": record.kernel, "arg": str(record.arg),
                                     "phase": record.phase, "launch": str(record.launch)})
            record.png = png.name
            if rendered.value_range is not None and job.array.dtype.kind == "f":
                record.range = [float(rendered.value_range[0]), float(rendered.value_range[1])]
        if "npy" not in job.formats:
            npy.unlink()
            record.file = None
        with self.lock:
            self.written += 1
            self.bytes_written += job.array.nbytes
            self.manifest.append(record)

    def fill(self, summary: RunSummary) -> None:
        summary.snapshots = self.written
        summary.snapshot_errors = self.failed
        summary.snapshot_bytes = self.bytes_written

    def close(self) -> None:
        self.jobs.put(None)
        self.writer.join()
        self.manifest.close()
        for ps in self.processes.values():
            if ps.staging is not None:
                ps.staging.close()
            try:
                os.unlink(ps.staging_path)
            except OSError:
                pass


def _pointer_of(arg: ArgValue, override: ArgOverride | None) -> tuple[ArgValue | None, int]:
    """The argument itself, or the pointer at `field` inside a by-value struct argument."""
    field_offset = override.field if override is not None else None
    if field_offset is None:
        return arg, 0
    raw = arg.raw[field_offset:field_offset + 8]
    if len(raw) != 8:
        return None, field_offset
    return ArgValue(arg.index, None, raw, int.from_bytes(raw, "little")), field_offset


def _allocation(p: dict[str, Any]) -> Allocation:
    return Allocation(base=int(p["base"], 16), size=int(p["size"]), kind=p["kind"],
                      pitch=int(p.get("pitch", 0)), width_bytes=int(p.get("width", 0)),
                      height=int(p.get("height", 0)), elem_size=int(p.get("elem", 0)))


def _base_name(func: FuncInfo) -> str:
    try:
        return parse_signature(func.demangled).base_name
    except Exception:
        return func.mangled


def staging_size_arg(text: str) -> int:
    """Parse a size like 256M, 1G, 4096."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    m = re.fullmatch(r"(\d+)\s*([KMG]?)(?:i?B)?", text.strip(), re.IGNORECASE)
    if not m:
        raise CudumpError(f"bad size '{text}': use a number of bytes, or with K, M or G "
                          "(e.g. 512M)")
    return int(m.group(1)) * units[m.group(2).upper()]
