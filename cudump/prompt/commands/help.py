"""`help [CMD]`: the list of commands, or one command's usage and options."""

from __future__ import annotations

import argparse

from cudump.prompt.context import Context
from cudump.prompt.registry import (
    CATEGORIES,
    REGISTRY,
    HelpShown,
    make_parser,
    pick_subcommand,
    subcommand_help,
)
from cudump.prompt.registry import command as register

TITLES = {"running": "Running", "breakpoints": "Breakpoints", "inspecting": "Inspecting",
          "support": "Support"}

parser = make_parser("help", "List the commands, or show how to use one (also: CMD -h).")
parser.add_argument("command", nargs="*", metavar="CMD", help="a command (info args: a "
                    "subcommand)")


def overview() -> list[str]:
    lines = ["Commands (help CMD for more; a unique prefix of a name works too):"]
    entries = []
    for cmd in REGISTRY.commands.values():
        names = ", ".join([cmd.name, *sorted(REGISTRY.aliases_of(cmd.name), key=len)])
        entries.append((cmd.category, names, cmd.summary))
    width = max(len(names) for _, names, _ in entries)
    for category in CATEGORIES:
        chosen = sorted(e for e in entries if e[0] == category)
        if not chosen:
            continue
        lines.append(f"{TITLES[category]}:")
        for _, names, summary in chosen:
            lines.append(f"  {names:<{width}}  {summary}")
    expansions = [f"{a} = {t}" for a, t in sorted(REGISTRY.aliases.items()) if " " in t]
    if expansions:
        lines.append(f"Shorthands: {', '.join(expansions)}")
    return lines


@register(parser, category="support", aliases=("h",), complete="commands")
def help_(ctx: Context, args: argparse.Namespace) -> None:
    if not args.command:
        for line in overview():
            ctx.say(line)
        return
    cmd, prefix = REGISTRY.resolve(args.command[0])
    words = [*prefix.split(), *args.command[1:]]
    if cmd.subcommands and words:
        cmd = pick_subcommand(cmd, words[0])
    text = subcommand_help(cmd) if cmd.subcommands else cmd.parser.format_help()
    raise HelpShown(text)
