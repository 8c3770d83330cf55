"""The shape of a JSON record cudump reads back (captures.jsonl, flight.jsonl): key by key,
the type of each value and whether it may be missing or null; everything else is left alone.

Types: "int", "num" (a whole or a decimal number), "str", "bool", "int3" (a list of 3 whole
numbers), "ints" (a list of whole numbers), "strs" (a list of strings), "list", a nested shape
(an object), or a list holding one nested shape (a list of such objects).
"""

from __future__ import annotations

import json
from typing import Any

Shape = dict[str, tuple[Any, bool]]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _expected(kind: Any) -> str:
    if isinstance(kind, dict):
        return "an object"
    if isinstance(kind, list):
        return "a list"
    return {"int": "a whole number", "num": "a number", "str": "a string",
            "int3": "a list of 3 whole numbers", "ints": "a list of whole numbers",
            "strs": "a list of strings",
            "list": "a list", "bool": "true or false"}[kind]


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


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
            ok = {"int": _is_int(value), "str": isinstance(value, str),
                  "num": isinstance(value, int | float) and not isinstance(value, bool),
                  "int3": isinstance(value, list) and len(value) == 3
                  and all(_is_int(v) for v in value),
                  "ints": isinstance(value, list) and all(_is_int(v) for v in value),
                  "strs": isinstance(value, list) and all(isinstance(v, str) for v in value),
                  "list": isinstance(value, list), "bool": isinstance(value, bool)}[kind]
        if not ok:
            return f"field '{name}': expected {_expected(kind)}, got {_shown(value)}"
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
