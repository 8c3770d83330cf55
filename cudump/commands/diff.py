"""`cudump diff A B`: compare two snapshot files or two run directories."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from cudump.analysis.diff.align import align
from cudump.analysis.diff.arrays import compare_arrays
from cudump.analysis.diff.by_scope import (
    ScopeDiff,
    align_scopes,
    launches_inside,
    missing_scopes,
)
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.parallel import compare_pairs
from cudump.analysis.diff.runs import RunDiff
from cudump.analysis.job_runs import open_run
from cudump.analysis.outputs import output_dir, report_dir
from cudump.analysis.progress import Progress
from cudump.analysis.report.formats import fmt_tol
from cudump.analysis.report.html_page import HtmlReport, PageOptions
from cudump.analysis.report.scope_text import (
    first_scope_line,
    inside_lines,
    no_difference_line,
    scope_line,
    summary_line,
    untyped_note,
)
from cudump.analysis.report.text import PairTable, file_report, run_summary
from cudump.analysis.stats import is_any_run, no_snapshots, not_a_run
from cudump.commands import HelpFormatter, refuse_existing
from cudump.errors import CudumpError, DiffTrouble, SnapshotError
from cudump.rundir import formats
from cudump.rundir.imaging import (
    CannotDraw,
    Rendered,
    TooManyChannels,
    render_pair,
    save_png,
    side_by_side,
)
from cudump.rundir.job import is_job
from cudump.rundir.runs import is_run_dir, kernel_pattern, load_array
from cudump.rundir.summary import plural

# What --out DIR gets (two files): an existing one is replaced only with --force.
PICTURES = ("heatmap.png", "side_by_side.png")

# The snapshot files diff compares (rundir.formats): .npy, .png.
_SUFFIXES = formats.suffixes()
_FILES = formats.spelled([*(f"a {s} file" for s in _SUFFIXES), "a run directory"])
_ARGUMENT = formats.spelled([*(f"a {s}" for s in _SUFFIXES), "a run directory"])

EPILOG = f"""\
A and B are each {_FILES} (both of one kind). A job directory (cudump --job) is
compared as one run holding every node's records: where the records have ranks, launches
align per (rank, kernel, occurrence) whichever node ran each rank; without ranks, the
processes pair in order (nodes by name, then each node's processes as they came).

Elements differ when |a-b| > atol + rtol*|b| (numpy.isclose); NaN equals NaN and equal
infinities are equal. Mean, RMSE and the largest difference cover elements whose difference
is finite. PSNR's peak is the dtype maximum for integers and A's data range for floats.

Runs whose records name the scopes they were made in (PyTorch modules, NVTX ranges:
--layers) are compared scope by scope (--by scope, the default where both runs have them):
each time a scope was entered, in a step and pass, in A against the same one in B, by the
buffers the launches inside it wrote (the last write of each: its outputs). Outputs pair by
size in the order written, dtype and shape agreeing where both sides have them; where one
side has more of a size (the implementations may write other temporaries), only the last
written of that size pair. Those left over are listed as unpaired.
The first difference is the first scope in A's order whose outputs differ, narrowed to the
first of its children that differs, and so on; where both sides' launches inside it line up
(the same kernels, as many), the first launch that differs is named. Scopes in one run only
are listed, not counted as a difference. Where a run has no scopes, diff says so and
compares in launch order (--by launch always does).

In launch order, runs are aligned by (kernel, occurrence, argument, phase); pairs are
listed in A's launch order, then snapshots present in one run only. A snapshot neither run
could capture, for the same reason, is listed as not captured on either side and is not a
difference.
Processes are taken in the order they first appear in the manifest; the first divergent
launch is the first launch, in that order, with a pair that differs, and the line naming it
says how many launches (with snapshots or digests) matched before it.

Runs taken with --digest (or rules with format: digest) hold a digest per buffer instead
of its data: two digests compare by digest. Digests that differ stay different without
--atol/--rtol; with them, records that carry a sum of |x| (runs whose kernels have types)
are "close" (counted as matching) when the two sums are within the tolerance, and differ
when they are not; records without sums stay exact. A digest against a .npy compares by
digesting the array's bytes the same way.

--kernel PATTERN is a glob (* and ?) matching the demangled name with or without its
return type, the name without its parameters (ns::k<int>) or the bare name (k); write
*word* for a substring, re:REGEX for a regular expression.

Exit status: 0 equal within tolerance, 1 different, 2 trouble (one-line reason on stderr).
"""


NO_SCOPE_IN_COMMON = "the runs have no scope in common: comparing in launch order"


class DiffCommand:
    name = "diff"
    help = f"Compare two snapshots ({'/'.join(_SUFFIXES)}) or two run directories."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.formatter_class = HelpFormatter
        parser.epilog = EPILOG
        parser.add_argument("a", metavar="A", help=_ARGUMENT)
        parser.add_argument("b", metavar="B", help="the same kind of thing to compare with")
        parser.add_argument("--atol", type=float, default=0.0,
                            help="absolute tolerance (default 0)")
        parser.add_argument("--rtol", type=float, default=0.0,
                            help="relative tolerance, times |B| (default 0)")
        parser.add_argument("--kernel", metavar="PATTERN",
                            help="runs: only kernels matching PATTERN (glob such as "
                                 "'ns::k*', a kernel name, or re:REGEX)")
        parser.add_argument("--by", choices=("scope", "launch"), default=None,
                            help="runs: align by scope (the default where both runs' records "
                                 "name scopes; an error where one does not) or in launch "
                                 "order")
        parser.add_argument("--brief", action="store_true",
                            help="runs: print only pairs that are not equal")
        parser.add_argument("--out", metavar="DIR", type=Path,
                            help="files: write heatmap.png and side_by_side.png (A | B | diff)")
        parser.add_argument("--force", action="store_true",
                            help="replace the pictures --out DIR already holds (files), "
                                 "or the report --html DIR holds (runs); refused otherwise")
        parser.add_argument("--html", metavar="DIR", type=Path,
                            help="runs: write a static report DIR/index.html")
        parser.add_argument("--alpha", action="store_true",
                            help="with --html: draw RGBA data with its alpha channel, over a "
                                 "checkerboard (default: its colour channels, opaque)")
        parser.add_argument("-j", "--jobs", type=int, default=None,
                            help="threads comparing pairs (default: CPU count)")

    def run(self, args: argparse.Namespace) -> int:
        tol = Tolerance(args.atol, args.rtol)
        if args.jobs is not None and args.jobs < 1:
            raise DiffTrouble(f"-j/--jobs must be 1 or more, not {args.jobs}")
        a, b = Path(args.a), Path(args.b)
        for p in (a, b):
            if not p.exists():
                raise DiffTrouble(f"{p}: no such file or directory")
        if a.is_dir() and b.is_dir():
            return self._runs(a, b, tol, args)
        if a.is_dir() or b.is_dir():
            raise DiffTrouble("compare two files or two run directories, not one of each")
        if args.html is not None:
            raise DiffTrouble("--html compares run directories; use --out DIR for two files")
        if args.alpha:
            raise DiffTrouble("--alpha is for the --html report of two runs")
        return self._files(a, b, tol, args)

    def _files(self, a: Path, b: Path, tol: Tolerance, args: argparse.Namespace) -> int:
        if args.out is not None:
            output_dir(args.out, "--out")
            for name in PICTURES:
                refuse_existing(args.out / name, "--out", args.force)
        try:
            arr_a, arr_b = load_array(a), load_array(b)
        except SnapshotError as err:
            raise DiffTrouble(str(err)) from None
        metrics = compare_arrays(arr_a, arr_b, tol)
        pictures = _pictures(arr_a, arr_b, a) if args.out is not None else None
        for line in file_report(str(a), str(b), metrics, tol):
            print(line)
        if pictures is not None:
            heat, both = pictures
            text = {"a": str(a), "b": str(b)}
            written = [args.out / name for name in PICTURES]
            try:
                save_png(heat, written[0], text)
                save_png(both, written[1], text)
            except OSError as err:
                raise DiffTrouble(f"--out {args.out}: cannot write: "
                                  f"{err.strerror or err}") from None
            print(f"wrote {written[0]} and {written[1]}")
        return 0 if metrics.equal else 1

    def _runs(self, a: Path, b: Path, tol: Tolerance, args: argparse.Namespace) -> int:
        for p in (a, b):
            if is_job(p):
                continue            # its node runs, read as one run (analysis.job_runs)
            if not is_any_run(p):
                raise DiffTrouble(not_a_run(p))
            if not is_run_dir(p):
                raise DiffTrouble(no_snapshots(p))
        if args.out is not None:
            raise DiffTrouble("--out is for two files; use --html DIR for runs")
        try:
            pattern = kernel_pattern(args.kernel)
            run_a, run_b = open_run(a), open_run(b)
        except CudumpError as err:
            raise DiffTrouble(str(err)) from None
        if args.html is not None:
            report_dir(args.html, "index.html", force=args.force)
        elif args.alpha:
            raise DiffTrouble("--alpha is for the --html report; give --html DIR")
        missing = missing_scopes(run_a, run_b)
        if args.by == "scope" and missing is not None:
            raise DiffTrouble(f"--by scope: {missing} (runs record scopes with --layers or "
                              "NVTX ranges); --by launch compares in launch order")
        if args.by is None and missing is not None and missing != "neither run has scopes":
            print(f"{missing}: comparing in launch order")
        if args.by != "launch" and missing is None:
            scopes = align_scopes(run_a, run_b, pattern)
            if scopes.in_common or args.by == "scope":
                return self._scopes(a, b, scopes, tol, args)
            print(NO_SCOPE_IN_COMMON)
        pairs = align(run_a, run_b, pattern)
        if not pairs:
            only = f" for kernel '{args.kernel}'" if args.kernel else ""
            raise DiffTrouble(f"no snapshots to compare{only}")
        if all(p.a is None or p.b is None for p in pairs):
            # Nothing aligns: listing every snapshot twice (only in A, only in B) says less
            # than this line does.
            kernels_a = {p.a.record.kernel for p in pairs if p.a is not None}
            kernels_b = {p.b.record.kernel for p in pairs if p.b is not None}
            what = ("no kernel in common" if not kernels_a & kernels_b else
                    "no snapshot in common (the same kernels, other launches, arguments or "
                    "phases)")
            print(f"A: {a}  B: {b}: nothing in common: {what}; A has "
                  f"{plural(sum(p.a is not None for p in pairs), 'snapshot')} of "
                  f"{plural(len(kernels_a), 'kernel')}, B "
                  f"{plural(sum(p.b is not None for p in pairs), 'snapshot')} of "
                  f"{plural(len(kernels_b), 'kernel')} (`cudump stats` lists each run's)")
            return 1
        print(f"A: {a}  B: {b}  [{fmt_tol(tol)}]")
        table = PairTable(pairs)
        print(table.header())
        progress = Progress()            # on stderr, only where it is a terminal
        total = f"{len(pairs):,}"
        progress.update(f"diff: 0/{total} pairs")
        # Lines stream in launch order while later pairs are still being compared.
        try:
            for done, pair in enumerate(compare_pairs(pairs, tol, args.jobs), 1):
                if not (args.brief and pair.status == "equal"):
                    progress.before_output()
                    print(table.line(pair))
                progress.update(f"diff: {done:,}/{total} pairs")
        finally:
            progress.clear()
        result = RunDiff(pairs)
        for line in run_summary(result):
            print(line)
        if args.html is not None:
            sys.stdout.flush()
            try:
                self._report(args.html, result, a, b, tol, args.jobs, args.alpha, progress)
            finally:
                progress.clear()
        sys.stdout.flush()
        if result.errors:
            first = result.errors[0]
            raise DiffTrouble(f"{len(result.errors)} pair(s) could not be compared; first: "
                              f"{first.reason}")
        return result.exit_code

    def _scopes(self, a: Path, b: Path, diff: ScopeDiff, tol: Tolerance,
                args: argparse.Namespace) -> int:
        """Runs compared scope by scope: a line per scope occurrence, then the first that
        differs (and the launches inside it) and the counts."""
        if not diff.pairs:
            only = f" for kernel '{args.kernel}'" if args.kernel else ""
            raise DiffTrouble(f"no scopes to compare{only}")
        print(f"A: {a}  B: {b}  [{fmt_tol(tol)}]  aligned by scope")
        for pair in diff.pairs:
            diff.compare(pair, tol)
            if not (args.brief and pair.status in ("equal", "unpaired")):
                print(scope_line(pair, diff, tol))
        first = diff.first_differing()
        if first is None:
            print(no_difference_line(tol, diff.counts().get("undecided", 0)))
        else:
            print(first_scope_line(first, tol, diff.ranked))
            note = untyped_note(first)
            if note:
                print(note)
            processes = len(diff.a.run.processes)
            for line in inside_lines(launches_inside(first, tol, diff.ranked), processes):
                print(line)
        print(summary_line(diff))
        outputs = list({id(p): p for s in diff.pairs for p in s.outputs.pairs}.values())
        if args.html is not None:
            sys.stdout.flush()
            progress = Progress()
            try:
                self._report(args.html, RunDiff(outputs), a, b, tol, args.jobs, args.alpha,
                             progress)
            finally:
                progress.clear()
        errors = [p for p in outputs if p.status == "error"]
        if errors:
            raise DiffTrouble(f"{len(errors)} output(s) could not be compared; first: "
                              f"{errors[0].reason}")
        return 1 if first is not None else 0

    @staticmethod
    def _report(out: Path, result: RunDiff, a: Path, b: Path, tol: Tolerance,
                jobs: int | None, alpha: bool, progress: Progress) -> None:
        def drawn(done: int, total: int) -> None:
            progress.update(f"diff: report: {done:,}/{total:,} launches drawn")

        try:
            index = HtmlReport(out, result, str(a), str(b), tol, jobs,
                               PageOptions(alpha=alpha)).write(drawn)
        except OSError as err:
            raise DiffTrouble(f"--html {out}: cannot write the report: "
                              f"{err.strerror or err}") from None
        print(f"report: {index}")


def _pictures(arr_a: np.ndarray, arr_b: np.ndarray, a: Path) -> tuple[Rendered, Image.Image]:
    """The heatmap and the side-by-side view for --out; DiffTrouble if the data has no
    picture."""
    try:
        left, right, heat = render_pair(arr_a, arr_b)
    except TooManyChannels as err:
        raise DiffTrouble(f"--out cannot draw this data: {err}; `cudump show {a} --channels "
                          "0,1,2 --png FILE` draws chosen channels") from None
    except CannotDraw as err:
        raise DiffTrouble(f"--out cannot draw this data: {err}") from None
    return heat, side_by_side([left, right, heat], ["A", "B", "|A-B|"])

