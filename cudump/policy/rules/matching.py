"""Which launches and which arguments a rule takes.

A rule's pattern names the kernels (cudump.kernels.pattern); among the launches it
matches, counted per rule and per process from 1, `skip`, `every` and `count`
choose; among a chosen launch's arguments, `args` and `overrides` choose the buffers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, Literal, TypeVar

from cudump.kernels.args import ArgValue
from cudump.kernels.pattern import HasWhere, KernelPattern


class RuleMatching:
    """The matching half of a rule (rule.Rule), over the fields it declares."""

    matcher: KernelPattern
    skip: int
    count: int | None
    every: int
    args: list[int] | Literal["pointers"]
    overrides: Mapping[int, object]     # argument index -> rule.ArgOverride
    scope: str | None                   # a rule file's `scope:` glob (scopes.Where.matches)

    def matches(self, demangled: str, mangled: str) -> bool:
        """Whether the rule wants this function; the caller caches it per function. A rule
        decided by launch (`by_launch`) may still pass over a launch (matches_where)."""
        return self.matcher.matches(demangled, mangled)

    @property
    def by_launch(self) -> bool:
        """Whether the rule names launches by where they were made (its `scope:` field, or
        a `scope:GLOB` pattern): decided at each launch, which the shim must then ask about
        and never count or repeat on its own."""
        return self.scope is not None or self.matcher.scope is not None

    def matches_where(self, where: HasWhere | None) -> bool:
        """Whether a launch of a function the rule wants is one it takes, by where it was
        made (`where`: the launch's; None: unknown)."""
        return self.matcher.matches_where(where) and (
            self.scope is None or (where is not None and where.matches(self.scope)))

    @property
    def takes_every_launch(self) -> bool:
        """No skip, every or count, nor a scope: every launch of a function the pattern
        matches is selected."""
        return (self.skip == 0 and self.every == 1 and self.count is None
                and not self.by_launch)

    def selects(self, match_number: int) -> bool:
        """Whether the n-th matching launch (1-based, per process) is snapshotted."""
        k = match_number - self.skip - 1
        if k < 0 or k % self.every:
            return False
        return self.count is None or k // self.every < self.count

    def selected_args(self, args: Sequence[ArgValue]) -> list[int]:
        """Indexes of the launch's arguments to snapshot.

        `pointers` takes every argument that looks like a pointer, and those
        the rule gives overrides for.
        """
        if self.args == "pointers":
            return [a.index for a in args if a.looks_like_pointer or a.index in self.overrides]
        present = {a.index for a in args}
        return [i for i in self.args if i in present]


R = TypeVar("R", bound=RuleMatching)


class RuleCounter(Generic[R]):
    """Counts the launches each rule matches, per process, where the controller counts them
    (break rules): the first rule, in order, that selects a launch takes it."""

    def __init__(self, rules: Sequence[R]) -> None:
        self.rules = list(rules)
        self._matches: dict[tuple[int, int], int] = {}

    def wants(self, demangled: str, mangled: str) -> bool:
        """Whether any of the rules matches the function."""
        return any(r.matches(demangled, mangled) for r in self.rules)

    def selected(self, pid: int, demangled: str, mangled: str,
                 where: HasWhere | None = None) -> R | None:
        """The rule that selects this launch of the function in process `pid` (made
        `where`), or None. A rule counts only the launches it matches."""
        for rule in self.rules:
            if not rule.matches(demangled, mangled) or not rule.matches_where(where):
                continue
            key = (pid, id(rule))
            n = self._matches.get(key, 0) + 1
            self._matches[key] = n
            if rule.selects(n):
                return rule
        return None
