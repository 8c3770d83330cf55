"""Command-line entry point: `cudump [options] PROGRAM ...` and the offline subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cudump.commands import Command
from cudump.errors import CudumpError


def _commands() -> dict[str, Command]:
    # Imported here so that `cudump diff` does not pay for the controller's imports.
    from cudump.commands.diff import DiffCommand
    from cudump.commands.ls import LsCommand
    from cudump.commands.run import RunCommand
    from cudump.commands.show import ShowCommand

    return {c.name: c for c in (RunCommand(), DiffCommand(), LsCommand(), ShowCommand())}


def _parser(command: Command) -> argparse.ArgumentParser:
    prog = "cudump" if command.name == "run" else f"cudump {command.name}"
    parser = argparse.ArgumentParser(prog=prog, description=command.help)
    command.prepare_parser(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = _commands()
    # A program is run unless the first word names a subcommand; `cudump -- diff`
    # runs a program called diff.
    if argv and argv[0] in commands and argv[0] != "run":
        command = commands[argv.pop(0)]
    else:
        command = commands["run"]
    parser = _parser(command)
    args = parser.parse_args(argv)
    try:
        return command.run(args)
    except CudumpError as err:
        print(f"cudump: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
