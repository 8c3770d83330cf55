"""Breakpoint numbers as `delete`, `disable`, `enable` and `ignore` take them, and what
`enable` and `disable` share."""

from __future__ import annotations

from cudump.prompt.context import CommandError, Context


def breakpoint_number(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise CommandError(f"'{text}' is not a breakpoint number "
                           "(see 'info breakpoints')") from None
    if number < 1:
        raise CommandError(f"'{text}' is not a breakpoint number (they start at 1)")
    return number


def joined(numbers: list[int]) -> str:
    return ", ".join(str(n) for n in numbers)


def set_enabled(ctx: Context, texts: list[str], enabled: bool) -> None:
    """`enable`/`disable`: the breakpoints named (all without numbers), all or nothing."""
    table = ctx.debugger.breakpoints
    numbers = list(dict.fromkeys(breakpoint_number(n) for n in texts))
    for number in numbers:
        table.get(number)     # all exist, or nothing changes
    done: list[int] = []
    if not numbers:
        done = table.set_enabled(None, enabled)
    for number in numbers:
        done += table.set_enabled(number, enabled)
    ctx.debugger.changed()
    if not done:
        ctx.say("No breakpoints.")
    else:
        verb = "Enabled" if enabled else "Disabled"
        ctx.say(f"{verb} breakpoint{'s' if len(done) > 1 else ''} {joined(done)}.")
