"""Breakpoint numbers as `delete`, `disable`, `enable` and `ignore` take them."""

from __future__ import annotations

from cudump.prompt.context import CommandError


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
