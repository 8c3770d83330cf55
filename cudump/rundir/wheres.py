"""A record's where (scopes.py's record fields), read back from a manifest, trace or flight
record, for the offline tools and reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cudump.launches.scopes import Where

# The record fields a Where writes (Where.fields).
WHERE_FIELDS = ("scope", "layer", "pass", "step", "source", "collective", "collective_op")


def record_where(data: Mapping[str, Any]) -> Where:
    """The where a record's fields say. A `source` that is no "file:line" is some other
    record's field of that name (the prompt's `dump` writes "source": "dump"), not a line."""
    where = Where.from_fields(data)
    if where.source is not None and ":" not in where.source:
        where = replace(where, source=None)
    return where


def set_where(extra: dict[str, Any], where: Where) -> None:
    """A record's where fields made `where`'s (those of another launch dropped)."""
    for name in WHERE_FIELDS:
        extra.pop(name, None)
    extra.update(where.fields())
