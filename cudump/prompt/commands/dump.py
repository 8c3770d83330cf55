"""`dump argN [FILE.npy|FILE.png] [as TYPE [WxH|N] [pitch P]]`: write a buffer to a file.

The geometry is the snapshots' (geometry.plan_copy): a pitched allocation as rows x width,
padding dropped; linear memory from the pointer to the end of its allocation. `as` states
what a rule's override would: the element type, `WxH` (elements per row x rows) or a count
`N` of elements, and the pitch in bytes. Files go to the run directory; a relative FILE
is taken there too, so that `cudump ls/show/diff` find it. Every file is recorded in the
run's manifest (a FILE given as an absolute path outside the run is written there, and its
record names it under `path`, since a run's manifest only refers to files inside the run).
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cudump.errors import CudumpError
from cudump.kernels.elements import NUMPY_DTYPES, element_type
from cudump.kernels.expr import Expr, ExprError, parse_expr
from cudump.kernels.geometry import CopyPlan, GeometryError, plan_copy
from cudump.kernels.pattern import name_forms
from cudump.launches.stop import StopInfo
from cudump.policy.rules import ArgOverride
from cudump.policy.snapshot.planned import safe_name
from cudump.prompt.context import CommandError, Context
from cudump.prompt.memory import read_plan
from cudump.prompt.registry import STOPPED, command, make_parser
from cudump.rundir import files as runfiles
from cudump.rundir.imaging import is_image_like, render, save_png
from cudump.rundir.manifest import SnapshotRecord

parser = make_parser(
    "dump", "Write an argument's buffer to .npy and/or .png.",
    "dump argN                     dump-<launch>-<pid>-<kernel>-argN-<phase>.npy in the run\n"
    "                              directory, and a .png beside it when it is image-like\n"
    "dump argN FILE.npy|FILE.png   that file only (relative to the run directory)\n"
    "dump argN ... as TYPE [WxH|N] [pitch P]\n"
    "                              read it as TYPE (uint8, float32, uchar4, unsigned short),\n"
    "                              W elements x H rows, or N elements, rows P bytes apart\n\n"
    "Without 'as', the geometry is that of snapshots: the signature's element type and the\n"
    "allocation's shape (pitched: rows x width at its pitch; linear: to the end). W, H, N and\n"
    "P may be argN: dump arg0 as uchar4 arg5xarg6 pitch arg1",
    usage="dump argN [FILE] [as TYPE [WxH|N] [pitch P]]")
parser.add_argument("arg", metavar="argN", help="the pointer argument")
parser.add_argument("words", nargs="*", metavar="...", help=argparse.SUPPRESS)

_ARGN = re.compile(r"^arg(\d+)$")
_SIMPLE = r"(?:0[xX][0-9a-fA-F]+|\d+|arg\d+)"
_GEOMETRY = re.compile(rf"^({_SIMPLE})[xX]({_SIMPLE})$")
_COUNT = re.compile(rf"^{_SIMPLE}$")


@dataclass
class DumpRequest:
    index: int
    path: Path | None
    override: ArgOverride | None


def _expr(text: str) -> Expr:
    try:
        return parse_expr(text)
    except ExprError as err:
        raise CommandError(f"dump: '{text}': {err}") from None


def _dtype(name: str) -> tuple[str, int | None]:
    if name in NUMPY_DTYPES:
        return name, None
    elem = element_type(name)
    if elem is None:
        raise CommandError(f"dump: unknown type '{name}' (a numpy name such as uint8 or "
                           "float32, or a CUDA type such as uchar4 or unsigned short)")
    return elem.dtype, elem.channels


def parse_request(arg_text: str, words: list[str]) -> DumpRequest:
    m = _ARGN.match(arg_text)
    if m is None:
        raise CommandError(f"dump: '{arg_text}' is not an argument (write argN, e.g. arg0)")
    path = None
    rest = list(words)
    if rest and rest[0] != "as":
        path = Path(rest.pop(0))
        if path.suffix.lower() not in (".npy", ".png"):
            raise CommandError(f"dump: {path}: the file name must end in .npy or .png")
    if not rest:
        return DumpRequest(int(m.group(1)), path, None)
    if rest[0] != "as" or len(rest) < 2:
        raise CommandError("dump: expected 'as TYPE [WxH|N] [pitch P]' after the file name")
    rest.pop(0)
    type_words: list[str] = []
    while rest and rest[0] != "pitch" and not _GEOMETRY.match(rest[0]) \
            and not _COUNT.match(rest[0]):
        type_words.append(rest.pop(0))
    if not type_words:
        raise CommandError("dump: 'as' needs a type, e.g. 'as uchar4 256x48'")
    # The longest run of words that names a type (`unsigned short`); what follows it
    # must be the geometry.
    for n in range(len(type_words), 0, -1):
        name = " ".join(type_words[:n])
        if name in NUMPY_DTYPES or element_type(name) is not None:
            if n < len(type_words):
                raise CommandError(f"dump: '{type_words[n]}' is not WxH or a count N "
                                   "(numbers or argN, e.g. 256x48 or arg5xarg6)")
            break
    dtype, channels = _dtype(" ".join(type_words))
    override = ArgOverride(dtype=dtype,
                           channels=_expr(str(channels)) if channels is not None else None)
    if rest and rest[0] != "pitch":
        word = rest.pop(0)
        geometry = _GEOMETRY.match(word)
        if geometry:
            override.width = _expr(geometry.group(1))
            override.height = _expr(geometry.group(2))
        else:
            override.count = _expr(word)
    if rest and rest[0] == "pitch":
        if len(rest) < 2:
            raise CommandError("dump: 'pitch' needs a number of bytes")
        rest.pop(0)
        if override.count is not None:
            raise CommandError("dump: a count of elements takes no pitch; write WxH pitch P")
        override.pitch = _expr(rest.pop(0))
    if rest:
        raise CommandError(f"dump: unexpected '{' '.join(rest)}'")
    return DumpRequest(int(m.group(1)), path, override)


def default_stem(info: StopInfo, index: int) -> str:
    base = safe_name(name_forms(info.kernel)[3])
    return f"dump-{info.launch:06d}-{info.pid}-{base}-arg{index}-{info.phase}"


def _free_stem(run_dir: Path, stem: str) -> str:
    """The stem, or stem-2, stem-3 ... so that an earlier dump is never overwritten."""
    candidate, n = stem, 1
    # lexists: a dangling symlink under the name is taken too (nothing is written through it).
    while (os.path.lexists(run_dir / f"{candidate}.npy")
           or os.path.lexists(run_dir / f"{candidate}.png")):
        n += 1
        candidate = f"{stem}-{n}"
    return candidate


def _relative(path: Path, run_dir: Path) -> str | None:
    """A path as the manifest holds it: relative to the run directory; None outside it."""
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return None


def _make_folder(folder: Path, target: Path) -> None:
    """The folder a dump is written into; CommandError when a file is in the way."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        blocker = next((p for p in (folder, *folder.parents)
                        if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file, not a folder" if blocker is not None \
            else err.strerror or str(err)
        raise CommandError(f"dump: cannot write {target}: {why}") from None


def _record(info: StopInfo, plan: CopyPlan) -> SnapshotRecord:
    record = SnapshotRecord(
        kernel=info.kernel, mangled=info.mangled, launch=info.launch,
        occurrence=info.occurrence, pid=info.pid, grid=list(info.grid), block=list(info.block),
        stream=info.stream, arg=plan.arg, type=plan.type_text, phase=info.phase,
        address=f"0x{plan.address:x}", dtype=plan.dtype, shape=list(plan.shape), file=None,
        device=info.device)
    record.extra["source"] = "dump"
    if plan.note:
        record.extra["note"] = plan.note
    return record


@command(parser, requires=(STOPPED,), complete="args")
def dump(ctx: Context, args: argparse.Namespace) -> None:
    request = parse_request(args.arg, args.words)
    stop = ctx.stopped
    info = stop.info
    arg = ctx.arg(request.index)
    alloc = ctx.allocation_for(arg)
    try:
        plan = plan_copy(arg, alloc, request.override, ctx.values())
    except GeometryError as err:
        raise CommandError(f"dump: arg{arg.index}: {err}") from None
    data = read_plan(stop, plan)
    array = np.frombuffer(data, dtype=np.dtype(plan.dtype)).reshape(plan.shape)
    run_dir = Path(ctx.debugger.run_dir)
    # A name cudump chooses is a new file of the run (runfiles: never through a symlink);
    # a path the user gives is written as they asked.
    chosen = request.path is None
    if request.path is None:
        _make_folder(run_dir, run_dir)
        stem = _free_stem(run_dir, default_stem(info, arg.index))
        npy: Path | None = run_dir / f"{stem}.npy"
        png: Path | None = (run_dir / f"{stem}.png"
                            if is_image_like(array.dtype, array.shape) else None)
    else:
        target = request.path if request.path.is_absolute() else run_dir / request.path
        _make_folder(target.parent, target)
        wants_png = target.suffix.lower() == ".png"
        npy, png = (None, target) if wants_png else (target, None)
    record = _record(info, plan)
    written: list[Path] = []
    try:
        if npy is not None:
            if chosen:
                with runfiles.create_file(npy) as f:
                    np.save(f, array)
            else:
                np.save(npy, array)
            record.file = _relative(npy, run_dir)
            if record.file is None:
                record.extra["path"] = str(npy.resolve())
            written.append(npy)
        if png is not None:
            rendered = render(array)
            text = {"kernel": info.kernel, "arg": str(arg.index), "phase": info.phase,
                    "launch": str(info.launch)}
            if chosen:
                with runfiles.create_file(png) as f:
                    save_png(rendered, f, text)
            else:
                save_png(rendered, png, text)
            record.png = _relative(png, run_dir)
            if record.png is None:
                record.extra["path"] = str(png.resolve())
            if rendered.value_range is not None and array.dtype.kind == "f":
                record.range = [float(rendered.value_range[0]),
                                float(rendered.value_range[1])]
            written.append(png)
    except (OSError, ValueError, CudumpError) as err:
        raise CommandError(f"dump: cannot write: {err}") from None
    ctx.debugger.record_dump(record)
    shape = ", ".join(str(d) for d in plan.shape)
    files = " and ".join(os.fspath(p) for p in written)
    ctx.say(f"arg{arg.index}: {plan.dtype} [{shape}], {plan.nbytes} bytes from "
            f"0x{plan.address:x} -> {files}")
    if plan.note:
        ctx.say(f"note: {plan.note}")
