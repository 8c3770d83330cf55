"""Regular expressions searched in time linear in the text: a Thompson automaton.

Python's engine backtracks: `.*.*Q` searched in a name of 5,000 characters takes minutes,
though the expression is harmless on short names. This module searches the same
expressions by following every way through them at once (the set of automaton states after
each character), so the work is the name's length times the automaton's size, whatever the
expression's shape. Whether there is a match is all it answers (no groups, no span), which
is all a kernel pattern asks.

It takes the regular part of Python's syntax: characters, sets and classes, `.`, anchors
and word boundaries, groups, alternatives and greedy or lazy repetitions, with their flags.
Each single-character test and each anchor is compiled by Python's own compiler from the
parsed expression, so case folding, Unicode classes and flags mean what they mean to `re`.
Backreferences, lookarounds, conditionals, atomic groups and possessive repetitions are not
regular; for them `build` raises NotRegular, and so it does when the automaton would be too
large (a large bounded repetition such as `x{100000}`).
"""

from __future__ import annotations

import re._compiler as _sre_compile  # type: ignore[import-not-found]
import re._parser as _sre_parse  # type: ignore[import-not-found]
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_STATES = 20_000      # larger automata (bounded repetitions of thousands) are refused
_CACHE_LIMIT = 50_000    # memoised steps kept per expression before they are dropped

_CHAR_OPS = {_sre_parse.LITERAL, _sre_parse.NOT_LITERAL, _sre_parse.ANY, _sre_parse.IN}
_REPEATS = {_sre_parse.MAX_REPEAT, _sre_parse.MIN_REPEAT}

_CHAR, _SPLIT, _ASSERT, _MATCH = range(4)

# What each construct Python's engine alone can match is called in messages.
_IRREGULAR = {
    _sre_parse.ASSERT: "a lookaround", _sre_parse.ASSERT_NOT: "a lookaround",
    _sre_parse.GROUPREF: "a backreference", _sre_parse.GROUPREF_EXISTS: "a conditional",
    _sre_parse.ATOMIC_GROUP: "an atomic group",
    _sre_parse.POSSESSIVE_REPEAT: "a possessive repetition",
}

Matcher = Callable[..., object]


class NotRegular(Exception):
    """The expression needs Python's engine (or would make too large an automaton); the
    message names the construct, as `a lookaround`."""


@dataclass
class _Builder:
    state: object                             # the parser's state: global flags, groups
    kinds: list[int] = field(default_factory=list)
    out1: list[int] = field(default_factory=list)
    out2: list[int] = field(default_factory=list)
    tests: list[int] = field(default_factory=list)      # index into atoms or anchors
    atoms: list[Matcher] = field(default_factory=list)
    anchors: list[Matcher] = field(default_factory=list)
    # Copies of a repetition share their parsed items: each is compiled once.
    _compiled: dict[tuple[int, tuple[tuple[int, int], ...]], Matcher] = field(
        default_factory=dict)

    def add(self, kind: int, out1: int = -1, out2: int = -1, test: int = -1) -> int:
        if len(self.kinds) >= MAX_STATES:
            raise NotRegular("a large bounded repetition")
        self.kinds.append(kind)
        self.out1.append(out1)
        self.out2.append(out2)
        self.tests.append(test)
        return len(self.kinds) - 1

    def compiled(self, item: tuple[object, object], scopes: tuple[tuple[int, int], ...]
                 ) -> Matcher:
        """Python's own matcher for one item, inside the flag scopes it is written in."""
        key = (id(item), scopes)
        known = self._compiled.get(key)
        if known is not None:
            return known
        data = [item]
        for add_flags, del_flags in reversed(scopes):
            data = [(_sre_parse.SUBPATTERN,
                     (None, add_flags, del_flags, _sre_parse.SubPattern(self.state, data)))]
        matcher = _sre_compile.compile(_sre_parse.SubPattern(self.state, data), 0).match
        self._compiled[key] = matcher
        return matcher

    def sequence(self, items: object, then: int, scopes: tuple[tuple[int, int], ...]) -> int:
        for item in reversed(list(items)):  # type: ignore[call-overload]
            then = self.item(item, then, scopes)
        return then

    def item(self, item: tuple[object, object], then: int,
             scopes: tuple[tuple[int, int], ...]) -> int:
        op, arg = item
        if op in _CHAR_OPS:
            self.atoms.append(self.compiled(item, scopes))
            return self.add(_CHAR, then, test=len(self.atoms) - 1)
        if op == _sre_parse.AT:
            self.anchors.append(self.compiled(item, scopes))
            return self.add(_ASSERT, then, test=len(self.anchors) - 1)
        if op == _sre_parse.SUBPATTERN:
            _group, add_flags, del_flags, sub = arg  # type: ignore[misc]
            return self.sequence(sub, then, scopes + ((add_flags, del_flags),))
        if op == _sre_parse.BRANCH:
            starts = [self.sequence(branch, then, scopes)
                      for branch in arg[1]]  # type: ignore[index]
            start = starts[-1]
            for other in reversed(starts[:-1]):
                start = self.add(_SPLIT, other, start)
            return start
        if op in _REPEATS:
            low, high, sub = arg  # type: ignore[misc]
            return self.repeat(sub, low, high, then, scopes)
        raise NotRegular(_IRREGULAR.get(op, "a construct that is not regular"))

    def repeat(self, sub: object, low: int, high: int, then: int,
               scopes: tuple[tuple[int, int], ...]) -> int:
        # Every copy adds states, and add() refuses past MAX_STATES: `x{100000}` stops there.
        if high is _sre_parse.MAXREPEAT:        # a loop: once more, or go on
            loop = self.add(_SPLIT, -1, then)
            self.out1[loop] = self.sequence(sub, loop, scopes)
            start = loop
        else:
            start = then
            for _ in range(high - low):          # each optional copy may be the last
                start = self.add(_SPLIT, self.sequence(sub, start, scopes), then)
        for _ in range(low):
            before = len(self.kinds)
            start = self.sequence(sub, start, scopes)
            if len(self.kinds) == before:        # an empty body: every copy is the same
                break
        return start


class Automaton:
    """A regular expression as a searchable automaton (see the module's docstring)."""

    def __init__(self, parsed: object) -> None:
        b = _Builder(parsed.state)  # type: ignore[attr-defined]
        accept = b.add(_MATCH)
        self.start = b.sequence(parsed, accept, ())
        self.kinds, self.out1, self.out2, self.tests = b.kinds, b.out1, b.out2, b.tests
        self.atoms, self.anchors = b.atoms, b.anchors
        # (states before closure, anchors' answers here) -> (character states, matched)
        self._closures: dict[tuple[frozenset[int], tuple[bool, ...]],
                             tuple[frozenset[int], bool]] = {}
        # (character states, character) -> states after it
        self._steps: dict[tuple[frozenset[int], str], frozenset[int]] = {}

    @property
    def size(self) -> int:
        return len(self.kinds)

    def _closure(self, states: frozenset[int], here: tuple[bool, ...]
                 ) -> tuple[frozenset[int], bool]:
        kinds, out1, out2, tests = self.kinds, self.out1, self.out2, self.tests
        seen: set[int] = set()
        chars: list[int] = []
        matched = False
        todo = [self.start, *states]
        while todo:
            s = todo.pop()
            if s in seen:
                continue
            seen.add(s)
            kind = kinds[s]
            if kind == _CHAR:
                chars.append(s)
            elif kind == _SPLIT:
                todo.append(out2[s])
                todo.append(out1[s])
            elif kind == _ASSERT:
                if here[tests[s]]:
                    todo.append(out1[s])
            else:
                matched = True
        return frozenset(chars), matched

    def _step(self, chars: frozenset[int], ch: str) -> frozenset[int]:
        atoms, tests, out1 = self.atoms, self.tests, self.out1
        return frozenset(out1[s] for s in chars if atoms[tests[s]](ch) is not None)

    def search(self, text: str) -> bool:
        """Whether the expression matches anywhere in `text` (as re.search would find)."""
        closures, steps, anchors = self._closures, self._steps, self.anchors
        if len(closures) > _CACHE_LIMIT or len(steps) > _CACHE_LIMIT:
            closures.clear()
            steps.clear()
        states: frozenset[int] = frozenset()
        here: tuple[bool, ...] = ()
        last = len(text)
        for at in range(last + 1):
            if anchors:
                here = tuple(a(text, at) is not None for a in anchors)
            key = (states, here)
            closed = closures.get(key)
            if closed is None:
                closed = closures[key] = self._closure(states, here)
            chars, matched = closed
            if matched:
                return True
            if at == last:
                return False
            ch = text[at]
            step = (chars, ch)
            nxt = steps.get(step)
            if nxt is None:
                nxt = steps[step] = self._step(chars, ch)
            states = nxt
        return False


def build(parsed: object) -> Automaton:
    """The automaton of a parsed expression; raises NotRegular (see the module's docstring)."""
    return Automaton(parsed)
