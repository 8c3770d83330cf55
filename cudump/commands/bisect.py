"""`cudump bisect`: find the first launch where two runs diverge, and show its buffers."""

from __future__ import annotations

import argparse
from pathlib import Path

from cudump.analysis.bisect.options import BisectOptions
from cudump.analysis.bisect.sides import make_sides
from cudump.analysis.bisect.steps import bisect
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.progress import Progress
from cudump.commands import HelpFormatter, note
from cudump.errors import UsageError

EPILOG = """\
Runs both sides with a digest of every buffer of every launch (or of the buffers the
--rule files name), finds the first launch whose digests differ (launches in order,
processes in the order they first appear), runs both again with snapshots of just that
launch, before and after, and prints the diff of each buffer that differs: the metrics of
`cudump diff` and the elements that differ. Buffers compare exactly (a digest tells only
whether the bytes are the same).

Where both digest runs' records name the scopes they were made in (PyTorch modules, NVTX
ranges), the runs are aligned by scope instead, as `cudump diff` aligns them: each time a
scope was entered, in a step and pass, in A against the same one in B, by the buffers the
launches inside it wrote last (its outputs; paired by size, only the last written of a size
where one side has more, since the two sides may launch other kernels). Step 2 names the
first module whose outputs differ (the first scope in A's order, then its first child that
differs, and so on down); step 3 snapshots the launches inside it, each side its own; step
4 shows its outputs and, where both sides' launches inside it line up (the same kernels, as
many), the first launch that differs. With --atol/--rtol, scopes whose digests differ are
judged by snapshots of their outputs, --batch-size scopes at a time. "No divergence beyond
the tolerance" when every aligned scope's outputs match. Where one run has no scopes,
bisect says so and compares in launch order.

Sides: two programs (-- PROGRAM_A ARGS... -- PROGRAM_B ARGS...), or one program run with
--env-a and --env-b settings (either may be left out; the other side then runs in this
environment). The second '--' separates the two programs.

The work directory (--out DIR, a new or empty one; default: a temporary directory, removed
at the end unless --keep, or something went wrong) holds a-digest/, b-digest/, a-snap/,
b-snap/ (run directories for cudump ls/show/diff), rules/ and logs/ (each run's output);
with --baseline-runs N also a-base1/ ... a-baseN/.

Step 2 sorts the divergent launches: one whose inputs (its buffers before it ran) all
matched and whose output differs is a root cause (the earliest is named first); one whose
inputs already differed is a consequence. With --baseline-runs N, buffers that differ
between A's identical runs are nondeterministic and never the divergence; when nothing
else differs, bisect says "no divergence beyond nondeterminism" (exit status 0).

Where the work directory is kept (--out, --keep) and the rules take whole buffers, the last
line suggests the confirmation: B run again with A's inputs at that launch
(cudump --inject a-snap:LAUNCH), whose outputs become A's if the difference came in through
the launch's inputs, and still differ if the launch itself makes it.

With --atol/--rtol, buffers whose elements all lie within the tolerance
(|a-b| <= atol + rtol*|b|) are equal: rounding that differs, as a reduction summed in
another order makes, is no divergence. The digests in step 1 are exact, so every launch after
such a difference has digests that differ. Beside each digest of floats step 1 also takes
the sum of |x|: sums further apart than n*atol + rtol*sum|b| (n elements) say the buffers
differ beyond the tolerance, so the first launch with such a buffer (or with a buffer of
no known type whose digests differ) is the last candidate. Step 3 snapshots the candidates,
--batch-size at a time, and the divergence is the first whose buffers differ beyond the
tolerance. If none does, bisect says "no divergence beyond the tolerance" (exit status 0).
With --by-sums, buffers whose sums are within the tolerance count as within it, without
snapshot runs: faster, but a change to a few elements smaller than rtol times the sum goes
unseen. A buffer whose kernel's name gives no element type is compared as bytes: give its
type with a rule's overrides (0: {dtype: float32}).

Exit status: 0 no divergence, 1 divergence found (and shown), 2 trouble (one line on
stderr: bad arguments, a side cudump could not run), 3 the snapshot re-runs did not
reproduce the divergence (the program is not deterministic). Stopped by SIGTERM, SIGINT or
SIGHUP, bisect stops the run under way (cudump and the program), removes a temporary work
directory and exits with 128 + the signal's number.
"""


class BisectCommand:
    name = "bisect"
    help = ("Run two versions of a program (or one in two environments), find the first "
            "kernel launch whose buffers differ, and show how they differ.")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.formatter_class = HelpFormatter
        parser.epilog = EPILOG
        parser.add_argument("--rule", action="append", type=Path, default=[], metavar="FILE",
                            help="digest (then snapshot) only the buffers these rule files "
                                 "name (repeatable; default: every buffer of every launch)")
        parser.add_argument("--env-a", action="append", default=[], metavar="NAME=VALUE",
                            help="set in A's environment (repeatable)")
        parser.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE",
                            help="set in B's environment (repeatable)")
        parser.add_argument("--layers", action="store_true",
                            help="run both sides with cudump run --layers, so that their "
                                 "launches name PyTorch modules and steps and the runs are "
                                 "compared layer by layer")
        parser.add_argument("--out", type=Path, metavar="DIR",
                            help="work directory for the runs, kept (a new or empty one)")
        parser.add_argument("--html", type=Path, metavar="FILE",
                            help="write a report of the divergent launch: FILE.html (images "
                                 "beside it), or a directory (index.html)")
        parser.add_argument("--keep", action="store_true",
                            help="keep the temporary work directory")
        parser.add_argument("--baseline-runs", type=int, default=0, metavar="N",
                            help="run A N more times with digests first: buffers that differ "
                                 "between identical runs are nondeterministic, not the "
                                 "divergence (default 0)")
        parser.add_argument("--atol", type=float, default=0.0,
                            help="absolute tolerance: buffers within it are equal (default 0: "
                                 "exact; see below)")
        parser.add_argument("--rtol", type=float, default=0.0,
                            help="relative tolerance, times |B| (default 0)")
        parser.add_argument("--batch-size", type=int, default=32, metavar="K",
                            help="with a tolerance: launches whose digests differ checked by "
                                 "each pair of snapshot runs (default 32)")
        # The old spelling, kept for a release: `cudump --batch FILE` is a prompt command file.
        parser.add_argument("--batch", type=int, dest="old_batch", metavar="K",
                            help=argparse.SUPPRESS)
        parser.add_argument("--by-sums", action="store_true",
                            help="with a tolerance: take buffers whose sums of |x| are within "
                                 "it as within it, without snapshot runs (see below)")
        parser.add_argument("-j", "--jobs", type=int, default=None,
                            help="workers comparing pairs (default: CPU count)")
        parser.add_argument("command", nargs=argparse.REMAINDER,
                            metavar="-- PROGRAM_A [ARGS...] [-- PROGRAM_B [ARGS...]]",
                            help="the program to run (and its arguments), and after a second "
                                 "'--' another one to compare it with")

    def run(self, args: argparse.Namespace) -> int:
        if args.jobs is not None and args.jobs < 1:
            raise UsageError(f"-j/--jobs must be 1 or more, not {args.jobs}")
        if args.baseline_runs < 0:
            raise UsageError(f"--baseline-runs must be 0 or more, not {args.baseline_runs}")
        if not (args.atol >= 0 and args.rtol >= 0):
            raise UsageError(f"--atol and --rtol must be 0 or more (not {args.atol}, "
                             f"{args.rtol})")
        if args.old_batch is not None:
            note("bisect", "--batch K is deprecated and will be removed; write --batch-size K "
                           "(cudump --batch FILE is the prompt's command file)")
            args.batch_size = args.old_batch
        if args.batch_size < 1:
            raise UsageError(f"--batch-size must be 1 or more, not {args.batch_size}")
        if args.by_sums and not (args.atol > 0 or args.rtol > 0):
            raise UsageError("--by-sums needs a tolerance (--atol or --rtol)")
        # each module's returned tensors too: the sides' modules compare by exactly those
        layers = ["CUDUMP_LAYERS=1", "CUDUMP_MODULE_OUTPUTS=1"] if args.layers else []
        sides = make_sides(args.command, layers + args.env_a, layers + args.env_b)
        options = BisectOptions(sides=sides, rules=list(args.rule), out=args.out,
                                keep=args.keep, html=args.html, jobs=args.jobs,
                                baseline_runs=args.baseline_runs,
                                tol=Tolerance(args.atol, args.rtol), batch=args.batch_size,
                                by_sums=args.by_sums)
        progress = Progress()            # on stderr, only where it is a terminal

        def say(line: str) -> None:
            progress.before_output()
            print(line, flush=True)

        return bisect(options, say, progress)
