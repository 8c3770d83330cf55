"""Kernel-name globs matched in time linear in the name, whatever the glob.

`*` is any run of characters and `?` one character; every other character stands for
itself. A glob without `?` is matched by its pieces between stars, each found leftmost in
turn (str.find, linear in the name); one with `?` by a bit-parallel automaton (one step of
a few big-integer operations per character of the name). Neither backtracks, so a glob of
thousands of characters against a name of thousands costs milliseconds, not minutes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Glob:
    pattern: str
    _pieces: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _has_any: bool = field(init=False, repr=False, compare=False)
    # For the automaton: per character, the token positions it can take (bit i+1 for
    # token i); `?` tokens are in every mask and in _any_mask, the one for other
    # characters. _loops: the states a star follows (they stay on any character).
    _masks: dict[str, int] = field(init=False, repr=False, compare=False)
    _any_mask: int = field(init=False, repr=False, compare=False)
    _loops: int = field(init=False, repr=False, compare=False)
    _final: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern = re.sub(r"\*+", "*", self.pattern)       # runs of `*` are one `*`
        set_ = object.__setattr__
        set_(self, "_pieces", tuple(pattern.split("*")))
        set_(self, "_has_any", "?" in pattern)
        masks: dict[str, int] = {}
        any_mask = loops = 0
        token = 0
        for ch in pattern:
            if ch == "*":
                loops |= 1 << token
                continue
            bit = 1 << (token + 1)
            if ch == "?":
                any_mask |= bit
            else:
                masks[ch] = masks.get(ch, 0) | bit
            token += 1
        set_(self, "_masks", {ch: m | any_mask for ch, m in masks.items()})
        set_(self, "_any_mask", any_mask)
        set_(self, "_loops", loops)
        set_(self, "_final", 1 << token)

    def fullmatch(self, text: str) -> bool:
        return self._automaton(text) if self._has_any else self._pieces_match(text)

    def _pieces_match(self, text: str) -> bool:
        pieces = self._pieces
        if len(pieces) == 1:
            return text == pieces[0]
        first, last = pieces[0], pieces[-1]
        if len(first) + len(last) > len(text) or not text.startswith(first) \
                or not text.endswith(last):
            return False
        at, stop = len(first), len(text) - len(last)
        for piece in pieces[1:-1]:       # leftmost of each leaves the most room for the rest
            found = text.find(piece, at, stop)
            if found < 0:
                return False
            at = found + len(piece)
        return True

    def _automaton(self, text: str) -> bool:
        masks, any_mask, loops = self._masks, self._any_mask, self._loops
        state = 1                         # bit i: the first i tokens matched so far
        for ch in text:
            state = ((state << 1) & masks.get(ch, any_mask)) | (state & loops)
            if not state:
                return False
        return bool(state & self._final)
