"""The kernel patterns a run was given (rules, --break, --capture-launch, -k), each with the
words that gave it, for saying at the end of the run which of them matched no launch
(cudump.kernels.unmatched)."""

from __future__ import annotations

from collections.abc import Sequence

from cudump.kernels.pattern import PatternError
from cudump.kernels.unmatched import NamedPattern
from cudump.policy.breakpoints import BreakpointError, parse_break_spec
from cudump.policy.rules import Rule

# The options whose rules take every kernel unless -k/--kernel-name names some.
_NARROWED = ("--digest", "--check-nan")


def given_patterns(rules: Sequence[Rule], breaks: Sequence[str]) -> list[NamedPattern]:
    """Each pattern of the run's rules and --break options but `*` (which names every
    kernel): `--break 'vec'`, `--capture-launch 'vec'`, `--kernel-name 'vec'`,
    `rules.yaml:3: kernel 'vec'`."""
    named: list[NamedPattern] = []
    for rule in rules:
        text = rule.matcher.text
        if text == "*":
            continue
        if rule.option in _NARROWED:
            label = f"--kernel-name '{text}'"
        elif rule.option is not None:
            label = f"{rule.option} '{text}'"
        else:
            label = f"{rule.path}:{rule.line}: kernel '{text}'"
        named.append(NamedPattern(label, rule.matcher))
    for spec in breaks:
        try:
            pattern, _ = parse_break_spec(spec)
        except (BreakpointError, PatternError):
            continue           # refused before the run started
        if pattern.text != "*":
            named.append(NamedPattern(f"--break '{pattern.text}'", pattern))
    return named
