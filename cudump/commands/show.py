"""`cudump show`: statistics of one snapshot, and optionally a PNG rendering of it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cudump.analysis.diff.metrics import channel_count
from cudump.analysis.flight import report_lines
from cudump.analysis.job_runs import node_runs, one_run, open_run
from cudump.analysis.job_timeline import write_timeline
from cudump.analysis.report.formats import fmt_num
from cudump.analysis.report.tables import (
    LS_HEADERS,
    LS_RIGHT,
    format_table,
    snapshot_rows,
    with_node_column,
)
from cudump.analysis.stats import is_any_run, no_snapshots, not_a_run
from cudump.commands import (
    RUN_METAVAR,
    HelpFormatter,
    add_kernel_option,
    add_launch_option,
    check_output_file,
    kernel_choice,
    launch_choice,
)
from cudump.errors import UsageError
from cudump.rundir import formats, reading
from cudump.rundir.flight import FlightFormatError, read_flight
from cudump.rundir.imaging import CHANNEL_NAMES, TooManyChannels, render, save_png
from cudump.rundir.job import is_job
from cudump.rundir.layout import FLIGHT_FILE, MANIFEST_FILE
from cudump.rundir.reading import NotThere
from cudump.rundir.runs import Run, Snapshot, is_run_dir, kernel_pattern, load_array
from cudump.rundir.summary import plural
from cudump.rundir.wheres import record_where

# The snapshot files show reads (rundir.formats): .npy/.png.
_SUFFIXES = "/".join(formats.suffixes())

EPILOG = f"""\
Choosing a snapshot:
  cudump show RUN --kernel 'cam::paint*' --arg 0 --phase after --occurrence 2
  cudump show RUN --launch 4242:7 --arg 1   (launch 7 of process 4242; --launch 7 in a run
                                             of one process)
  cudump show RUN --index 12           (the # column of `cudump ls RUN`)
  cudump show RUN/some_snapshot.npy    (or any {_SUFFIXES} file)
The criteria given must leave exactly one snapshot; otherwise the candidates are listed.
The kernel pattern may still be given after RUN without --kernel (deprecated: a note on
stderr says so). PATTERN is a glob matching the demangled name with or without its return type, the
name without its parameters (cam::paint<int>) or the bare name (paint); write *word* for a
substring, re:REGEX for a regular expression.

Rendering:
  --png out.png --range=-1:1 --channels r,g,b
Floats are mapped linearly over the range (default: finite min..max); NaN/Inf are drawn
magenta. Write negative ranges with '=' (--range=-1:1).
"""


@dataclass
class ChannelStats:
    label: str
    count: int
    minimum: float | None
    maximum: float | None
    mean: float | None
    std: float | None
    nan: int
    pos_inf: int
    neg_inf: int
    zeros: int


def stats_of(values: np.ndarray, label: str) -> ChannelStats:
    data = np.asarray(values)
    nan = pos_inf = neg_inf = 0
    if data.dtype.kind == "f":
        nan = int(np.isnan(data).sum())
        pos_inf = int(np.isposinf(data).sum())
        neg_inf = int(np.isneginf(data).sum())
        if nan or pos_inf or neg_inf:
            data = data[np.isfinite(data)]
    zeros = int(data.size - np.count_nonzero(data))
    if data.size == 0:
        return ChannelStats(label, 0, None, None, None, None, nan, pos_inf, neg_inf, 0)
    wide = data.astype(np.float64)
    return ChannelStats(label, int(values.size), float(wide.min()), float(wide.max()),
                        float(wide.mean()), float(wide.std()), nan, pos_inf, neg_inf, zeros)


def snapshot_stats(arr: np.ndarray) -> list[ChannelStats]:
    """Statistics of all elements, and of each channel when there are several."""
    out = [stats_of(arr, "all")]
    channels = channel_count(arr.shape)
    if channels > 1:
        for ch in range(channels):
            out.append(stats_of(arr[..., ch], f"ch {ch} ({CHANNEL_NAMES[ch]})"))
    return out


def parse_range(text: str | None) -> tuple[float, float] | None:
    if text is None or text == "auto":
        return None
    sep = ":" if ":" in text else ","
    parts = text.split(sep)
    try:
        lo, hi = (float(p) for p in parts)
    except ValueError:
        raise UsageError(f"--range wants LO:HI (e.g. 0:1 or =-1:1), not '{text}'") from None
    return lo, hi


class ShowCommand:
    name = "show"
    help = "Print statistics of one snapshot and optionally render it to PNG."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.formatter_class = HelpFormatter
        parser.epilog = EPILOG
        parser.add_argument("target", type=Path, metavar=RUN_METAVAR,
                            help=f"run directory, or a {_SUFFIXES} file")
        parser.add_argument("kernel", nargs="?", metavar="KERNEL-PATTERN",
                            help="deprecated: write --kernel PATTERN")
        add_kernel_option(parser, "kernel: a glob (cam::paint*), a kernel name, or re:REGEX")
        parser.add_argument("--arg", type=int, help="argument index")
        parser.add_argument("--phase", choices=("before", "after"), help="before or after")
        parser.add_argument("--occurrence", type=int, help="n-th launch of the kernel (from 1)")
        add_launch_option(parser, "process id (runs of several processes)")
        parser.add_argument("--index", type=int, help="manifest index (# in `cudump ls`)")
        parser.add_argument("--png", type=Path, metavar="FILE", help="render to this PNG")
        parser.add_argument("--force", action="store_true",
                            help="replace the --png (or --timeline) file if it exists "
                                 "(refused otherwise)")
        parser.add_argument("--range", metavar="LO:HI",
                            help="value range mapped to black..white (default: data min:max)")
        parser.add_argument("--channels", metavar="LIST",
                            help="channels to draw: 0 | 0,1,2 | r,g,b | a ...")
        parser.add_argument("--flight", action="store_true",
                            help="the flight recorder's account of the run (flight.jsonl, "
                                 "from cudump --flight): what was in flight when the program "
                                 "ended, and every launch it kept (--pid: of one process)")
        parser.add_argument("--timeline", type=Path, metavar="FILE",
                            help="write the launches of the run, or of every node of a job, "
                                 "as trace-event JSON (Perfetto) from their trace.jsonl "
                                 "(--trace): a track per node's process and stream, laid out "
                                 "by launch number, with the NaN/Inf reports")
        parser.add_argument("--node", metavar="NAME",
                            help="RUN a job directory (cudump --job): this node's run")

    def run(self, args: argparse.Namespace) -> int:
        if args.timeline is not None:
            check_output_file(args.timeline, "--timeline", args.force)
            source = (args.target if args.node is None
                      else one_run(args.target, args.node, "show"))
            written = write_timeline(source, args.timeline)
            print(f"wrote {written.path}: {plural(written.processes, 'process', 'processes')}"
                  f", {plural(written.launches, 'launch', 'launches')}, "
                  f"{plural(written.reports, 'NaN/Inf report')}")
            return 0
        if args.flight and is_job(args.target):
            for job_node in node_runs(args.target, args.node):
                print(f"node {job_node.name}: {job_node.run}")
                _show_flight(job_node.run, args.pid, missing_ok=True)
            return 0
        if args.flight:
            return _show_flight(one_run(args.target, args.node, "show"), args.pid)
        value_range = parse_range(args.range)
        snap, path = self._choose(args)
        if path is None:
            # A record of what the GPU found (a digest, a NaN/Inf report): no data.
            assert snap is not None
            if args.png is not None:
                raise UsageError(f"snapshot #{snap.index} holds no data to render (--png)")
            _print_record(snap)
            _print_finding(snap, snap.run_dir)
            return 0
        arr = load_array(path)
        if arr.dtype.kind not in "uifb":
            raise UsageError(f"{path}: holds {arr.dtype} data, not numbers; nothing to show")
        # Everything the options ask is checked (and the picture drawn) before a line of
        # statistics is printed: a bad option is one line of error, not a table and then one.
        drawn = None
        if args.png is not None:
            check_output_file(args.png, "--png", args.force)
            try:
                drawn = render(arr, value_range=value_range, channels=args.channels)
            except TooManyChannels as err:
                raise UsageError(f"{err}; choose up to 4 with --channels") from None
        if snap is not None:
            _print_record(snap)
        print(f"file: {path}")
        print(f"data: {arr.dtype} {list(arr.shape)}")
        rows = []
        for s in snapshot_stats(arr):
            rows.append([s.label, fmt_num(s.minimum), fmt_num(s.maximum), fmt_num(s.mean),
                         fmt_num(s.std), str(s.zeros), str(s.nan), str(s.pos_inf),
                         str(s.neg_inf)])
        headers = ["", "min", "max", "mean", "std", "zeros", "NaN", "+Inf", "-Inf"]
        for line in format_table(headers, rows, [False] + [True] * 8):
            print(line)
        if args.png is not None and drawn is not None:
            text = {"source": str(path)}
            if snap is not None:
                text.update(kernel=snap.record.kernel, arg=str(snap.record.arg),
                            phase=snap.record.phase)
            try:
                save_png(drawn, args.png, text)
            except OSError as err:
                raise UsageError(f"--png {args.png}: cannot write: {err.strerror or err}"
                                 ) from None
            how = ("values as stored" if drawn.value_range is None else
                   f"range {fmt_num(drawn.value_range[0])}..{fmt_num(drawn.value_range[1])}")
            print(f"wrote {args.png} ({drawn.image.mode}, {how}"
                  + "".join(f"; {n}" for n in drawn.notes) + ")")
        return 0

    def _choose(self, args: argparse.Namespace) -> tuple[Snapshot | None, Path | None]:
        """The snapshot and its file; no file for a digest or a NaN/Inf report."""
        target: Path = args.target
        if reading.is_regular(target):
            return _record_for_file(target), target
        job = is_job(target)
        if reading.is_folder(target) and not job and not is_any_run(target):
            raise UsageError(not_a_run(target))
        if not job and not is_any_run(target):
            raise UsageError(f"{reading.shown(target)} is neither a snapshot file nor a run "
                             "directory")
        pattern = kernel_pattern(kernel_choice(args, "show"))
        launch, pid = launch_choice(args)
        if not job and not is_run_dir(one_run(target, args.node, "show")):
            raise UsageError(no_snapshots(target))
        run = open_run(target, args.node)
        found = run.select(pattern, arg=args.arg, phase=args.phase,
                           occurrence=args.occurrence, launch=launch, pid=pid,
                           index=args.index)
        if not found and args.index is not None and not 0 <= args.index < len(run.snapshots):
            raise UsageError(f"--index {args.index}: {target} has snapshots #0 to "
                             f"#{len(run.snapshots) - 1}" if run.snapshots else
                             f"--index {args.index}: {target} has no snapshots")
        if not found:
            raise UsageError("no snapshot matches; `cudump ls RUN` lists them")
        if len(found) > 1:
            headers, right, rows = LS_HEADERS, LS_RIGHT, snapshot_rows(found[:20])
            if job:
                headers, right, rows = with_node_column(found[:20], headers, right, rows)
            for line in format_table(headers, rows, right):
                print(line)
            more = " (first 20 listed)" if len(found) > 20 else ""
            nodes = ", --node" if job and len({s.job_node for s in found}) > 1 else ""
            raise UsageError(f"{len(found)} snapshots match{more}; narrow with --arg, "
                             f"--phase, --occurrence{nodes} or --index")
        snap = found[0]
        if snap.path is None and snap.ok and (snap.digest_only or snap.report_only):
            return snap, None
        if snap.path is None:
            what = "was not captured" if not snap.captured else "cannot be read"
            raise UsageError(f"snapshot #{snap.index} {what}: {snap.problem or 'no file'}")
        return snap, snap.path


def _show_flight(run_dir: Path, pid: int | None, missing_ok: bool = False) -> int:
    """The report of each process the flight recorder kept launches of, and the launches
    (`missing_ok`: a job's node without flight.jsonl says so and is passed over)."""
    try:
        log = read_flight(run_dir)
    except NotThere:
        if missing_ok:
            print(f"no {FLIGHT_FILE}: the node's run was not made with --flight")
            return 0
        raise UsageError(f"{run_dir} has no {FLIGHT_FILE}: the run was not made with --flight"
                         ) from None
    except FlightFormatError as err:
        raise UsageError(str(err)) from None
    procs = [proc for proc in log.processes if pid is None or proc.pid == pid]
    if not procs and missing_ok:
        return 0
    if not procs:
        raise UsageError(f"{run_dir / FLIGHT_FILE} holds no process {pid}")
    several = len(log.processes) > 1
    for proc in procs:
        launches = log.of(proc.pid)
        for line in report_lines(proc, launches, f"process {proc.pid}: " if several else ""):
            print(line)
        rows = [[str(x.launch), x.status + (" (named)" if x.culprit else ""), x.stream,
                 str(x.thread), x.kernel if x.graph is None else f"graph {x.graph}"]
                for x in launches]
        headers = ["launch", "status", "stream", "thread", "kernel"]
        right = [True, False, False, True, False]
        if any(x.where for x in launches):   # where each was made, in the program's terms
            headers, right = headers + ["where"], right + [False]
            rows = [row + [x.where.text() or "-"] for row, x in zip(rows, launches, strict=True)]
        for line in format_table(headers, rows, right):
            print(line)
        print(f"{proc.kept} of the {proc.recorded} launches of process {proc.pid} kept "
              f"(--flight {proc.slots})")
    return 0


def _print_record(snap: Snapshot) -> None:
    r = snap.record
    node = f" (node {snap.job_node})" if snap.job_node is not None else ""
    print(f"snapshot #{snap.index}{node}: {r.kernel}")
    print(f"  launch {r.launch}, occurrence {r.occurrence}, arg {r.arg}"
          f"{f' ({r.type})' if r.type else ''}, {r.phase}")
    print(f"  pid {r.pid}, grid {r.grid}, block {r.block}, stream {r.stream}, "
          f"address {r.address}")
    where = record_where(r.extra)
    if where:
        print(f"  {where.text(r.rank)}")


def _print_finding(snap: Snapshot, run_dir: Path) -> None:
    """What a digest or NaN/Inf record says (it holds no data), and where data of that buffer
    is, if the run kept some."""
    r = snap.record
    data = (f"{r.dtype} {list(r.shape)}" if r.dtype is not None and r.shape is not None
            else "the buffer")
    if snap.digest_only:
        d = snap.digest
        assert d is not None
        rows = f", {d.rows} rows of {d.row_bytes} bytes" if d.rows and d.rows > 1 else ""
        print(f"digest {d.value} ({d.algorithm}) of {d.bytes} bytes{rows}: {data}")
        print("no data: the GPU digested the buffer and kept no bytes (a rule with "
              "format: npy on that launch keeps them)")
        return
    report = snap.nan_report
    assert report is not None
    before = r.extra.get("nonfinite_before")
    since = " (none before the launch)" if before == 0 else ""
    print(f"{report.describe()}{since}: {data}, as the launch left it")
    if report.origin_text():
        print(report.origin_text())
    kept = [s for s in Run.open(run_dir).select(pid=r.pid, launch=r.launch, arg=r.arg,
                                                phase=r.phase)
            if s.path is not None and s.record.extra.get("offset") == r.extra.get("offset")]
    if kept:
        print(f"its data: snapshot #{kept[0].index} ({kept[0].record.file}): cudump show "
              f"{run_dir} --index {kept[0].index}")
    else:
        print("no data: the scan ran on the GPU; the run kept no snapshot of this buffer")


def _record_for_file(path: Path) -> Snapshot | None:
    """The manifest record of a file inside a run directory (looked for up to two levels up)."""
    for parent in list(path.resolve().parents)[:3]:
        if reading.is_regular(parent / MANIFEST_FILE):
            try:
                return Run.open(parent).by_file(path)
            except Exception:  # noqa: BLE001 - the file is still worth showing without it
                return None
    return None
