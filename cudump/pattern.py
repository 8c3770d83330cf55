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

Kernel names can be long (thousands of characters for templates), so matching
must stay cheap whatever the pattern: globs are matched by a linear-time
wildcard matcher (never a backtracking regular expression), and regular
expressions whose shape makes Python's backtracking engine exponential — a
repeated group that contains a repetition or an alternative, at any depth,
such as `(a+)+`, `((a+))+`, `(\\w*)*` or `(a|aa)+` — are refused with a
message saying how to write them instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

try:  # the parser of the `re` module: walks a pattern's structure
    import re._parser as _sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_parse as _sre_parse  # type: ignore[no-redef]
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


class _Glob:
    """A glob matched in O(len(text) * len(pattern)) at worst: `*` any run, `?` one character."""

    def __init__(self, pattern: str) -> None:
        self.pattern = re.sub(r"\*+", "*", pattern)  # runs of `*` are one `*`

    def fullmatch(self, text: str) -> bool:
        p, t = self.pattern, text
        i = j = 0
        star, mark = -1, 0
        while j < len(t):
            if i < len(p) and (p[i] == "?" or p[i] == t[j]):
                i += 1
                j += 1
            elif i < len(p) and p[i] == "*":
                star, mark = i, j
                i += 1
            elif star >= 0:
                i, mark = star + 1, mark + 1
                j = mark
            else:
                return False
        while i < len(p) and p[i] == "*":
            i += 1
        return i == len(p)


_REPEATS = {_sre_parse.MAX_REPEAT, _sre_parse.MIN_REPEAT}
_POSSESSIVE = getattr(_sre_parse, "POSSESSIVE_REPEAT", None)


def _risky(items: object, inside_repeat: bool) -> bool:
    """Whether a parsed pattern repeats something that itself repeats or alternates."""
    for op, arg in items:  # type: ignore[attr-defined]
        if op in _REPEATS or (_POSSESSIVE is not None and op == _POSSESSIVE):
            low, high, sub = arg
            if inside_repeat:
                return True
            if _risky(sub, high is _sre_parse.MAXREPEAT or high > 1):
                return True
        elif op == _sre_parse.BRANCH:
            if inside_repeat:
                return True
            if any(_risky(branch, False) for branch in arg[1]):
                return True
        elif op == _sre_parse.SUBPATTERN:
            if _risky(arg[-1], inside_repeat):
                return True
        elif op in (_sre_parse.ASSERT, _sre_parse.ASSERT_NOT):
            if _risky(arg[1], inside_repeat):
                return True
    return False


def compile_regex(source: str) -> re.Pattern[str]:
    """Compiles a user's regular expression; raises PatternError with the reason."""
    if not source:
        raise PatternError("empty regular expression after 're:'")
    if len(source) > 4096:
        raise PatternError("regular expression longer than 4096 characters")
    try:
        compiled = re.compile(source)
        risky = _risky(_sre_parse.parse(source), False)
    except re.error as err:
        raise PatternError(f"invalid regular expression {source!r}: {err.msg} at position "
                           f"{err.pos}") from None
    except RecursionError:
        raise PatternError(f"regular expression {source!r} is nested too deeply") from None
    if risky:
        raise PatternError(
            f"regular expression {source!r} repeats a group that itself repeats or has "
            "alternatives (like '(a+)+' or '(a|aa)+'), which can take exponential time; "
            "drop the inner or the outer repetition, or use a glob")
    return compiled


@dataclass(frozen=True)
class KernelPattern:
    text: str                       # as written, `re:` prefix included
    subject: Subject = "demangled"
    regex: re.Pattern[str] | _Glob = field(init=False, repr=False, compare=False)
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
            object.__setattr__(self, "regex", _Glob(self.text))
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
        names = self.candidates(demangled, mangled or demangled)
        if isinstance(self.regex, _Glob):
            return any(self.regex.fullmatch(c) for c in names)
        return any(self.regex.search(c) is not None for c in names)

    def __str__(self) -> str:
        return self.text
