"""`cudump [options] [--] PROGRAM [ARGS...]`: run a program under the shim."""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
from pathlib import Path

from cudump.analysis.transplant.donor import Donor, load_donor, parse_spec
from cudump.commands import SUBCOMMANDS, USAGE, check_output_file
from cudump.commands.run_values import error_exitcode, flight_slots, ring_slots, step_range, whole
from cudump.controller.options import (
    DEFAULT_FLIGHT,
    DEFAULT_SCRATCH,
    DEFAULT_WRITE_BEHIND,
    TRACE_RING_SLOTS,
    RunOptions,
)
from cudump.controller.session import RunPrompt, Session, default_run_dir
from cudump.errors import UsageError
from cudump.policy.rules import (
    MAX_COUNT,
    MAX_SKIP,
    LaunchChoice,
    capture_rule,
    digest_rule,
    load_rules,
    scan_rule,
)
from cudump.policy.snapshot.windows import DEFAULT_THEN, DEFAULT_WINDOW, MAX_WINDOW, THEN_CHOICES
from cudump.prompt.batch_file import load_batch
from cudump.rundir import files as runfiles
from cudump.rundir import ownership
from cudump.rundir.job import JobError, claim_node, node_name
from cudump.rundir.layout import RUN_FILES
from cudump.rundir.ownership import Ownership
from cudump.sizes import size_arg
from cudump.wire.protocol import MAX_FLIGHT

MAX_STAGING = 64 << 30


class RunCommand:
    name = "run"
    help = ("Run a CUDA program under cudump: trace its launches, snapshot kernel "
            "argument buffers, or stop at kernel launches and inspect them. "
            f"Subcommands: {', '.join(SUBCOMMANDS)} (cudump SUBCOMMAND --help).")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--trace", action="store_true",
                            help="print one line per kernel launch (and graph launch) on stderr")
        parser.add_argument("--layers", action="store_true",
                            help="name each launch's layer, step and line of the program: "
                                 "PyTorch modules' forward and backward (by their path in "
                                 "the model, e.g. layer3.0.conv1) and optimizer steps, with "
                                 "no change to the program (a sitecustomize first on its "
                                 "PYTHONPATH, which runs the program's own after it); JAX "
                                 "operations behind XLA's kernels (XLA dumps its modules into "
                                 "the run directory's xla/); the line of the program's own "
                                 "Python code behind each launch")
        parser.add_argument("--module-outputs", action="store_true",
                            help="with --layers (which it implies): record each PyTorch "
                                 "module's returned tensors (address, size, type) in "
                                 "outputs.jsonl, so that `cudump diff` and `bisect` compare "
                                 "two implementations of a module by exactly what it handed "
                                 "on (bisect --layers does this itself)")
        parser.add_argument("--timeline", type=Path, metavar="FILE",
                            help="write the run as trace-event JSON (Perfetto, "
                                 "chrome://tracing): a track per process, host thread and "
                                 "stream, a slice per launch, snapshots, stops and NaN/Inf "
                                 "reports as instants; written at the end of the run (an "
                                 "existing FILE is refused unless --force)")
        parser.add_argument("--force", action="store_true",
                            help="replace the --timeline FILE if it exists")
        parser.add_argument("--out", type=Path, metavar="DIR",
                            help="run directory (default: a fresh cudump-out/<n>/); one "
                                 "that holds a run, that another run is writing, or a "
                                 "symlink is refused")
        parser.add_argument("--job", type=Path, metavar="JOB",
                            help="write the run as one node of a job of many nodes: into "
                                 "JOB/nodes/NODE/ (JOB on storage every node shares; not "
                                 "with --out); snapshots' bytes are stored once in JOB/blobs/, "
                                 "and a node that fails or finds NaN/Inf has every node's "
                                 "--flight recorder written")
        parser.add_argument("--node", metavar="NAME",
                            help="with --job: this node's name (default: $CUDUMP_NODE, the "
                                 "launcher's name or number for the node, else the host name)")
        parser.add_argument("--rule", action="append", type=Path, default=[], metavar="FILE",
                            help="YAML rule file naming the kernels and arguments to snapshot "
                                 "(repeatable)")
        parser.add_argument("--digest", action="store_true",
                            help="record a GPU content digest of every buffer of every kernel, "
                                 "before and after each launch, instead of copying it "
                                 "(cudump diff of two such runs names the first launch "
                                 "that differs)")
        parser.add_argument("--check-nan", action="store_true",
                            help="scan the floating-point buffers of every kernel for NaN/Inf "
                                 "on the GPU before and after each launch; report each launch "
                                 "that leaves some where there were none, and snapshot the "
                                 "first of each kernel")
        parser.add_argument("--watch-nan", action="store_true",
                            help="NaN/Inf detection meant to stay on: the floating-point "
                                 "buffers --check-nan scans, each launch only marking its "
                                 "own, scanned together by one launch of cudump's kernel at "
                                 "the program's synchronizations and every "
                                 "--watch-nan-window launches; a finding names its producer "
                                 "exactly where one launch of the window touched the buffer, "
                                 "else the window's launches that did")
        parser.add_argument("--watch-nan-window", type=whole("--watch-nan-window", 1,
                                                              MAX_WINDOW),
                            default=DEFAULT_WINDOW, metavar="N",
                            help=f"with --watch-nan: launches a window holds at most "
                                 f"(default {DEFAULT_WINDOW})")
        parser.add_argument("--watch-nan-then", choices=sorted(THEN_CHOICES),
                            default=DEFAULT_THEN,
                            help="with --watch-nan, after a finding: 'exact' scans every "
                                 "launch from then on as --check-nan does, so that a NaN/Inf "
                                 "that comes again is named at its launch and its producer "
                                 "snapshotted (default); 'stop' ends the program; 'go-on' "
                                 "goes on in windows")
        parser.add_argument("--break-on-nan", action="store_true",
                            help="with --check-nan (implied): stop at the first launch that "
                                 "leaves NaN/Inf where there was none, once it has run, and "
                                 "open the prompt")
        parser.add_argument("--capture-launch", action="append", default=[],
                            metavar="PATTERN",
                            help="capture every launch of kernels matching PATTERN for "
                                 "`cudump replay`: the module image, the parameters and every "
                                 "buffer before and after (repeatable; a rule file's "
                                 "'replay: true' and count: choose launches more finely)")
        parser.add_argument("-k", "--kernel-name", action="append", default=[],
                            metavar="PATTERN",
                            help="as Nsight Compute's: --digest and --check-nan (and "
                                 "--break-on-nan) take only kernels matching PATTERN (a kernel "
                                 "pattern: glob, re:REGEX or regex:REGEX; once)")
        parser.add_argument("--launch-skip", type=whole("--launch-skip", 0, MAX_SKIP),
                            default=0, metavar="N",
                            help="as Nsight Compute's: --digest, --check-nan and "
                                 "--capture-launch pass over the first N launches their "
                                 "kernels match, counted in each process")
        parser.add_argument("--launch-count", type=whole("--launch-count", 1, MAX_COUNT),
                            metavar="N",
                            help="as Nsight Compute's: --digest, --check-nan and "
                                 "--capture-launch take N launches at most (after "
                                 "--launch-skip), in each process")
        parser.add_argument("--break", dest="breaks", action="append", default=[],
                            metavar="PATTERN",
                            help="stop at launches of kernels matching PATTERN and open the "
                                 "prompt (repeatable; 'PATTERN if EXPR' for a condition)")
        parser.add_argument("--inject", action="append", default=[], metavar="RUN:LAUNCH",
                            help="run launch LAUNCH (its number in its process, as `cudump "
                                 "ls` shows it) on the inputs run directory RUN recorded for "
                                 "it: its 'before' snapshots are written into the launch's "
                                 "buffers while it is held, and what it leaves is compared "
                                 "with RUN's 'after' snapshots (repeatable; "
                                 "RUN:PID_OR_RANK:LAUNCH picks one of RUN's processes). A "
                                 "launch of another kernel, or buffers of other sizes, are "
                                 "left untouched")
        parser.add_argument("--batch", "-x", type=Path, metavar="FILE",
                            help="run prompt commands from FILE instead of the terminal "
                                 "(read once and checked before the program starts; a pipe "
                                 "or <(...) will do)")
        # Options that tune speed and memory, not what is recorded: `--help` shows them apart.
        tuning = parser.add_argument_group(
            "tuning", "speed and memory use of the run; what it records is the same "
            "(except as --staging says)")
        tuning.add_argument("--trace-ring", type=ring_slots, default=TRACE_RING_SLOTS,
                            metavar="SLOTS",
                            help=f"events each process's trace ring holds (a power of two, "
                                 f"default {TRACE_RING_SLOTS}); a launch waits while it is full")
        parser.add_argument("--max-bytes", type=size_arg(1), metavar="SIZE",
                            help="stop taking snapshots once this much has been planned "
                                 "(e.g. 2G; default: half the disk space free where the run "
                                 "directory is, at the start); the program carries on")
        tuning.add_argument("--staging", type=size_arg(4096, MAX_STAGING), default=256 << 20,
                            metavar="SIZE",
                            help="shared staging area per process (default 256M) that "
                                 "snapshot copies pass through: larger buffers are streamed "
                                 "through it in pieces, so it tunes speed, not what can be "
                                 "snapshotted (except inside a CUDA graph, where a buffer is "
                                 "copied whole); also the largest read at the prompt")
        tuning.add_argument("--scratch", type=size_arg(0, MAX_STAGING), default=DEFAULT_SCRATCH,
                            metavar="SIZE",
                            help="device memory a process may lend its snapshot copies "
                                 "(default 1G, never more than a quarter of what is free): "
                                 "the launch is held only for a copy into it, and the bytes "
                                 "reach the files while the program runs on; 0 turns it off")
        tuning.add_argument("--write-behind", type=size_arg(0, MAX_STAGING),
                            default=DEFAULT_WRITE_BEHIND, metavar="SIZE",
                            help="host memory a process may pin for those copies while their "
                                 "files are written (default 2G, never more than a quarter of "
                                 "the memory available): a program that waits for the GPU "
                                 "waits only until the bytes are there, where a crash cannot "
                                 "take them; prepared in the background from the start, under "
                                 "snapshot rules only; 0 turns it off")
        tuning.add_argument("--scans-ahead", action=argparse.BooleanOptionalAction,
                            default=True,
                            help="under --digest, --check-nan and digest rules, make each "
                                 "launch's scans before it with the scans after the launch "
                                 "before it, where that one came next last time (used only if "
                                 "nothing came between the two): on by default; "
                                 "--no-scans-ahead scans before each launch by itself")
        tuning.add_argument("--hand-off", action=argparse.BooleanOptionalAction, default=True,
                            help="under --digest, --check-nan and digest rules, have a thread "
                                 "of cudump's launch its kernel after each launch while the "
                                 "program goes on, instead of the program's thread, where "
                                 "that is found faster (tried both ways every so many "
                                 "launches): on by default; --no-hand-off keeps it on the "
                                 "program's thread (the launcher spins a core while the "
                                 "program launches)")
        parser.add_argument("--flight", type=flight_slots, nargs="?", const=DEFAULT_FLIGHT,
                            default=0, metavar="N",
                            help=f"flight recorder: keep the last N launches of each process "
                                 f"(default {DEFAULT_FLIGHT}, at most {MAX_FLIGHT}) with their "
                                 "arguments and whether each completed on the GPU; when the "
                                 "program fails (non-zero exit, signal, CUDA error) say which "
                                 "launch was the last to complete and which were in flight, "
                                 "naming the likely culprit; always written to flight.jsonl")
        parser.add_argument("--step-range", type=step_range, metavar="NAME",
                            help="count training steps by an NVTX range: each push of a "
                                 "range named NAME begins the next step (step 0 at the "
                                 "first), which the trace, reports and records name")
        parser.add_argument("--error-exitcode", type=error_exitcode, default=0, metavar="N",
                            help="exit with status N (1 to 255) instead of the program's when "
                                 "cudump finds something: a buffer turned NaN/Inf "
                                 "(--check-nan), a launch the flight recorder names "
                                 "(--flight), an --inject output that differs; otherwise "
                                 "the program's own status (as compute-sanitizer's option)")
        parser.add_argument("program", metavar="PROGRAM", nargs="?", help="the program to run")
        parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                            help="its arguments")

    @staticmethod
    def normalize(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
        """`--flight` followed by something that is not a number (the program, another
        option) takes its default: argparse would take the program for its value."""
        takes_value = {name for name, action in parser._option_string_actions.items()
                       if action.nargs != 0 and name != "--flight"}
        out: list[str] = []
        i = 0
        while i < len(argv):
            word = argv[i]
            if word == "--flight" and not (i + 1 < len(argv) and argv[i + 1].isdigit()):
                out.append(f"--flight={DEFAULT_FLIGHT}")
            elif word == "--" or not word.startswith("-"):
                break           # the program and its arguments are the program's
            elif word in takes_value:
                out += argv[i:i + 2]
                i += 1
            else:
                out.append(word)
            i += 1
        return out + argv[i:]

    def run(self, args: argparse.Namespace) -> int:
        if not args.program:
            raise UsageError(f"no program given; {USAGE}")
        # Rules and breakpoints are checked before anything runs.
        rules = load_rules(args.rule) if args.rule else []
        choice = _launch_choice(args)
        if args.digest:
            rules.append(digest_rule(choice))
        if args.check_nan or args.break_on_nan or args.watch_nan:
            rules.append(scan_rule(choice))
        if args.watch_nan and (args.check_nan or args.break_on_nan):
            raise UsageError("--watch-nan is the stay-on form of --check-nan: give one of "
                             "them (--break-on-nan stops at each launch's scans)")
        for pattern in args.capture_launch:
            rules.append(capture_rule(pattern, choice))
        from cudump.policy.breakpoints import BreakpointError, parse_break_spec

        for spec in args.breaks:
            try:
                parse_break_spec(spec)
            except BreakpointError as err:
                raise UsageError(f"--break {spec}: {err}") from None
        # Read once, now (a FIFO or <(...) cannot be read again) and checked whole.
        batch = load_batch(args.batch) if args.batch is not None else None
        donors = _donors(args.inject)
        if donors and (args.breaks or batch is not None or args.break_on_nan
                       or any(r.is_break for r in rules)):
            raise UsageError("--inject runs without the prompt: leave out --break, --batch, "
                             "--break-on-nan and rules with 'action: break'")
        if args.timeline is not None:
            check_output_file(args.timeline, "--timeline", args.force)
        run_dir, owner, created = _run_dir(args.out, args.job, args.node)
        try:
            max_bytes = (args.max_bytes if args.max_bytes is not None
                         else default_budget(run_dir))
            # --layers, or CUDUMP_LAYERS=1 where cudump is started by another tool (bisect)
            outputs = args.module_outputs or os.environ.get("CUDUMP_MODULE_OUTPUTS") == "1"
            layers = args.layers or outputs or os.environ.get("CUDUMP_LAYERS") == "1"
            options = RunOptions(argv=[args.program, *args.args], run_dir=run_dir,
                                 trace=args.trace, layers=layers, module_outputs=outputs,
                                 rules=rules,
                                 max_bytes=max_bytes,
                                 max_bytes_default=args.max_bytes is None,
                                 staging_bytes=args.staging, scratch_bytes=args.scratch,
                                 write_behind_bytes=args.write_behind,
                                 breaks=list(args.breaks),
                                 batch=batch, ring_slots=args.trace_ring,
                                 break_on_nan=args.break_on_nan, timeline=args.timeline,
                                 injections=donors, flight_slots=args.flight,
                                 scans_ahead=args.scans_ahead, hand_off=args.hand_off,
                                 error_exitcode=args.error_exitcode,
                                 step_range=args.step_range, job=args.job,
                                 watch_nan=args.watch_nan,
                                 watch_window=args.watch_nan_window,
                                 watch_then=args.watch_nan_then)
            return Session(options, load_prompt).run()
        finally:
            owner.release()
            _remove_if_empty(run_dir, created)


def _launch_choice(args: argparse.Namespace) -> LaunchChoice:
    """-k/--kernel-name, --launch-skip and --launch-count, checked: they choose the launches
    of --digest, --check-nan (--break-on-nan) and --capture-launch, so one of those must
    be given (-k: --digest or --check-nan, since --capture-launch names its own kernels)."""
    if len(args.kernel_name) > 1:
        raise UsageError("-k/--kernel-name given more than once; one pattern names the "
                         "kernels (write 'regex:A|B' for several)")
    choice = LaunchChoice(args.kernel_name[0] if args.kernel_name else None,
                          args.launch_skip, args.launch_count)
    scans = args.digest or args.check_nan or args.break_on_nan or args.watch_nan
    if choice.kernel is not None and not scans:
        raise UsageError("-k/--kernel-name chooses the kernels of --digest and --check-nan: "
                         "give one of them (--capture-launch and --break take a pattern "
                         "of their own)")
    if choice.narrows and not (scans or args.capture_launch):
        raise UsageError("--launch-skip and --launch-count choose the launches of --digest, "
                         "--check-nan and --capture-launch: give one of them (a rule file "
                         "has skip: and count:)")
    return choice



def load_prompt() -> RunPrompt:
    """The prompt, for a debugged run: loaded (with prompt_toolkit, where stdin is a terminal)
    only when one is wanted, and handed to the controller, which lies below it."""
    from cudump.prompt import run_prompt

    if sys.stdin.isatty():
        import prompt_toolkit  # noqa: F401
    return run_prompt


def _run_dir(out: Path | None, job: Path | None = None,
             node: str | None = None) -> tuple[Path, Ownership, bool]:
    """The run directory, held by this run (rundir.ownership), and whether this run made
    it: --out DIR, --job JOB's JOB/nodes/NODE/, or a fresh cudump-out/<n>/."""
    if job is not None and out is not None:
        raise UsageError("--job and --out exclude each other: under --job the run is written "
                         "to JOB/nodes/NODE/")
    if node is not None and job is None:
        raise UsageError("--node names this node of a --job; give --job JOB")
    if job is not None:
        try:
            claimed = claim_node(job, node_name(os.environ, node))
        except JobError as err:
            raise UsageError(str(err)) from None
        run_dir, owner, _ = _prepare_out(claimed)
        return run_dir, owner, True
    if out is not None:
        return _prepare_out(out)
    base = Path("cudump-out")
    if os.path.islink(base):
        raise UsageError(f"{base} is a symlink; cudump does not write through symlinks "
                         "(give --out DIR)")
    try:
        run_dir, owner = default_run_dir(base)
    except OSError as err:
        raise UsageError(f"cannot create a run directory in {base}: "
                         f"{err.strerror or err} (give --out DIR)") from None
    return run_dir, owner, True


def _donors(specs: list[str]) -> list[Donor]:
    """--inject RUN:LAUNCH ...: each read and checked (UsageError before anything runs)."""
    donors = [load_donor(parse_spec(text)) for text in specs]
    seen: dict[tuple[int, int | None, int], str] = {}
    for donor in donors:
        key = (donor.launch, donor.rank, donor.position if donor.rank is None else 0)
        if key in seen:
            raise UsageError(f"--inject {seen[key]} and --inject {donor.spec.text} would both "
                             f"write into launch {donor.launch} of one process")
        seen[key] = donor.spec.text
    return donors


def default_budget(run_dir: Path) -> int:
    """What a run may write without --max-bytes: half the disk space free at the start, so
    that no default run fills a disk."""
    try:
        return max(1, shutil.disk_usage(run_dir).free // 2)
    except OSError:
        return 1 << 30






def _prepare_out(out: Path) -> tuple[Path, Ownership, bool]:
    """--out DIR: a new directory, or one that holds no run already, that no other run
    holds and that cudump can write in; UsageError (one line, before the program starts)
    otherwise. The directory comes back held by this run (rundir.ownership), with whether
    this run made it.

    A symlink, even to a directory, is refused: the run's files would go wherever it
    points. The folders cudump makes for it are made one by one, none through a symlink.
    Anything under the name of a run's file counts, a dangling symlink included: it is
    refused here, and in any case never written through (cudump.rundir.files creates every
    file of the run new, with O_EXCL | O_NOFOLLOW)."""
    try:
        st: os.stat_result | None = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise UsageError(f"--out {out}: cannot use it: {err.strerror or err}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UsageError(f"--out {out} is a symlink (to {_link_text(out)}); cudump does not "
                         "write through symlinks: give the directory itself")
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"--out {out}: exists and is not a directory")
    try:
        runfiles.make_dirs(out)
    except NotADirectoryError as err:
        raise UsageError(f"--out {out}: cannot create it: {err.filename} is not a folder of "
                         "its own (a symlink?)" if err.filename else
                         f"--out {out}: cannot create it: {err.strerror or err}") from None
    except OSError as err:
        raise UsageError(f"--out {out}: cannot create it: {err.strerror or err}") from None
    try:
        owner = ownership.take(out)
    except (ownership.RunDirTaken, ownership.MarkerInTheWay) as err:
        raise UsageError(f"--out {err}; give another directory") from None
    except OSError as err:
        raise UsageError(f"--out {out}: cannot write in it: {err.strerror or err}") from None
    try:
        # Looked at once the directory is this run's: a run that ended meanwhile left its
        # files, and they are seen.
        _check_holds_no_run(out)
        runfiles.check_writable(out)
    except OSError as err:
        owner.release()
        raise UsageError(f"--out {out}: cannot write in it: {err.strerror or err}") from None
    except BaseException:
        owner.release()
        raise
    return out, owner, st is None


def _check_holds_no_run(out: Path) -> None:
    held = [name for name in RUN_FILES if os.path.lexists(out / name)]
    links = [name for name in held if (out / name).is_symlink()]
    if links:
        raise UsageError(f"--out {out} has symlinks named like the files of a run "
                         f"({', '.join(links)}); cudump does not write through them: give a "
                         "new or empty directory")
    if held:
        raise UsageError(f"--out {out} already holds a run ({', '.join(held)}); give a new "
                         "directory, or leave --out out for a fresh cudump-out/<n>/")


def _link_text(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _remove_if_empty(run_dir: Path, created: bool) -> None:
    """A program that could not start leaves no empty run directory behind."""
    if not created:
        return
    try:
        run_dir.rmdir()  # only succeeds when empty
    except OSError:
        pass
