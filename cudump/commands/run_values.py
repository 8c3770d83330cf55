"""The values of `cudump run`'s options that argparse checks: each a one-line error naming
the option and what it takes."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from cudump.wire.protocol import MAX_FLIGHT


def whole(option: str, low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"bad {option} '{text}': a whole number from "
                                             f"{low}")
        return value

    return parse


def ring_slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 2 or value > 1 << 24 or value & (value - 1):
        raise argparse.ArgumentTypeError(f"bad ring size '{text}': a power of two from 2 "
                                         f"to {1 << 24}")
    return value


def error_exitcode(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 255:
        raise argparse.ArgumentTypeError(f"bad --error-exitcode '{text}': an exit status "
                                         "from 1 to 255")
    return value


def step_range(text: str) -> str:
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError("a range's name, not empty")
    return text


def flight_slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_FLIGHT:
        raise argparse.ArgumentTypeError(f"bad --flight '{text}': the launches each process "
                                         f"keeps, from 1 to {MAX_FLIGHT}")
    return value
