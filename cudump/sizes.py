"""Byte sizes: read from the command line (4096, 512K, 256M, 2G: binary units) and
written for people."""

from __future__ import annotations

import argparse
import re

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"(\d{1,20})\s*([KMGT]?)(?:i?B)?", re.IGNORECASE)


def parse_size(text: str, *, minimum: int = 0, maximum: int = 1 << 50) -> int:
    """Parses a size; raises ValueError with a message fit for the user."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"bad size '{text}': use a number of bytes, or one with K, M or G "
                         "(e.g. 512M)")
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value < minimum:
        raise ValueError(f"size '{text}' is too small: at least {minimum} bytes")
    if value > maximum:
        raise ValueError(f"size '{text}' is too large: at most {maximum >> 30} GiB")
    return value


def size_arg(minimum: int = 0, maximum: int = 1 << 50):  # noqa: ANN201 - argparse type
    """An argparse `type=` for sizes: errors become argparse's one-line usage errors."""

    def parse(text: str) -> int:
        try:
            return parse_size(text, minimum=minimum, maximum=maximum)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = "size"
    return parse


def human_bytes(n: int) -> str:
    """A byte count for people: 512 B, 4.0 KiB, 2.5 MiB, 1.0 GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
