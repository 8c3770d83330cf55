"""`cudump replay RUN`: run one captured launch again, alone, and compare what it writes."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from cudump.analysis.diff.arrays import compare_arrays
from cudump.analysis.diff.metrics import Metrics, Tolerance
from cudump.analysis.outputs import output_dir
from cudump.analysis.replay import (
    Capture,
    ReplayError,
    ReplayTrouble,
    launch_spec,
    load_snapshots,
    read_captures,
    read_image,
    replay_notes,
    select_capture,
)
from cudump.analysis.replay_engine import Buffer, LaunchSpec, Replayer, bit_equal
from cudump.analysis.report.formats import fmt_count, fmt_num, fmt_share, fmt_tol, fmt_where
from cudump.analysis.transplant.outcome import injection_lines
from cudump.analysis.transplant.replayed import transplant
from cudump.commands import (
    RUN_METAVAR,
    HelpFormatter,
    add_kernel_option,
    add_launch_option,
    kernel_choice,
    launch_choice,
)
from cudump.errors import DiffTrouble
from cudump.kernels.pattern import name_forms
from cudump.rundir import files as runfiles
from cudump.rundir.layout import MANIFEST_FILE
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord
from cudump.rundir.runs import kernel_pattern

EPILOG = """\
Runs the captured launch in this process, with cuda-python: loads the module image the run
saved (or --ptx/--cubin FILE instead), allocates and fills every buffer from its "before"
snapshot (two pointers into one allocation still point into one buffer), patches the
parameter bytes to the new addresses, launches with the captured grid, block and shared
memory, and compares every buffer with its "after" snapshot as `cudump diff` would.

With --inputs-from RUN, RUN's "before" snapshots of the same launch (its launch number,
and the same kernel) are the inputs instead, and every buffer is compared with RUN's
"after" snapshot: a launch whose outputs then equal RUN's got its difference through its
inputs (RUN:LAUNCH takes another launch of RUN, RUN:PID_OR_RANK:LAUNCH one of its
processes).

Capture launches with `cudump --capture-launch PATTERN PROGRAM` or a rule with
`replay: true`; `cudump extract` writes one as a folder that runs without cudump.

Exit status: 0 every buffer equal within tolerance (and, with --runs, every run the same),
1 a difference, 2 trouble (one-line reason on stderr).
"""


class ReplayCommand:
    name = "replay"
    help = "Run one captured kernel launch again on its captured inputs and compare."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.formatter_class = HelpFormatter
        parser.epilog = EPILOG
        add_selection(parser)
        parser.add_argument("--runs", type=int, default=1, metavar="N",
                            help="replay N times; runs that differ from the first show "
                                 "nondeterminism (default 1)")
        code = parser.add_mutually_exclusive_group()
        code.add_argument("--ptx", type=Path, metavar="FILE",
                          help="run the kernel from this PTX instead of the captured image")
        code.add_argument("--cubin", type=Path, metavar="FILE",
                          help="run the kernel from this cubin (or fatbin) instead")
        parser.add_argument("--inputs-from", metavar="RUN",
                            help="replay on the inputs another run recorded for this launch "
                                 "(its 'before' snapshots) and compare with that run's "
                                 "'after' snapshots")
        parser.add_argument("--out", type=Path, metavar="DIR",
                            help="write the replay's buffers as a run (before and after) that "
                                 "cudump diff and its HTML report read")
        parser.add_argument("--device", type=int, default=0, metavar="N",
                            help="GPU ordinal to replay on (default 0)")
        parser.add_argument("--atol", type=float, default=0.0,
                            help="absolute tolerance (default 0)")
        parser.add_argument("--rtol", type=float, default=0.0,
                            help="relative tolerance, times |captured| (default 0)")

    def run(self, args: argparse.Namespace) -> int:
        tol = Tolerance(args.atol, args.rtol)
        if args.runs < 1:
            raise ReplayTrouble(f"--runs must be 1 or more, not {args.runs}")
        run_dir = Path(args.run)
        capture = choose(run_dir, args)
        code = args.ptx or args.cubin
        if code is None and capture.problems:
            raise ReplayTrouble(f"{capture.describe()} cannot be replayed: "
                                f"{capture.problems[0]}")
        blocking = [x for x in capture.problems if not x.startswith("no module image")]
        if blocking:
            raise ReplayTrouble(f"{capture.describe()} cannot be replayed: {blocking[0]}")
        fmt = "ptx" if args.ptx else ("cubin" if args.cubin else None)
        spec = launch_spec(capture, str(code) if code else None, fmt)
        image = read_image(run_dir, capture, code)
        for note in replay_notes(capture, image):
            print(f"replay: note: {note}")
        before = load_snapshots(run_dir, spec, "before")
        after = load_snapshots(run_dir, spec, "after")
        moved = None
        if args.inputs_from is not None:
            moved = transplant(args.inputs_from, capture, spec, before)
            before = moved.before
            for note in moved.notes:
                print(f"replay: note: {note}")
        if args.out is not None:
            try:
                output_dir(args.out, "--out")
            except DiffTrouble as err:
                raise ReplayTrouble(str(err)) from None
            if os.path.lexists(args.out / MANIFEST_FILE):   # a dangling symlink too
                raise ReplayTrouble(f"--out {args.out} already holds a run; give a new or "
                                    "empty directory")
        try:
            with Replayer(spec, image, args.device) as replayer:
                print(f"replay: {capture.describe()} on GPU {args.device} "
                      f"({replayer.device_name}), code from {code or capture.record.image}")
                results = [replayer.run(list(before)) for _ in range(args.runs)]
        except ReplayError as err:
            raise ReplayTrouble(str(err)) from None
        if moved is not None:
            record = moved.record(capture, spec, results[0], tol)
            for line in injection_lines(record, "replay"):
                print(line)
            status = int(any(o.status != "equal" for o in record.outputs))
        else:
            status = report(spec, after, results[0], tol)
        status = max(status, report_runs(spec, results))
        if args.out is not None:
            write_run(args.out, capture, spec, before, results[0])
            print(f"replay: wrote {args.out} (cudump diff {args.run} {args.out} --kernel "
                  f"'{name_forms(capture.kernel)[2]}' compares it)")
        return status


def add_selection(parser: argparse.ArgumentParser) -> None:
    """The arguments that pick one captured launch (replay and extract share them)."""
    parser.add_argument("run", metavar=RUN_METAVAR, help="a run directory with captured launches")
    parser.add_argument("kernel", metavar="KERNEL-PATTERN", nargs="?",
                        help="deprecated: write --kernel PATTERN")
    add_kernel_option(parser, "the first captured launch of a kernel matching PATTERN (glob, "
                              "bare name, or re:REGEX)")
    add_launch_option(parser, "in this process (a run may hold several)")
    parser.add_argument("--occurrence", type=int, metavar="K",
                        help="its K-th launch of the kernel")


def choose(run_dir: Path, args: argparse.Namespace, command: str = "replay") -> Capture:
    """The captured launch the options name; `command` prefixes what is said about it."""
    pattern = kernel_choice(args, command)
    launch, pid = launch_choice(args)
    if not run_dir.is_dir():
        raise ReplayTrouble(f"{run_dir}: no such run directory")
    captures = read_captures(run_dir)
    capture, count = select_capture(captures, launch, pid, kernel_pattern(pattern),
                                    args.occurrence)
    if count > 1:
        print(f"{command}: {count} captured launches match; taking the first, launch "
              f"{capture.launch} (choose one with --launch [PID:]N)")
    return capture


def _difference(m: Metrics, tol: Tolerance) -> str:
    if m.pixels_differing is not None:
        pixels = m.elements // m.channels
        what = (f"{fmt_count(m.pixels_differing)} of {fmt_count(pixels)} pixels "
                f"({fmt_share(m.pixels_differing / pixels if pixels else 0.0)})")
    else:
        what = (f"{fmt_count(m.differing)} of {fmt_count(m.elements)} elements "
                f"({fmt_share(m.share)})")
    text = f"{what} differ [{fmt_tol(tol)}]"
    if m.max_index is not None:
        text += (f"; largest difference {fmt_num(m.max_abs)} at {fmt_where(m.max_index)} "
                 f"(captured {fmt_num(m.a_at_max)}, replayed {fmt_num(m.b_at_max)})")
    if m.nonfinite_mismatch:
        text += f"; NaN/Inf disagree in {fmt_count(m.nonfinite_mismatch)}"
    return text


def report(spec: LaunchSpec, after: list[np.ndarray | None], got: list[np.ndarray],
           tol: Tolerance) -> int:
    """One line per buffer with a captured "after": equal, or how it differs."""
    status, compared, different = 0, 0, 0
    for buffer, want, have in zip(spec.buffers, after, got, strict=True):
        if want is None:
            continue
        compared += 1
        metrics = compare_arrays(want, have, tol)   # both of the buffer's dtype and shape
        if metrics.equal:
            print(f"{buffer.describe()}: equal to the captured after")
            continue
        status, different = 1, different + 1
        print(f"{buffer.describe()}: {_difference(metrics, tol)}")
    if compared == 0:
        print("replay: no buffer has a captured after to compare with")
    elif different:
        print(f"replay: {different} of {compared} buffers differ from the capture")
    else:
        print(f"replay: all {compared} buffers equal to the capture")
    return status


def report_runs(spec: LaunchSpec, results: list[list[np.ndarray]]) -> int:
    """With --runs: the runs that differ from the first, buffer by buffer."""
    if len(results) < 2:
        return 0
    status = 0
    for number, later in enumerate(results[1:], 2):
        for buffer, first, other in zip(spec.buffers, results[0], later, strict=True):
            if not bit_equal(first, other):
                status = 1
                print(f"run {number} differs from run 1 in {buffer.label}: the kernel is not "
                      "deterministic on these inputs")
    if status == 0:
        print(f"replay: all {len(results)} runs wrote the same bytes")
    return status


def write_run(out: Path, capture: Capture, spec: LaunchSpec, before: list[np.ndarray | None],
              after: list[np.ndarray]) -> None:
    """The replay as a run: each buffer before (as captured) and after (as replayed).

    Every file is created new (runfiles): anything already under one of its names, a
    symlink included, is one line of trouble before anything is written."""
    files = [(_record(capture, buffer, phase, array), array)
             for buffer, first, last in zip(spec.buffers, before, after, strict=True)
             for phase, array in (("before", first), ("after", last)) if array is not None]
    taken = [r.file for r, _ in files if r.file and os.path.lexists(out / r.file)]
    if taken:
        raise ReplayTrouble(f"--out {out} already has {taken[0]}; give a new or empty "
                            "directory")
    try:
        manifest = ManifestWriter(out)
        try:
            for record, array in files:
                assert record.file is not None
                with runfiles.create_file(out / record.file) as f:
                    np.save(f, np.asarray(array))
                manifest.append(record)
        finally:
            manifest.close()
    except OSError as err:
        what = Path(err.filename).name if err.filename else "its files"
        raise ReplayTrouble(f"--out {out}: cannot write {what}: {err.strerror or err}") from None


def _record(capture: Capture, buffer: Buffer, phase: str, array: np.ndarray) -> SnapshotRecord:
    d = capture.record
    inside = f"-off{buffer.offset}" if buffer.offset else ""
    record = SnapshotRecord(
        kernel=capture.kernel, mangled=d.mangled, launch=capture.launch,
        occurrence=capture.occurrence, pid=capture.pid, grid=list(d.grid),
        block=list(d.block), stream=d.stream if d.stream is not None else "0x0", arg=buffer.arg,
        type=None,
        phase=phase, address="", dtype=str(array.dtype), shape=list(array.shape),
        file=f"{capture.launch:06d}-{capture.pid}-replay-arg{buffer.arg}{inside}-{phase}.npy",
        device=None)
    record.extra["replay"] = True
    if buffer.offset:
        record.extra["offset"] = buffer.offset
    return record
