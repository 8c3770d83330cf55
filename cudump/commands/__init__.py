"""One module per subcommand. Each defines a class with `name`, `help`,
`prepare_parser(parser)` and `run(args) -> int`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# The subcommands (`cudump SUBCOMMAND ...`); every other first word is a program to run.
# cudump.cli maps each to its Command, and a test checks that the two agree.
SUBCOMMANDS = ("bisect", "diff", "extract", "ls", "query", "replay", "show", "stats")
USAGE = ("usage: cudump [options] [--] PROGRAM [ARGS...], or cudump SUBCOMMAND ... with "
         f"SUBCOMMAND one of {', '.join(SUBCOMMANDS)} (cudump --help, cudump SUBCOMMAND "
         "--help)")


# What the offline subcommands' --kernel PATTERN matches, for their help.
KERNEL_PATTERN_HELP = ("--kernel PATTERN is a glob matching the demangled name with or without "
                       "its return type, without its parameters, or the bare function name "
                       "(write *word* for a substring), or re:REGEX (or regex:REGEX, as in "
                       "Nsight Compute), or scope:GLOB: launches made inside a scope (an NVTX "
                       "range, a PyTorch module path such as 'layer3.*') or at a source line "
                       "('train.py:57') the glob matches.")


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, wrapped, except for text written with line breaks (an epilog of
    examples): that is kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        # argparse shows the rest of the command line as a bare '...': say what it holds.
        if action.nargs == argparse.REMAINDER and isinstance(action.metavar, str):
            return action.metavar
        return super()._format_args(action, default_metavar)


class Command(Protocol):
    name: str
    help: str

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# How every offline subcommand names its arguments: a run directory is RUN, a kernel is
# --kernel PATTERN, one launch is --launch [PID:]N (PID:N as RUN:PID:LAUNCH of --inject and
# --inputs-from writes it), and an output path that exists is refused unless --force.
RUN_METAVAR = "RUN"
LAUNCH_HELP = ("the launch with this launch number; PID:N the one of process PID (as "
               "--pid PID --launch N)")


def note(command: str, text: str) -> None:
    """One line on stderr, prefixed with the subcommand's name: `cudump ls: note: ...`."""
    import sys

    print(f"cudump {command}: note: {text}", file=sys.stderr)


def add_kernel_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--kernel", metavar="PATTERN", dest="kernel_option", help=help_text)


def kernel_choice(args: argparse.Namespace, command: str) -> str | None:
    """--kernel PATTERN, or the positional pattern still accepted for one release (with a
    note on stderr saying to write --kernel); UsageError if both are given."""
    from cudump.errors import UsageError

    option = getattr(args, "kernel_option", None)
    positional = getattr(args, "kernel", None)
    if positional is None:
        return option
    if option is not None:
        raise UsageError(f"a kernel pattern twice ('{positional}' and --kernel '{option}'); "
                         "give --kernel PATTERN only")
    note(command, f"a kernel pattern as a positional argument is deprecated and will be "
                  f"removed; write --kernel '{positional}'")
    return positional


@dataclass(frozen=True)
class LaunchRef:
    """--launch [PID:]N: a launch number, and the process it is of where one is named."""

    launch: int
    pid: int | None = None


def launch_ref(text: str) -> LaunchRef:
    """argparse type of --launch: N or PID:N."""
    pid_text, _, number = text.rpartition(":")
    try:
        launch = int(number)
        pid = int(pid_text) if pid_text else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not N or PID:N (a launch number, "
                                         "optionally after its process id)") from None
    if launch < 0 or (pid is not None and pid < 0):
        raise argparse.ArgumentTypeError(f"'{text}': launch numbers and process ids are 0 or "
                                         "more")
    return LaunchRef(launch, pid)


def add_launch_option(parser: argparse.ArgumentParser, pid_help: str) -> None:
    parser.add_argument("--launch", type=launch_ref, metavar="[PID:]N", help=LAUNCH_HELP)
    parser.add_argument("--pid", type=int, help=pid_help)


def launch_choice(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """(launch, pid) from --launch [PID:]N and --pid; UsageError if they name two processes."""
    from cudump.errors import UsageError

    ref: LaunchRef | None = args.launch
    pid: int | None = args.pid
    if ref is None:
        return None, pid
    if ref.pid is not None and pid is not None and ref.pid != pid:
        raise UsageError(f"--launch {ref.pid}:{ref.launch} and --pid {pid} name two "
                         "processes; give one")
    return ref.launch, ref.pid if ref.pid is not None else pid


def check_output_file(path: Path, option: str, force: bool) -> None:
    """An output file named on the command line: a file name (not a folder), new unless
    --force, in a folder that exists and cudump may write in; UsageError before any work."""
    import os

    from cudump.errors import UsageError

    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    refuse_existing(path, option, force)
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: cannot write: no directory {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: cannot write in {folder}")


def refuse_existing(path: Path, option: str, force: bool) -> None:
    """An output file that exists is kept unless --force (every output path of cudump)."""
    from cudump.errors import UsageError

    if not force and (path.exists() or path.is_symlink()):
        raise UsageError(f"{option} {path}: already exists; give a new name, or --force to "
                         "replace it")
