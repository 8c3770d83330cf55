"""Commands: one argparse parser each, a registry filled by a decorator, guards, dispatch.

As in pwndbg, every command lives in its own module under cudump/prompt/commands/,
builds its parser with `make_parser`, and registers itself with `@command(parser, ...)`.
What a command needs (a held launch, a launch whose kernel has not run yet) is
declared once with `requires=`; the dispatcher checks it before the command runs.

Parsers never exit the process: a usage error raises CommandError, `-h` raises
HelpShown with the help text, both handled by `execute`.
"""

from __future__ import annotations

import argparse
import functools
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from cudump.errors import CudumpError
from cudump.kernels.expr import ExprError
from cudump.kernels.pattern import PatternError
from cudump.launches.stop import TargetError
from cudump.policy.breakpoints import BreakpointError
from cudump.prompt.context import CommandError, Context, Outcome

HELP_WIDTH = 100

CATEGORIES = ("running", "breakpoints", "inspecting", "support")


class HelpShown(Exception):
    """`CMD -h`: the parser's help text, printed instead of running the command."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors and help come back as exceptions, never exit()."""

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise CommandError(f"{self.prog}: {message or 'bad arguments'}".rstrip())

    def print_help(self, file: object = None) -> None:
        raise HelpShown(self.format_help())

    def print_usage(self, file: object = None) -> None:
        raise HelpShown(self.format_usage())


def make_parser(name: str, summary: str, details: str = "", usage: str | None = None
                ) -> CommandParser:
    """The parser of one command: `summary` is the line `help` lists, `details` follow it."""
    description = summary if not details else f"{summary}\n\n{details.strip()}"
    formatter = functools.partial(argparse.RawDescriptionHelpFormatter, width=HELP_WIDTH,
                                  max_help_position=28)
    parser = CommandParser(prog=name, description=description, usage=usage,
                           formatter_class=formatter, allow_abbrev=False, add_help=True)
    parser.set_defaults(_summary=summary)
    return parser


@dataclass(frozen=True)
class Guard:
    """A precondition of a command; `check` returns why it does not hold, or None."""

    name: str
    check: Callable[[Context], str | None]


def _not_stopped(ctx: Context) -> str:
    if ctx.debugger.finished:
        return "the program is not being run"
    return "the program is not stopped at a launch"


def _check_stopped(ctx: Context) -> str | None:
    if ctx.stop is None:
        return _not_stopped(ctx)
    return None


def _check_before(ctx: Context) -> str | None:
    if ctx.stop is None:
        return _not_stopped(ctx)
    info = ctx.stop.info
    if info.phase != "before":
        return (f"launch {info.launch} has already run (this is the stop after it); "
                "'continue' goes on to the next stop")
    return None


STOPPED = Guard("stopped", _check_stopped)
BEFORE = Guard("before the kernel runs", _check_before)

Handler = Callable[[Context, argparse.Namespace], "Outcome | None"]


@dataclass
class Command:
    name: str
    parser: CommandParser
    handler: Handler | None
    category: str = "inspecting"
    aliases: tuple[str, ...] = ()
    requires: tuple[Guard, ...] = ()
    raw: bool = False            # the rest of the line is one argument (patterns, expressions)
    slash: bool = False          # takes gdb's /FMT suffix (`x/4xw`)
    complete: str | None = None  # "args", "kernels", "breakpoints", "commands", "subcommands"
    subcommands: dict[str, Command] = field(default_factory=dict)
    repeat: bool = False         # Enter on an empty line (at a terminal) runs it again

    @property
    def summary(self) -> str:
        return str(self.parser.get_default("_summary") or "")


class Registry:
    def __init__(self) -> None:
        self.commands: dict[str, Command] = {}
        self.aliases: dict[str, str] = {}     # alias -> the text it stands for

    def add(self, cmd: Command) -> Command:
        for name in (cmd.name, *cmd.aliases):
            if name in self.commands or name in self.aliases:
                raise ValueError(f"command name {name!r} registered twice")
        self.commands[cmd.name] = cmd
        for alias in cmd.aliases:
            self.aliases[alias] = cmd.name
        return cmd

    def alias(self, name: str, expansion: str) -> None:
        """`name` stands for `expansion` (e.g. `args` for `info args`)."""
        if name in self.commands or name in self.aliases:
            raise ValueError(f"command name {name!r} registered twice")
        self.aliases[name] = expansion

    def names(self) -> list[str]:
        """Every word that starts a command: names and aliases."""
        return sorted({*self.commands, *self.aliases})

    def aliases_of(self, name: str) -> list[str]:
        return [a for a, target in self.aliases.items() if target == name]

    def resolve(self, word: str) -> tuple[Command, str]:
        """The command a first word names (exactly, by alias or by a unique prefix), and the
        words an alias adds in front of the rest of the line."""
        if word in self.commands:
            return self.commands[word], ""
        if word in self.aliases:
            head, _, more = self.aliases[word].partition(" ")
            return self.commands[head], more
        found = sorted({n for n in self.commands if n.startswith(word)}
                       | {a for a in self.aliases if a.startswith(word)})
        targets = {self.aliases.get(n, n) for n in found}
        if len(targets) == 1:
            return self.resolve(found[0])
        if not found:
            raise CommandError(f"unknown command '{word}' (try 'help')")
        raise CommandError(f"ambiguous command '{word}': {', '.join(found)}")


REGISTRY = Registry()


def command(parser: CommandParser, *, category: str = "inspecting",
            aliases: tuple[str, ...] = (), requires: tuple[Guard, ...] = (), raw: bool = False,
            slash: bool = False, complete: str | None = None, repeat: bool = False,
            registry: Registry = REGISTRY) -> Callable[[Handler], Handler]:
    """Register a function as the command `parser.prog`; `repeat`: Enter on an empty line
    runs it again, as gdb's x, step, continue (the command may set ctx.repeat itself)."""
    def register(handler: Handler) -> Handler:
        registry.add(Command(parser.prog, parser, handler, category, aliases, requires, raw,
                             slash, complete, repeat=repeat))
        return handler
    return register


def prefix_command(parser: CommandParser, *, category: str = "inspecting",
                   aliases: tuple[str, ...] = (), registry: Registry = REGISTRY) -> Command:
    """A command made of subcommands (`info args`, `info kernels`, ...)."""
    return registry.add(Command(parser.prog, parser, None, category, aliases,
                                complete="subcommands"))


def subcommand(parent: Command, parser: CommandParser, *, requires: tuple[Guard, ...] = (),
               raw: bool = False, complete: str | None = None) -> Callable[[Handler], Handler]:
    """Register a function as `PARENT NAME`; the parser's prog is `PARENT NAME`."""
    name = parser.prog.split()[-1]

    def register(handler: Handler) -> Handler:
        parent.subcommands[name] = Command(parser.prog, parser, handler, parent.category, (),
                                           requires, raw, False, complete)
        return handler
    return register


def pick_subcommand(parent: Command, word: str) -> Command:
    if word in parent.subcommands:
        return parent.subcommands[word]
    found = sorted(n for n in parent.subcommands if n.startswith(word))
    if len(found) == 1:
        return parent.subcommands[found[0]]
    choices = ", ".join(sorted(parent.subcommands))
    if not found:
        raise CommandError(f"{parent.name}: unknown subcommand '{word}' (one of {choices})")
    raise CommandError(f"{parent.name}: ambiguous subcommand '{word}': {', '.join(found)}")


def split_line(line: str) -> tuple[str, str | None, str]:
    """`x/4xw arg0 + 8` -> ("x", "4xw", "arg0 + 8"); `info args` -> ("info", None, "args")."""
    text = line.strip()
    head, _, rest = text.partition(" ")
    suffix = None
    if "/" in head[1:]:
        head, _, suffix = head.partition("/")
    return head, suffix, rest.strip()


def _argv(cmd: Command, rest: str) -> list[str]:
    if cmd.raw:
        if rest in ("-h", "--help"):
            return [rest]
        return ["--", rest] if rest else []     # `p -arg3` is an expression, not an option
    try:
        return shlex.split(rest)
    except ValueError as err:
        raise CommandError(f"{cmd.name}: {err}") from None


def execute(ctx: Context, line: str, registry: Registry = REGISTRY) -> Outcome | None:
    """Run one command line. Whatever goes wrong is printed as one `error: ...` line;
    nothing but the command's outcome comes back."""
    try:
        return _execute(ctx, line, registry)
    except HelpShown as shown:
        for text in shown.text.rstrip("\n").splitlines():
            ctx.say(text.rstrip())
    except (CommandError, BreakpointError, TargetError, PatternError, ExprError,
            CudumpError) as err:
        ctx.say(f"error: {err}")
    except KeyboardInterrupt:
        ctx.say("error: interrupted")
    except Exception as err:  # a bug in a command must not end the session
        ctx.say(f"error: internal error in '{line.strip()}': {type(err).__name__}: {err}")
    return None


def _execute(ctx: Context, line: str, registry: Registry) -> Outcome | None:
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    ctx.repeat = None
    word, suffix, rest = split_line(text)
    cmd, prefix = registry.resolve(word)
    if prefix:
        rest = f"{prefix} {rest}".strip()
    if cmd.subcommands:
        if suffix is not None:
            raise CommandError(f"{cmd.name} takes no /FMT suffix")
        sub_word, _, rest = rest.partition(" ")
        if not sub_word or sub_word in ("-h", "--help"):
            if sub_word:
                raise HelpShown(subcommand_help(cmd))
            raise CommandError(f"{cmd.name} needs a subcommand: "
                               f"{', '.join(sorted(cmd.subcommands))}")
        cmd = pick_subcommand(cmd, sub_word)
        rest = rest.strip()
    elif suffix is not None and not cmd.slash:
        raise CommandError(f"{cmd.name} takes no /FMT suffix (x/FMT does)")
    args = cmd.parser.parse_args(_argv(cmd, rest))
    args.slash = suffix
    if cmd.requires and ctx.check_gone():
        return Outcome.RESUMED      # nothing held: the next stop, or the end of the run
    for guard in cmd.requires:
        problem = guard.check(ctx)
        if problem is not None:
            raise CommandError(f"{cmd.name}: {problem}")
    assert cmd.handler is not None
    outcome = cmd.handler(ctx, args)
    if cmd.repeat and ctx.repeat is None:
        ctx.repeat = text
    return outcome


def subcommand_help(cmd: Command) -> str:
    lines = [cmd.parser.format_help().rstrip(), "", "subcommands:"]
    width = max(len(n) for n in cmd.subcommands)
    for name in sorted(cmd.subcommands):
        lines.append(f"  {name:<{width}}  {cmd.subcommands[name].summary}")
    return "\n".join(lines) + "\n"
