"""How a rule (or the prompt's `dump`) says to read an argument's buffer where its signature
does not: the element type, the geometry as expressions over the arguments, the range of
values an image shows, the pointer inside a struct passed by value (kernels/geometry.py
reads it)."""

from __future__ import annotations

from dataclasses import dataclass

from cudump.kernels.expr import Expr


@dataclass
class ArgOverride:
    dtype: str | None = None
    note: str | None = None           # what the dtype only stands for (bfloat16 as uint16 bits)
    channels: Expr | None = None
    width: Expr | None = None
    height: Expr | None = None
    pitch: Expr | None = None
    count: Expr | None = None
    range: tuple[float, float] | None = None
    # The argument is a struct passed by value (e.g. std::array<char*, 3>):
    # snapshot the buffer of the pointer stored at this byte offset in it.
    field: int | None = None

    @property
    def is_2d(self) -> bool:
        return self.width is not None or self.height is not None or self.pitch is not None
