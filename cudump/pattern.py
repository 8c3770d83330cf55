"""Kernel-name patterns: the one matcher used by rules, breakpoints and the offline tools.

A pattern is a glob (`*` any run of characters, `?` one character; every other
character stands for itself, brackets too, since C++ names hold them) or, with
a `re:` prefix, a Python regular expression.

With `subject="demangled"` (the default) a glob matches when it matches, as a
whole, any of these forms of the demangled name:

- the full name                     `void device::k<2>(uchar4*, int)`
- without the return type           `device::k<2>(uchar4*, int)`
- without the parameter list        `device::k<2>`
- the bare function name            `k`

so `device::k*`, `device::k<2>` and `k` all name that kernel, as `break k`
does in gdb. A regular expression is searched in the full name with and
without the return type. `subject="base"` matches only the bare name and
`subject="mangled"` only the symbol (`_Z1kPf`).

Regular expressions run on untrusted-looking input (kernel names can be long),
so patterns whose shape makes Python's backtracking engine exponential — a
repeated group that itself contains a repetition, such as `(a+)+` or `(\\w*)*`
— are refused with a message saying how to write them instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from cudump.signature import parse_signature

Subject = Literal["demangled", "mangled", "base"]
SUBJECTS: tuple[Subject, ...] = ("demangled", "mangled", "base")


class PatternError(ValueError):
    """A pattern that cannot be used; the message says why and how to fix it."""


@lru_cache(maxsize=4096)
def name_forms(demangled: str) -> tuple[str, str, str, str]:
    """(full, without return type, without parameters, bare name) of a demangled name."""
    text = demangled.strip()
    try:
        sig = parse_signature(text)
    except Exception:  # an odd name must never stop matching
        return text, text, text, text
    callable_text = text[len(sig.return_type):].lstrip() if sig.return_type else text
    return text, callable_text, sig.qualified_name or text, sig.base_name or text


def _glob_regex(pattern: str) -> re.Pattern[str]:
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.DOTALL)


# A group that is repeated and contains a repetition: `(a+)+`, `(x*)*`, `(?:ab+){2,}`.
_NESTED_REPEAT = re.compile(r"\((?:[^()\\]|\\.)*[*+}](?:[^()\\]|\\.)*\)\s*[*+{]")


def compile_regex(source: str) -> re.Pattern[str]:
    """Compiles a user's regular expression; raises PatternError with the reason."""
    if not source:
        raise PatternError("empty regular expression after 're:'")
    if _NESTED_REPEAT.search(source):
        raise PatternError(
            f"regular expression {source!r} repeats a group that itself repeats (like "
            "'(a+)+'), which can take exponential time; drop the inner or the outer repetition")
    try:
        return re.compile(source)
    except re.error as err:
        raise PatternError(f"invalid regular expression {source!r}: {err.msg} at position "
                           f"{err.pos}") from None
    except RecursionError:
        raise PatternError(f"regular expression {source!r} is nested too deeply") from None


@dataclass(frozen=True)
class KernelPattern:
    text: str                       # as written, `re:` prefix included
    subject: Subject = "demangled"
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)
    is_regex: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.subject not in SUBJECTS:
            raise PatternError(f"unknown subject {self.subject!r}; use one of "
                               f"{', '.join(SUBJECTS)}")
        if self.text.startswith("re:"):
            object.__setattr__(self, "regex", compile_regex(self.text[3:]))
            object.__setattr__(self, "is_regex", True)
        else:
            if not self.text.strip():
                raise PatternError("empty kernel pattern")
            object.__setattr__(self, "regex", _glob_regex(self.text))
            object.__setattr__(self, "is_regex", False)

    def candidates(self, demangled: str, mangled: str) -> tuple[str, ...]:
        if self.subject == "mangled":
            return (mangled,)
        full, callable_text, qualified, base = name_forms(demangled)
        if self.subject == "base":
            return (base,)
        if self.is_regex:
            return (full, callable_text)
        return (full, callable_text, qualified, base)

    def matches(self, demangled: str, mangled: str = "") -> bool:
        test = self.regex.search if self.is_regex else self.regex.fullmatch
        return any(test(c) is not None for c in self.candidates(demangled, mangled or demangled))

    def __str__(self) -> str:
        return self.text
