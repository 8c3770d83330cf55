"""Captured launches of a run (captures.jsonl) as launch specs the replay engine runs.

A capture records facts as the shim saw them: device addresses, the
allocation each pointer word falls in, and the snapshot files of each buffer.
Replaying needs them the other way round: one device region per allocation
the launch touched, every pointer word and buffer as an offset into its
region (so that two pointers into one allocation still alias), and the
parameter bytes to patch. `launch_spec` makes that translation; the engine
(replay_engine/, whose files also ship in extracted folders) does the rest.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cudump.analysis.replay_engine import (
    SPEC_FILE,
    LaunchSpec,
    ReplayError,
    SpecError,
    name_problem,
    open_regular,
    read_regular,
)
from cudump.errors import CudumpError
from cudump.kernels.pattern import KernelPattern, name_forms
from cudump.rundir.captures import CapturedAllocation, CaptureFormatError, CaptureRecord
from cudump.rundir.layout import CAPTURES_FILE
from cudump.rundir.runs import confined, load_array

SPEC_FORMAT = "cudump-launch/1"
# The most bytes captures.jsonl and a module image may have: files of a run are read only
# when they are regular files (a FIFO or a device is refused, without waiting on it) of
# bounded size.
CAPTURES_LIMIT = 1 << 30
IMAGE_LIMIT = 4 << 30


class ReplayTrouble(CudumpError):
    """The run has no launch that can be replayed as asked (exit status 2)."""


@dataclass
class Capture:
    """One line of captures.jsonl, where it is."""

    record: CaptureRecord
    line: int
    path: Path | None = None

    @property
    def where(self) -> str:
        return f"{self.path or CAPTURES_FILE}:{self.line}"

    @property
    def pid(self) -> int:
        return self.record.pid

    @property
    def launch(self) -> int:
        return self.record.launch

    @property
    def kernel(self) -> str:
        return self.record.kernel

    @property
    def occurrence(self) -> int:
        return self.record.occurrence

    @property
    def problems(self) -> list[str]:
        return list(self.record.problems)

    def describe(self) -> str:
        return (f"launch {self.launch} of {self.kernel} (occurrence {self.occurrence}, "
                f"process {self.pid})")


def read_captures(run_dir: Path) -> list[Capture]:
    path = run_dir / CAPTURES_FILE
    try:
        data = read_regular(path, CAPTURES_FILE, CAPTURES_LIMIT)
    except FileNotFoundError:
        raise ReplayTrouble(f"{run_dir} holds no captured launch ({CAPTURES_FILE}); run the "
                            "program "
                            "with --capture-launch PATTERN or a rule with 'replay: true'") \
            from None
    except ReplayError as err:
        raise ReplayTrouble(str(err)) from None
    captures = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ReplayTrouble(f"{path}:{number}: not UTF-8 text (byte {err.start + 1} of "
                                "the line)") from None
        if not text.strip():
            continue
        try:
            data_line = json.loads(text)
        except json.JSONDecodeError as err:
            raise ReplayTrouble(f"{path}:{number}: not JSON ({err.msg})") from None
        except RecursionError:
            raise ReplayTrouble(f"{path}:{number}: not JSON (nested too deeply)") from None
        except ValueError:   # an integer of more digits than Python converts
            raise ReplayTrouble(f"{path}:{number}: not JSON (a number too long)") from None
        try:
            record = CaptureRecord.from_json(data_line)
        except CaptureFormatError as err:
            raise ReplayTrouble(f"{path}:{number}: {err}") from None
        captures.append(Capture(record, number, path))
    return captures


def select_capture(captures: list[Capture], launch: int | None, pid: int | None,
                   pattern: KernelPattern | None, occurrence: int | None
                   ) -> tuple[Capture, int]:
    """The capture asked for, and how many matched (the first is taken)."""
    found = [c for c in captures
             if (launch is None or c.launch == launch) and (pid is None or c.pid == pid)
             and (pattern is None or pattern.matches(c.kernel, c.record.mangled))
             and (occurrence is None or c.occurrence == occurrence)]
    if not found:
        listed = ", ".join(f"{c.launch} ({name_forms(c.kernel)[3]})" for c in captures[:8])
        raise ReplayTrouble(f"no captured launch matches; the run has {len(captures)}: "
                            f"{listed}{' ...' if len(captures) > 8 else ''}")
    return found[0], len(found)


@dataclass
class _Span:
    """What a launch reaches of one allocation: bytes [low, high), as the capture saw them."""

    alloc: CapturedAllocation
    low: int
    high: int

    @property
    def pitched(self) -> bool:
        a = self.alloc
        return a.kind == "pitched" and bool(a.pitch) and bool(a.height)

    @property
    def start(self) -> int:
        """Where the replay's region begins: the allocation's base for a pitched one."""
        return self.alloc.base if self.pitched else self.low

    def region(self) -> dict[str, Any]:
        a = self.alloc
        size = a.pitch * a.height if self.pitched else self.high - self.low
        return {"kind": "pitched" if self.pitched else "linear", "size": size,
                "pitch": a.pitch, "width": a.width, "height": a.height, "elem": a.elem}


def launch_spec(capture: Capture, image: str | None = None,
                image_format: str | None = None) -> LaunchSpec:
    """The capture as the engine's launch spec (snapshot paths as in the run); ReplayTrouble
    naming the capture's line where its values do not make one."""
    try:
        return _launch_spec(capture, image, image_format)
    except SpecError as err:
        problem = str(err).removeprefix(f"{SPEC_FILE}: ")
        raise ReplayTrouble(f"{capture.where}: not a launch that can be replayed: "
                            f"{problem}") from None
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as err:
        raise ReplayTrouble(f"{capture.where}: not a launch that can be replayed "
                            f"({type(err).__name__}: {err})") from None


def _launch_spec(capture: Capture, image: str | None, image_format: str | None) -> LaunchSpec:
    d = capture.record
    if d.layout is None:
        raise ReplayTrouble(f"{capture.describe()}: the driver gave no parameter layout, so "
                            "its parameters cannot be rebuilt")
    pointers = d.pointers
    alloc_of = {(ptr.arg, ptr.offset): ptr.alloc for ptr in pointers}
    # The bytes of each allocation the launch reaches, by its base: every buffer and every
    # pointer value in it (a pitched allocation is taken whole, so that it keeps its pitch).
    spans: dict[int, _Span] = {}

    def reach(alloc: CapturedAllocation, low: int, high: int) -> int:
        span = spans.setdefault(alloc.base, _Span(alloc, low, high))
        span.low, span.high = min(span.low, low), max(span.high, high)
        return alloc.base

    buffers = []
    for buf in d.buffers:
        start = buf.address
        end = start + (buf.height - 1) * buf.pitch + buf.width
        alloc = alloc_of.get((buf.arg, buf.offset)) or CapturedAllocation(
            start, end - start, "linear", 0, 0, 0, 0)
        buffers.append((reach(alloc, start, end), buf))
    for ptr in pointers:
        reach(ptr.alloc, ptr.value, ptr.value + 1)
    index = {base: i for i, base in enumerate(spans)}
    low = {base: span.start for base, span in spans.items()}
    return LaunchSpec.from_json({
        "format": SPEC_FORMAT,
        "kernel": d.kernel, "mangled": d.mangled,
        "image": image if image is not None else d.image or "",
        "image_format": image_format or d.image_format or "unknown",
        "grid": d.grid, "block": d.block, "smem": d.smem,
        "params": d.params, "layout": d.layout,
        "regions": [span.region() for span in spans.values()],
        "pointers": [{"arg": ptr.arg, "offset": ptr.offset, "region": index[ptr.alloc.base],
                      "delta": ptr.value - low[ptr.alloc.base]}
                     for ptr in pointers],
        "buffers": [{"arg": buf.arg, "offset": buf.offset, "region": index[base],
                     "delta": buf.address - low[base], "width": buf.width,
                     "height": buf.height, "pitch": buf.pitch, "dtype": buf.dtype,
                     "shape": buf.shape, "before": buf.before, "after": buf.after}
                    for base, buf in buffers],
    })


def run_file(run_dir: Path, name: str, what: str) -> Path:
    """File `name` of the run (a name the run's records give), checked before it is opened:
    a name a file system can hold, inside the run directory (after symlinks), and a regular
    file there (a FIFO or a device is refused without waiting on it). CudumpError or
    OSError (FileNotFoundError where it is missing) otherwise."""
    problem = name_problem(name)
    if problem is not None:
        raise ReplayTrouble(f"its name {problem}")
    path = confined(run_dir, name)
    try:
        os.close(open_regular(path, what))
    except ReplayError as err:
        raise ReplayTrouble(str(err)) from None
    return path


def load_snapshots(run_dir: Path, spec: LaunchSpec, phase: str) -> list[np.ndarray | None]:
    """Each buffer's "before" or "after" snapshot from the run (None where there is none)."""
    arrays: list[np.ndarray | None] = []
    for buf in spec.buffers:
        name = buf.before if phase == "before" else buf.after
        if name is None:
            arrays.append(None)
            continue
        try:
            arrays.append(np.asarray(load_array(run_file(run_dir, name, str(name)))))
        except CudumpError as err:
            raise ReplayTrouble(f"{buf.label}: its {phase} snapshot cannot be read: {err}") \
                from None
        except OSError as err:
            raise ReplayTrouble(f"{buf.label}: its {phase} snapshot cannot be read: "
                                f"{err.strerror or err}") from None
    return arrays


def read_image(run_dir: Path, capture: Capture, override: Path | None) -> bytes:
    """The kernel's code: a --ptx/--cubin file, or the module image the run saved; either a
    regular file (a FIFO or a device is refused without waiting on it)."""
    if override is not None:
        try:
            return read_regular(override, "the kernel's code", IMAGE_LIMIT)
        except FileNotFoundError as err:
            raise ReplayTrouble(f"{override}: cannot read: {err.strerror}") from None
        except ReplayError as err:
            raise ReplayTrouble(str(err)) from None
    name = capture.record.image
    if not name:
        raise ReplayTrouble(f"{capture.describe()} has no module image; give the kernel's code "
                            "with --cubin FILE or --ptx FILE")
    try:
        path = run_file(run_dir, str(name), "the module image")
        return read_regular(path, "the module image", IMAGE_LIMIT)
    except (OSError, CudumpError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise ReplayTrouble(f"{str(name)[:80]!r}: cannot read the module image: {reason}") \
            from None


__all__ = ["Capture", "ReplayError", "ReplayTrouble", "launch_spec", "load_snapshots",
           "read_captures", "read_image", "replay_notes", "select_capture"]


_PTX_GLOBAL = re.compile(
    rb"^[ \t]*(?:\.(?:visible|extern|weak)[ \t]+)?\.(?:global|const)[ \t]+"
    rb"(?:\.align[ \t]+\d+[ \t]+)?(?:\.\w+[ \t]+)+([A-Za-z_$%][\w$]*)", re.MULTILINE)
_ELF_STATE = (b".nv.global", b".nv.constant3")   # __device__ and __constant__ variables


def module_variables(image: bytes) -> list[str] | None:
    """Names of the module-scope variables (__device__, __constant__) in a PTX or cubin image;
    None where the image cannot be read for them (a fat binary's compressed entries)."""
    if image.startswith(b"\x7fELF"):
        return _elf_variables(image)
    if image[:4] == b"\x50\xed\x55\xba":
        return None
    return sorted({m.group(1).decode() for m in _PTX_GLOBAL.finditer(image)})


def _elf_variables(elf: bytes) -> list[str] | None:
    try:
        shoff, = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize)
                    for i in range(shnum)]
        names_at = sections[shstrndx][4]

        def name(table: int, offset: int) -> bytes:
            start = table + offset
            return elf[start:elf.index(b"\0", start)]

        state = {i for i, s in enumerate(sections)
                 if name(names_at, s[0]).startswith(_ELF_STATE)}
        found = set()
        for s in sections:
            if s[1] != 2:    # SHT_SYMTAB
                continue
            strings = sections[s[6]][4]
            for k in range(s[5] // 24):
                st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", elf, s[4] + k * 24)
                if st_shndx in state and st_info & 0xF == 1:   # STT_OBJECT
                    found.add(name(strings, st_name).decode(errors="replace"))
        return sorted(found)
    except (struct.error, ValueError, IndexError):
        return None


def replay_notes(capture: Capture, image: bytes) -> list[str]:
    """What the replay does not restore, for this launch and image (one line each)."""
    notes = []
    names = module_variables(image)
    if names:
        shown = ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
        notes.append(f"the module has module-scope variables ({shown}): the replay starts "
                     "them from the image's initial values, not from what they held at the "
                     "launch")
    if (capture.record.api or "").startswith("cuLaunchKernelEx"):
        notes.append("launched with cuLaunchKernelEx: its launch attributes (clusters, "
                     "priorities ...) were not captured; the replay uses cuLaunchKernel")
    return notes
