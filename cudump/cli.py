"""Command-line entry point: `cudump [options] PROGRAM ...` and the offline subcommands.

Every problem cudump can name is a CudumpError, printed here as one line
(`cudump: error: ...`) with its exit status (2 unless the error says otherwise). An
unexpected exception in an offline subcommand (diff, ls, show) is a bug: it is printed
as one line too (`cudump: internal error: ...`), exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from cudump.commands import SUBCOMMANDS, USAGE, Command
from cudump.console import PrintableWriter, printable
from cudump.errors import CudumpError

# Subcommands whose unexpected exceptions are one line, not a traceback (bisect runs its
# programs as cudump subprocesses, so it is one of them): all of them.
OFFLINE = frozenset(SUBCOMMANDS)
SIGPIPE_STATUS = 141            # 128 + SIGPIPE, as a program killed by it would exit


def version() -> str:
    """The installed distribution's version, or the package's own when not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("cudump")
    except PackageNotFoundError:
        from cudump import __version__

        return __version__


# Each command's module (cudump.commands.NAME) and class, imported only when it runs: `cudump
# diff` does not pay for the controller's imports, nor a run for bisect's and diff's (which
# took 0.45 s of every run's start when all were imported).
COMMAND_CLASSES = {"run": "RunCommand", "diff": "DiffCommand", "ls": "LsCommand",
                   "show": "ShowCommand", "bisect": "BisectCommand", "replay": "ReplayCommand",
                   "extract": "ExtractCommand", "stats": "StatsCommand",
                   "query": "QueryCommand"}


def _command(name: str) -> Command:
    module = importlib.import_module(f"cudump.commands.{name}")
    command: Command = getattr(module, COMMAND_CLASSES[name])()
    return command


def _commands() -> dict[str, Command]:
    """Every command, by name (their help is checked as a whole)."""
    return {name: _command(name) for name in COMMAND_CLASSES}


class _ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line, like every other error of cudump."""

    def error(self, message: str) -> NoReturn:
        if self.prog == "cudump" and "PROGRAM" in message:
            message = f"no program given; {USAGE}"
        else:
            message = f"{message} (see '{self.prog} --help')"
        self.exit(2, f"cudump: error: {printable(message)}\n")


class _VersionAction(argparse.Action):
    """-V/--version: cudump's version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print cudump's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"cudump {version()}")
        parser.exit(0)


def _parser(command: Command) -> argparse.ArgumentParser:
    prog = "cudump" if command.name == "run" else f"cudump {command.name}"
    parser = _ArgumentParser(prog=prog, description=command.help)
    if command.name == "run":
        parser.add_argument("-V", "--version", action=_VersionAction)
    command.prepare_parser(parser)
    return parser


def _one_line(text: object) -> str:
    """One line, its control characters escaped (a message may quote a run's files)."""
    return printable(" ".join(str(text).split()))


def _error(message: str, status: int = 2) -> int:
    print(f"cudump: error: {_one_line(message)}", file=sys.stderr)
    return status


def _quiet_stdout() -> None:
    """After a broken pipe: send what is still buffered nowhere, so exiting stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        return _error(f"no program given; {USAGE}")
    if argv[0] in ("--version", "-V"):
        print(f"cudump {version()}")
        return 0
    # A program is run unless the first word names a subcommand; `cudump -- diff`
    # runs a program called diff.
    if argv[0] in COMMAND_CLASSES and argv[0] != "run":
        command = _command(argv.pop(0))
    else:
        command = _command("run")
    parser = _parser(command)
    stdout = sys.stdout
    normalize = getattr(command, "normalize", None)   # options whose value may be left out
    if normalize is not None:
        argv = normalize(argv, parser)
    try:
        args = parser.parse_args(argv)
        if command.name in OFFLINE:
            # What they print comes from a run's files: shown, never obeyed by the terminal.
            sys.stdout = PrintableWriter(stdout)  # type: ignore[assignment]
        return command.run(args)
    except CudumpError as err:
        return _error(str(err), err.exit_code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return SIGPIPE_STATUS
    except MemoryError:
        return _error("out of memory")
    except Exception as err:
        if command.name not in OFFLINE:
            raise
        print(f"cudump: internal error: {type(err).__name__}: {_one_line(err)} "
              "(please report)", file=sys.stderr)
        return 2
    finally:
        if isinstance(sys.stdout, PrintableWriter):
            sys.stdout = stdout
