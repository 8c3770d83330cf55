"""A cudump subcommand run as cli.main runs it (its error line and exit status), without
the other subcommands."""

from __future__ import annotations

from cudump.cli import _error, _parser
from cudump.commands import Command
from cudump.errors import CudumpError


def run_cli(command: Command, argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `cudump <command> argv...`."""
    args = _parser(command).parse_args(argv)
    try:
        code = command.run(args)
    except CudumpError as err:
        code = _error(str(err), err.exit_code)
    out, err_text = capsys.readouterr()
    return code, out, err_text
