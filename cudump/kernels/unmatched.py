"""A kernel pattern that matched nothing, said with the names it may have meant.

A pattern that names no kernel of a run (`--break vec` where the kernel is `vecAdd`: a glob
matches a name as a whole) would otherwise end the run without a word. At the end of a run,
and in `ls`/`stats --kernel`, each such pattern is named with the closest kernel names seen:
the glob with stars around it where its text is part of a seen name, else the names closest
by difflib.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from cudump.kernels.pattern import KernelPattern, name_forms

# How many seen names a message lists at most.
SHOWN = 3


@dataclass(frozen=True)
class SeenKernel:
    """A kernel function a run launched."""

    demangled: str
    mangled: str = ""

    @property
    def short(self) -> str:
        """The name without its return type and parameters (`ns::k<2>`), as messages show it."""
        return name_forms(self.demangled)[2]


@dataclass(frozen=True)
class NamedPattern:
    """A kernel pattern with the words that gave it (`--break 'vec'`, `r.yaml:3: kernel 'vec'`)."""

    label: str
    pattern: KernelPattern


def matched_nothing(pattern: KernelPattern, seen: Iterable[SeenKernel]) -> bool:
    return not any(pattern.matches(k.demangled, k.mangled) for k in seen)


def hint(pattern: KernelPattern, seen: Iterable[SeenKernel]) -> str:
    """What follows `matched no launch; `: a glob with stars where the text is part of a seen
    name, else the closest names seen, else that no kernel was launched."""
    kernels = sorted(set(seen), key=lambda k: k.demangled)
    if not kernels:
        return "no kernel was launched"
    shorts = list(dict.fromkeys(k.short for k in kernels))
    text = pattern.text
    if not pattern.is_regex and text.strip("*"):
        word = text.strip("*")
        holding = [k.short for k in kernels
                   if any(word in form for form in pattern.candidates(k.demangled,
                                                                      k.mangled or k.demangled))]
        if holding:
            starred = KernelPattern(f"*{word}*", pattern.subject)
            return (f"did you mean '{starred.text}'? seen: "
                    f"{_listed(list(dict.fromkeys(holding)))}")
    bare = text.split(":", 1)[1] if pattern.is_regex else text.strip("*")
    close = difflib.get_close_matches(bare, shorts, n=SHOWN, cutoff=0.4)
    if close:
        return f"closest seen: {_listed(close)}"
    return f"seen: {_listed(shorts)}"


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    more = len(names) - SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def unmatched_lines(patterns: Iterable[NamedPattern], seen: Iterable[SeenKernel],
                    prefix: str = "cudump", what: str = "launch") -> list[str]:
    """One line for each pattern (by its label, once) that matched none of `seen`:
    `cudump: --break 'vec' matched no launch; did you mean '*vec*'? seen: vecAdd`."""
    kernels = list(seen)
    lines: list[str] = []
    done: set[str] = set()
    for named in patterns:
        if named.label in done or not matched_nothing(named.pattern, kernels):
            continue
        done.add(named.label)
        lines.append(f"{prefix}: {named.label} matched no {what}; "
                     f"{hint(named.pattern, kernels)}")
    return lines
