"""The values of `cudump run`'s options that argparse checks: each a one-line error naming
the option and what it takes."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from cudump.wire.protocol import MAX_FLIGHT


def _number(text: str, fits: Callable[[int], bool], error: str) -> int:
    """`text` as a whole number that `fits`, else argparse's error `error` (one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(error) from None
    if not fits(value):
        raise argparse.ArgumentTypeError(error)
    return value


def whole(option: str, low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        return _number(text, lambda v: low <= v <= high,
                       f"bad {option} '{text}': a whole number from {low}")

    return parse


def ring_slots(text: str) -> int:
    return _number(text, lambda v: 2 <= v <= 1 << 24 and not v & (v - 1),
                   f"bad ring size '{text}': a power of two from 2 to {1 << 24}")


def error_exitcode(text: str) -> int:
    return _number(text, lambda v: 1 <= v <= 255,
                   f"bad --error-exitcode '{text}': an exit status from 1 to 255")


def step_range(text: str) -> str:
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError("a range's name, not empty")
    return text


def flight_slots(text: str) -> int:
    return _number(text, lambda v: 1 <= v <= MAX_FLIGHT,
                   f"bad --flight '{text}': the launches each process keeps, from 1 to "
                   f"{MAX_FLIGHT}")
