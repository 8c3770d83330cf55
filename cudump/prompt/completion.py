"""Tab completion: command names, subcommands, kernel names, argN, breakpoint numbers."""

from __future__ import annotations

from collections.abc import Iterable

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from cudump.kernels.pattern import name_forms
from cudump.prompt.context import CommandError, Context
from cudump.prompt.registry import REGISTRY, Registry, pick_subcommand, split_line


def kernel_names(ctx: Context) -> list[str]:
    names: set[str] = set()
    for seen in ctx.debugger.kernels():
        _full, _callable, qualified, base = name_forms(seen.kernel)
        names.update({qualified, base})
    return sorted(n for n in names if n)


def _arg_names(ctx: Context) -> list[str]:
    if ctx.stop is None:
        return []
    return [f"arg{a.index}" for a in ctx.stop.info.args]


def complete(ctx: Context, text: str, registry: Registry = REGISTRY) -> tuple[list[str], int]:
    """Candidates for the word before the cursor, and that word's length."""
    if " " not in text.lstrip():
        word = text.lstrip()
        return [n for n in registry.names() if n.startswith(word)], len(word)
    head = split_line(text)[0]
    try:
        cmd, prefix = registry.resolve(head)
    except CommandError:
        return [], 0
    # The text after the command as typed, keeping a trailing space (a new word starts).
    after = text.lstrip().split(" ", 1)[1].lstrip()
    if prefix:
        after = f"{prefix} {after}"
    kind = cmd.complete
    if cmd.subcommands:
        sub_word, space, remainder = after.partition(" ")
        if not space:
            return [n for n in sorted(cmd.subcommands) if n.startswith(sub_word)], len(sub_word)
        try:
            cmd = pick_subcommand(cmd, sub_word)
        except CommandError:
            return [], 0
        kind, after = cmd.complete, remainder
    if kind == "kernels":
        # A pattern may hold spaces: the whole rest of the line is the word.
        return [n for n in kernel_names(ctx) if n.startswith(after)], len(after)
    word = after.rsplit(" ", 1)[-1] if after else ""
    candidates: Iterable[str]
    if kind == "args":
        # `x/4xw arg0+8`, `p arg1[2]`: complete the argN being typed.
        stem = word.lstrip("*&(")
        candidates = [n for n in _arg_names(ctx) if n.startswith(stem)]
        return sorted(candidates), len(stem)
    if kind == "breakpoints":
        candidates = [str(bp.number) for bp in ctx.debugger.breakpoints]
    elif kind == "commands":
        candidates = registry.names()
    else:
        return [], 0
    return [c for c in candidates if c.startswith(word)], len(word)


class PromptCompleter(Completer):
    def __init__(self, ctx: Context, registry: Registry = REGISTRY) -> None:
        self.ctx = ctx
        self.registry = registry

    def get_completions(self, document: Document, complete_event: CompleteEvent
                        ) -> Iterable[Completion]:
        try:
            candidates, length = complete(self.ctx, document.text_before_cursor, self.registry)
        except Exception:  # completion must never break the input line
            return
        for candidate in candidates:
            yield Completion(candidate, start_position=-length)
