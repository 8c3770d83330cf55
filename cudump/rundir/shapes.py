"""The shape of a JSON record cudump reads back (captures.jsonl, flight.jsonl): key by key,
the type of each value and whether it may be missing or null; everything else is left alone.

Types: "int" (a whole number that fits in 64 bits, signed or not), "count" (a whole number
from 0 to 2^63-1: a size, an offset, a count, a launch number), "u64" (from 0 to 2^64-1: a
device address), "num" (a whole or a decimal number), "str", "bool", "int3" (a list of 3
whole numbers from 0 to 2^32-1: a grid or a block), "ints" (a list of counts), "strs" (a list
of strings), "list", a nested shape (an object), or a list holding one nested shape (a list
of such objects). A number out of its range is named like a value of the wrong type: a record's
numbers are used as sizes, offsets and counts, and one of 2^63 or more is none of them.
"""

from __future__ import annotations

import json
from typing import Any

Shape = dict[str, tuple[Any, bool]]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _within(value: Any, low: int, high: int) -> bool:
    """A whole number with low <= value < high."""
    return _is_int(value) and low <= value < high


_I64, _U64, _U32 = 1 << 63, 1 << 64, 1 << 32


def _is_count(value: Any) -> bool:
    return _within(value, 0, _I64)


def _expected(kind: Any) -> str:
    if isinstance(kind, dict):
        return "an object"
    if isinstance(kind, list):
        return "a list"
    return {"int": "a whole number", "count": "a whole number", "u64": "a whole number",
            "num": "a number", "str": "a string",
            "int3": "a list of 3 whole numbers", "ints": "a list of whole numbers",
            "strs": "a list of strings",
            "list": "a list", "bool": "true or false"}[kind]


# Where a whole number is out of its kind's range: the range, said.
_RANGES = {"int": "from -2^63 to 2^64-1", "count": "from 0 to 2^63-1",
           "u64": "from 0 to 2^64-1", "int3": "from 0 to 2^32-1", "ints": "from 0 to 2^63-1"}


def _out_of_range(value: Any, kind: str) -> bool:
    """A whole number (or a list of them) of the right type but out of `kind`'s range."""
    if not isinstance(kind, str) or kind not in _RANGES:
        return False
    if kind in ("int", "count", "u64"):
        return _is_int(value)
    if isinstance(value, list):
        return bool(value) and all(_is_int(n) for n in value) and not (
            kind == "int3" and len(value) != 3)
    return False


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _fits(value: Any, kind: str) -> bool:
    if kind == "int":
        return _within(value, -_I64, _U64)
    if kind == "count":
        return _is_count(value)
    if kind == "u64":
        return _within(value, 0, _U64)
    if kind == "num":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if not isinstance(value, list):
        return False
    if kind == "int3":
        return len(value) == 3 and all(_within(v, 0, _U32) for v in value)
    if kind == "ints":
        return all(_is_count(v) for v in value)
    if kind == "strs":
        return all(isinstance(v, str) for v in value)
    return kind == "list"


def unknown_field(data: dict[str, Any], shape: Shape) -> str | None:
    """The first key of `data` (in sorted order) that `shape` does not name, if any: for
    records whose writer and reader are the same classes, where a stray key is a bad file."""
    unknown = sorted(set(data) - set(shape))
    return unknown[0] if unknown else None


def shape_problem(data: Any, shape: Shape, prefix: str = "") -> str | None:
    """The first field of `data` that does not fit `shape`: "field 'x': expected ..."."""
    for key, (kind, optional) in shape.items():
        name = f"{prefix}{key}"
        if key not in data or data[key] is None:
            if optional:
                continue
            return f"field '{name}' is missing"
        value = data[key]
        if isinstance(kind, dict):
            ok = isinstance(value, dict)
        elif isinstance(kind, list):
            ok = isinstance(value, list)
            if ok:
                bad = next((i for i, v in enumerate(value) if not isinstance(v, dict)), None)
                if bad is not None:
                    return f"field '{name}[{bad}]': expected an object, got {_shown(value[bad])}"
        else:
            ok = _fits(value, kind)
        if not ok:
            within = f" {_RANGES[kind]}" if _out_of_range(value, kind) else ""
            return f"field '{name}': expected {_expected(kind)}{within}, got {_shown(value)}"
        if isinstance(kind, dict):
            problem = shape_problem(value, kind, f"{name}.")
        elif isinstance(kind, list):
            problem = next((found for i, item in enumerate(value)
                            if (found := shape_problem(item, kind[0], f"{name}[{i}]."))), None)
        else:
            problem = None
        if problem:
            return problem
    return None
