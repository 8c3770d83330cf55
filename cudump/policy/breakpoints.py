"""Breakpoints: where the prompt stops a launch, with gdb's conditions, ignore counts and tbreak.

A breakpoint names kernels with a KernelPattern (the same matcher as rules).
Whether a function can stop at all is decided per function and cached in the
shim (a `stop` want); whether a particular launch stops is decided here, when
the shim reports it: the breakpoint must be enabled, its condition (an
expression over the launch's argument values, the rules' evaluator) true, and
its ignore count used up. A temporary breakpoint deletes itself when it stops.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from cudump.errors import CudumpError
from cudump.kernels.expr import Expr, ExprError, parse_expr
from cudump.kernels.pattern import HasWhere, KernelPattern, PatternError

Number = int | float


class BreakpointError(CudumpError):
    """A breakpoint that cannot be made or found; the message says why."""


@dataclass
class Breakpoint:
    number: int
    pattern: KernelPattern
    condition: Expr | None = None
    temporary: bool = False
    enabled: bool = True
    ignore: int = 0        # launches still to pass over
    hits: int = 0          # launches it stopped at (or was ignored at)

    def describe(self) -> str:
        kind = "tbreak" if self.temporary else "break"
        text = f"{kind} {self.pattern.text}"
        if self.condition is not None:
            text += f" if {self.condition.text}"
        return text


def parse_break_spec(spec: str) -> tuple[KernelPattern, Expr | None]:
    """`PATTERN [if EXPR]` -> (pattern, condition). Raises BreakpointError."""
    text = spec.strip()
    condition = None
    head, sep, tail = text.partition(" if ")
    if sep:
        text = head.strip()
        try:
            condition = parse_expr(tail.strip())
        except (ExprError, RecursionError) as err:
            raise BreakpointError(f"bad condition {tail.strip()!r}: {err}") from None
    if not text:
        raise BreakpointError("a breakpoint needs a kernel pattern, e.g. 'break vecAdd' or "
                              "'break device::k* if arg5 > 1000'")
    try:
        return KernelPattern(text), condition
    except PatternError as err:
        raise BreakpointError(str(err)) from None


class Breakpoints:
    """The breakpoint table of one run. Thread-safe; `generation` counts changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[int, Breakpoint] = {}
        self._next = 1
        self.generation = 0

    def __iter__(self) -> Iterator[Breakpoint]:
        with self._lock:
            return iter(sorted(self._items.values(), key=lambda b: b.number))

    def __len__(self) -> int:
        return len(self._items)

    def add(self, spec: str, *, temporary: bool = False) -> Breakpoint:
        pattern, condition = parse_break_spec(spec)
        with self._lock:
            bp = Breakpoint(self._next, pattern, condition, temporary)
            self._items[bp.number] = bp
            self._next += 1
            self.generation += 1
        return bp

    def get(self, number: int) -> Breakpoint:
        with self._lock:
            bp = self._items.get(number)
        if bp is None:
            raise BreakpointError(f"no breakpoint number {number} (see 'info breakpoints')")
        return bp

    def delete(self, number: int | None = None) -> list[int]:
        """Deletes one breakpoint, or all of them; returns the numbers deleted."""
        with self._lock:
            if number is None:
                gone = sorted(self._items)
                self._items.clear()
            else:
                if number not in self._items:
                    raise BreakpointError(f"no breakpoint number {number} "
                                          "(see 'info breakpoints')")
                del self._items[number]
                gone = [number]
            self.generation += 1
        return gone

    def set_enabled(self, number: int | None, enabled: bool) -> list[int]:
        with self._lock:
            targets = list(self._items) if number is None else [number]
            for n in targets:
                if n not in self._items:
                    raise BreakpointError(f"no breakpoint number {n} (see 'info breakpoints')")
                self._items[n].enabled = enabled
            self.generation += 1
        return sorted(targets)

    def set_ignore(self, number: int, count: int) -> Breakpoint:
        if count < 0:
            raise BreakpointError("the ignore count must be a whole number >= 0")
        bp = self.get(number)
        with self._lock:
            bp.ignore = count
        return bp

    def wants(self, demangled: str, mangled: str) -> bool:
        """Could any enabled breakpoint stop a launch of this function?"""
        with self._lock:
            items = [b for b in self._items.values() if b.enabled]
        return any(b.pattern.matches(demangled, mangled) for b in items)

    def hit(self, demangled: str, mangled: str, values: Mapping[str, Number],
            where: HasWhere | None = None) -> tuple[Breakpoint | None, list[str]]:
        """The breakpoint this launch (made `where`: a `scope:` pattern asks) stops at, if
        any, and warnings (a condition that could not be evaluated stops, as in gdb, and
        says why)."""
        warnings: list[str] = []
        with self._lock:
            items = sorted((b for b in self._items.values() if b.enabled),
                           key=lambda b: b.number)
            for bp in items:
                if not bp.pattern.matches_launch(demangled, mangled, where):
                    continue
                if bp.condition is not None:
                    try:
                        if not bp.condition.evaluate(values):
                            continue
                    except (ExprError, ZeroDivisionError, OverflowError, RecursionError) as err:
                        warnings.append(f"breakpoint {bp.number}: condition "
                                        f"'{bp.condition.text}' cannot be evaluated here "
                                        f"({err}); stopping")
                bp.hits += 1
                if bp.ignore > 0:
                    bp.ignore -= 1
                    continue
                if bp.temporary:
                    del self._items[bp.number]
                    self.generation += 1
                return bp, warnings
        return None, warnings
