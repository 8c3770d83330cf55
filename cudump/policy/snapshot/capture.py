"""Launches captured for replay: module images from the shim, and one record per launch.

A rule with `replay: true` (or `--capture-launch PATTERN`) makes the shim send
the image of each matching kernel's module (MSG_IMAGE, once per module and
process) and snapshots every buffer of each launch it takes, before and
after. Once those copies are in, `captures.jsonl` gets one line per launch:
what `cudump replay` and `cudump extract` need to run the kernel again —
the image, the parameter bytes and their layout, every pointer word and the
allocation it points into, and the snapshot files of each buffer.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cudump.console import warn
from cudump.kernels.args import ArgValue
from cudump.policy.snapshot.planned import LaunchContext, PlannedCopy
from cudump.rundir import files as runfiles
from cudump.rundir.captures import (
    CapturedAllocation,
    CapturedBuffer,
    CapturedPointer,
    CaptureRecord,
)
from cudump.rundir.layout import CAPTURES_FILE, MODULES_DIR
from cudump.wire import protocol as p


@dataclass(frozen=True)
class Image:
    """Where a function's module image went (a path relative to the run directory), or why
    there is none."""

    file: str | None
    format: str
    problem: str | None = None


@dataclass
class _Partial:
    path: Path
    size: int
    format: str
    received: int = 0


@dataclass
class ImageStore:
    """Module images as the shim sends them, saved once per content under modules/."""

    run_dir: Path
    lock: threading.Lock = field(default_factory=threading.Lock)
    partial: dict[tuple[int, int], _Partial] = field(default_factory=dict)
    done: dict[tuple[int, int], Image] = field(default_factory=dict)     # (pid, module)
    funcs: dict[tuple[int, int], Image] = field(default_factory=dict)    # (pid, function id)

    def receive(self, pid: int, payload: bytes) -> None:
        """One MSG_IMAGE: a chunk of a module's image, or the header that binds a function to
        a module sent before."""
        head = p.IMAGE.unpack(payload)
        data = payload[p.IMAGE.size:]
        fmt = p.IMAGE_FORMATS[head["format"]] if head["format"] < len(p.IMAGE_FORMATS) \
            else "unknown"
        key, size, offset = (pid, head["module"]), head["size"], head["offset"]
        if fmt == "unknown" or size == 0:
            self._bind(pid, head["id"], Image(None, "unknown", (
                "cudump did not see the load of this kernel's module, or could not tell "
                "its size; give the code with --cubin or --ptx")))
            return
        if offset + len(data) > size or len(data) > p.IMAGE_CHUNK:
            raise p.ProtocolError(f"image chunk at {offset} of {len(data)} bytes runs past "
                                  f"{size}")
        if data:
            self._chunk(key, size, offset, fmt, data)
            return
        with self.lock:
            image = self.done.get(key)
        self._bind(pid, head["id"], image if image is not None else Image(
            None, fmt, "the module's image did not arrive whole"))

    def _chunk(self, key: tuple[int, int], size: int, offset: int, fmt: str,
               data: bytes) -> None:
        with self.lock:
            part = self.partial.get(key)
            if part is None or offset == 0:
                if part is not None:        # the image is sent again from its start
                    part.path.unlink(missing_ok=True)
                    self.partial.pop(key, None)
                # A real folder of the run, and a file created new in it (runfiles).
                folder = runfiles.make_dir(self.run_dir / MODULES_DIR)
                part = _Partial(runfiles.temporary_name(folder / f"{key[0]}-{key[1]:x}"), size,
                                fmt)
                os.close(runfiles.create(part.path))
                self.partial[key] = part
        fd = runfiles.reopen(part.path)
        try:
            runfiles.write_at(fd, memoryview(data), offset)
        finally:
            os.close(fd)
        part.received += len(data)
        if part.received >= part.size:
            self._finish(key, part)

    def _finish(self, key: tuple[int, int], part: _Partial) -> None:
        fd = runfiles.reopen(part.path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:16]
        name = f"{MODULES_DIR}/{digest}.{part.format}"   # the format names the extension
        final = self.run_dir / name
        if _is_file(final):
            part.path.unlink(missing_ok=True)   # the same image from another process
        else:
            os.replace(part.path, final)        # replaces a symlink there; never follows it
        with self.lock:
            self.partial.pop(key, None)
            self.done[key] = Image(name, part.format)

    def _bind(self, pid: int, func_id: int, image: Image) -> None:
        with self.lock:
            self.funcs[(pid, func_id)] = image

    def of(self, pid: int, func_id: int) -> Image:
        with self.lock:
            return self.funcs.get((pid, func_id), Image(
                None, "unknown", "the shim sent no image for this kernel"))


def _is_file(path: Path) -> bool:
    """A regular file itself there (a symlink, even to one, is not)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def launch_problems(api: str, flags: int) -> list[str]:
    """What keeps a launch from being replayed as it ran, known from how it was made."""
    problems = []
    if api.startswith("cuLaunchCooperativeKernel"):
        problems.append("a cooperative launch (grid-wide synchronisation); cudump replay "
                        "launches kernels one ordinary launch at a time")
    if flags & p.LaunchFlag.GRAPH:
        problems.append("a kernel node of a CUDA graph")
    return problems


def captured_launch(ctx: LaunchContext, args: list[ArgValue], copies: list[PlannedCopy],
                    outcomes: dict[int, str | None], image: Image) -> CaptureRecord:
    """What a replay of this launch needs, from its captured copies (`outcomes`: id(copy)
    -> why it failed, None if it did not), and what of it is missing."""
    ev, func = ctx.event, ctx.func
    problems = launch_problems(ev.api, ev.flags)
    if image.problem is not None:
        problems.append(f"no module image: {image.problem}")
    buffers: dict[tuple[int, int], CapturedBuffer] = {}
    for copy in copies:
        rec, plan = copy.record, copy.plan
        where = int(rec.extra.get("offset", 0))
        failure = outcomes.get(id(copy), rec.reason or "it was not copied")
        if failure is not None:
            at = f" (the pointer at byte {where})" if where else ""
            problems.append(f"arg {plan.arg}{at}: no {copy.phase} snapshot: {failure}")
            continue
        buf = buffers.setdefault((plan.arg, where), CapturedBuffer(
            plan.arg, where, plan.address, plan.width_bytes, plan.height, plan.pitch,
            plan.dtype, list(plan.shape)))
        setattr(buf, copy.phase, rec.file)
    raw = ev.raw_args or []
    pointers = []
    for (index, where), alloc in sorted(ev.pointers.items()):
        if index < len(raw) and where + 8 <= len(raw[index]):
            value = int.from_bytes(raw[index][where:where + 8], "little")
            pointers.append(CapturedPointer(index, where, value, CapturedAllocation.of(alloc)))
    for arg in args:
        if (arg.type is not None and arg.looks_like_pointer and isinstance(arg.value, int)
                and arg.value and (arg.index, 0) not in ev.pointers):
            problems.append(f"arg {arg.index} points to 0x{arg.value:x}, outside every "
                            "allocation cudump tracks, so its memory was not captured")
    return CaptureRecord(
        pid=ctx.proc.pid, launch=ev.seq, occurrence=ev.occurrence, kernel=func.demangled,
        mangled=func.mangled, grid=list(ev.grid), block=list(ev.block), smem=ev.smem,
        api=ev.api, device=ev.device if ev.device >= 0 else None, stream=ev.stream_hex,
        image=image.file, image_format=image.format, params=b"".join(raw).hex(),
        layout=[list(x) for x in func.params] if func.params is not None else None,
        pointers=pointers, buffers=list(buffers.values()), problems=problems)


class CaptureWriter:
    """captures.jsonl, one line per captured launch (any thread), never through a symlink
    (runfiles.LineAppender)."""

    def __init__(self, run_dir: Path) -> None:
        self.lines = runfiles.LineAppender(
            run_dir / CAPTURES_FILE,
            lambda why: warn(f"{why}; no more launches are captured for replay"))
        self.warned: set[str] = set()
        self.lock = threading.Lock()

    @property
    def count(self) -> int:
        return self.lines.count

    def append(self, record: CaptureRecord) -> None:
        line = (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode("utf-8")
        if not self.lines.append(line):
            return                      # said once by the appender; the snapshots go on
        problems = record.problems
        said = f"{record.kernel}|{problems[0] if problems else ''}"
        with self.lock:
            first = bool(problems) and said not in self.warned
            if first:
                self.warned.add(said)
        if first:
            warn(f"launch {record.launch} of {record.kernel} is captured but cannot be "
                 f"replayed as it ran: {problems[0]}")


class Captures:
    """Launches captured for replay: the module images the shim sends, and captures.jsonl."""

    def __init__(self, run_dir: Path) -> None:
        self.images = ImageStore(run_dir)
        self.writer = CaptureWriter(run_dir)

    @property
    def count(self) -> int:
        return self.writer.count

    def write(self, ctx: LaunchContext, args: list[ArgValue], copies: list[PlannedCopy],
              outcomes: dict[int, str | None]) -> None:
        """One line of captures.jsonl for this launch."""
        image = self.images.of(ctx.proc.pid, ctx.func.id)
        self.writer.append(captured_launch(ctx, args, copies, outcomes, image))
