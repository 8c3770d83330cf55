"""One module per subcommand. Each defines a class with `name`, `help`,
`prepare_parser(parser)` and `run(args) -> int`."""

from __future__ import annotations

import argparse
from typing import Protocol

# The subcommands (`cudump SUBCOMMAND ...`); every other first word is a program to run.
# cudump.cli maps each to its Command, and a test checks that the two agree.
SUBCOMMANDS = ("bisect", "diff", "extract", "ls", "replay", "show", "stats")
USAGE = ("usage: cudump [options] [--] PROGRAM [ARGS...], or cudump SUBCOMMAND ... with "
         f"SUBCOMMAND one of {', '.join(SUBCOMMANDS)} (cudump --help, cudump SUBCOMMAND "
         "--help)")


# What the offline subcommands' --kernel PATTERN matches, for their help.
KERNEL_PATTERN_HELP = ("--kernel PATTERN is a glob matching the demangled name with or without "
                       "its return type, without its parameters, or the bare function name "
                       "(write *word* for a substring), or re:REGEX.")


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


def note(command: str, text: str) -> None:
    """One line on stderr, prefixed with the subcommand's name: `cudump bisect: note: ...`."""
    import sys

    print(f"cudump {command}: note: {text}", file=sys.stderr)
