"""Kernel-name patterns: the one matcher used by rules, breakpoints and the offline tools.

A pattern is a glob (`*` any run of characters, `?` one character; every other
character stands for itself, brackets too, since C++ names hold them) or, with
a `re:` prefix, a Python regular expression. `regex:`, the prefix Nsight Compute's
`--kernel-name` takes, is the same as `re:`.

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
must stay cheap whatever the pattern and the name: globs are matched in time
linear in the name (cudump/kernels/glob.py, never a backtracking regular
expression). Regular expressions whose shape makes Python's backtracking engine
exponential — a repeated group that contains a repetition or an alternative, at
any depth, such as `(a+)+`, `((a+))+`, `(\\w*)*` or `(a|aa)+` — are refused with
a message saying how to write them instead. So are those whose repetitions can
divide a name among themselves in too many ways (`.*.*.*`, see MAX_WAYS). Two
unbounded repetitions (`a.*b.*c`) are allowed; on a long name, where Python's
engine would take a high power of the name's length, such an expression is
searched by an automaton in time linear in the name
(cudump/kernels/regex_nfa.py). An expression the automaton cannot take (a
lookaround, a backreference, a conditional, an atomic group or possessive
repetition) is matched by Python's engine only, so it may have one unbounded
repetition at most (MAX_WAYS_IRREGULAR): its work grows at most with the square
of the name's length. The answer for each (pattern, name) is kept, since a run
launches the same kernels again and again.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

try:  # the parser of the `re` module: walks a pattern's structure
    import re._parser as _sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_parse as _sre_parse  # type: ignore[no-redef]
from functools import lru_cache
from typing import Literal, Protocol

from cudump.kernels.glob import Glob
from cudump.kernels.regex_nfa import Automaton, NotRegular
from cudump.kernels.signature import parse_signature

Subject = Literal["demangled", "mangled", "base"]
SUBJECTS: tuple[Subject, ...] = ("demangled", "mangled", "base")


# The prefixes that make a pattern a regular expression: cudump's own, and Nsight Compute's.
REGEX_PREFIXES = ("re:", "regex:")


def regex_source(text: str) -> str | None:
    """The regular expression a pattern's text holds after its prefix; None for a glob."""
    for prefix in REGEX_PREFIXES:
        if text.startswith(prefix):
            return text[len(prefix):]
    return None


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


_REPEATS = {_sre_parse.MAX_REPEAT, _sre_parse.MIN_REPEAT}
_POSSESSIVE = getattr(_sre_parse, "POSSESSIVE_REPEAT", None)
_ATOMIC = getattr(_sre_parse, "ATOMIC_GROUP", None)
_GROUPREF_EXISTS = _sre_parse.GROUPREF_EXISTS


def _is_repeat(op: object) -> bool:
    return op in _REPEATS or (_POSSESSIVE is not None and op == _POSSESSIVE)


def _risky(items: object, inside_repeat: bool) -> bool:
    """Whether a parsed pattern repeats something that itself repeats or alternates."""
    for op, arg in items:  # type: ignore[attr-defined]
        if _is_repeat(op):
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
        elif op == _GROUPREF_EXISTS:     # (?(1)yes|no): two alternatives
            if inside_repeat:
                return True
            if any(_risky(branch, False) for branch in arg[1:] if branch is not None):
                return True
        elif op == _sre_parse.SUBPATTERN:
            if _risky(arg[-1], inside_repeat):
                return True
        elif _ATOMIC is not None and op == _ATOMIC:
            if _risky(arg, inside_repeat):
                return True
        elif op in (_sre_parse.ASSERT, _sre_parse.ASSERT_NOT):
            if _risky(arg[1], inside_repeat):
                return True
    return False


# How many ways a regular expression's repetitions may divide a name among themselves (see
# _ways). Python's engine backtracks through each of them at each position of the name where
# the rest of the pattern fails, so this bounds its work: an unbounded repetition counts as
# UNBOUNDED_WAYS (the places it may stop at in a name of that length), `{m,n}` as n - m + 1
# (so `?` as 2), alternatives add and everything else multiplies. MAX_WAYS allows two
# unbounded repetitions and one choice more (`(a|b).*c.*`, `.*c.*d?`): about a second at worst
# on a name of a thousand characters. `.*.*.*` is refused: it takes minutes there. On longer
# names an expression is searched by an automaton instead (ENGINE_BUDGET), but for one the
# automaton cannot take: those may have one unbounded repetition (MAX_WAYS_IRREGULAR).
UNBOUNDED_WAYS = 256
MAX_WAYS = 2 * UNBOUNDED_WAYS ** 2
MAX_WAYS_IRREGULAR = 4 * UNBOUNDED_WAYS
# The most steps (ways times positions) Python's engine is given for one name; past it, the
# automaton searches the name (a millisecond per thousand characters or so).
ENGINE_BUDGET = 20_000_000


def _ways(items: object, unbounded: int = UNBOUNDED_WAYS, cap: int = MAX_WAYS) -> int:
    """The ways a parsed pattern's repetitions can divide a text among themselves (capped just
    above `cap`), an unbounded repetition counting as `unbounded`: repetitions multiply,
    alternatives add. Nested repetitions are refused
    before this (_risky), so a repeated body has no choices of its own unless the repetition
    is optional or single (`(a.*)?`), or but for a lookaround. A lookaround, an atomic group
    or a possessive repetition is matched one way only (Python never backtracks into it): its
    own ways are spent once for each way of what comes before it, and do not multiply what
    comes after."""
    total = 1      # ways of the items so far
    spent = 0      # the work of the atomic parts so far
    for op, arg in items:  # type: ignore[attr-defined]
        factor = 1
        if _POSSESSIVE is not None and op == _POSSESSIVE:
            spent += total * _ways(arg[2], unbounded, cap)
        elif op in _REPEATS:
            low, high, sub = arg
            inner = _ways(sub, unbounded, cap)
            if high is not _sre_parse.MAXREPEAT and high <= 1:   # absent, or once
                factor = inner + (1 if low == 0 < high else 0)
            else:                # a body of one way but for lookarounds (_risky)
                factor = inner * (unbounded if high is _sre_parse.MAXREPEAT
                                  else min(high - low + 1, unbounded))
        elif op == _sre_parse.BRANCH:
            factor = sum(_ways(branch, unbounded, cap) for branch in arg[1])
        elif op == _GROUPREF_EXISTS:
            factor = sum(_ways(branch, unbounded, cap)
                         for branch in arg[1:] if branch is not None) or 1
        elif op == _sre_parse.SUBPATTERN:
            factor = _ways(arg[-1], unbounded, cap)
        elif _ATOMIC is not None and op == _ATOMIC:
            spent += total * _ways(arg, unbounded, cap)
        elif op in (_sre_parse.ASSERT, _sre_parse.ASSERT_NOT):
            spent += total * _ways(arg[1], unbounded, cap)
        total = min(total * factor, cap + 1)
        spent = min(spent, cap + 1)
    return min(total + spent, cap + 1)


class Regex:
    """A user's regular expression, searched by Python's engine where its work on the name
    is small, else by an automaton linear in the name (where the expression is regular)."""

    def __init__(self, source: str, compiled: re.Pattern[str], parsed: object,
                 automaton: Automaton | None) -> None:
        self.source = source
        self.compiled = compiled
        self._parsed = parsed
        self.automaton = automaton
        self._engine_ok: dict[int, bool] = {}     # name length -> Python's engine is cheap

    def engine_cheap(self, length: int) -> bool:
        """Whether Python's engine searches a text of `length` characters within
        ENGINE_BUDGET steps (by the count of ways, with `length` + 1 stops per repetition)."""
        cheap = self._engine_ok.get(length)
        if cheap is None:
            if len(self._engine_ok) > 4096:
                self._engine_ok.clear()
            stops = length + 1
            ways = _ways(self._parsed, stops, ENGINE_BUDGET)
            cheap = self._engine_ok[length] = ways * stops <= ENGINE_BUDGET
        return cheap

    def search(self, text: str) -> bool:
        if self.automaton is None or self.engine_cheap(len(text)):
            return self.compiled.search(text) is not None
        return self.automaton.search(text)


def _shown(source: str) -> str:
    """A regular expression as messages quote it: a long one by its start and its length."""
    if len(source) <= 120:
        return repr(source)
    return f"{source[:60]!r}... ({len(source)} characters)"


# Groups nested deeper than this are refused before Python's parser sees them: it recurses
# once a level, so whether it fails would depend on the stack in use and the interpreter's
# recursion limit (which another library may have raised), not on the pattern.
MAX_NESTING = 200


def _nesting(source: str) -> int:
    """The deepest nesting of groups in a regular expression (escapes and sets skipped)."""
    depth = deepest = 0
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":                      # a set: to its closing ']' (one first is literal)
            i += 1
            if i < n and source[i] == "^":
                i += 1
            if i < n and source[i] == "]":
                i += 1
            while i < n and source[i] != "]":
                i += 2 if source[i] == "\\" else 1
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def compile_regex(source: str, prefix: str = "re:") -> Regex:
    """Compiles a user's regular expression; raises PatternError with the reason."""
    if not source:
        raise PatternError(f"empty regular expression after {prefix!r}")
    if len(source) > 4096:
        raise PatternError("regular expression longer than 4096 characters")
    automaton: Automaton | None = None
    irregular = ""
    shown = _shown(source)
    if _nesting(source) > MAX_NESTING:
        raise PatternError(f"regular expression {shown} is nested too deeply")
    try:
        with warnings.catch_warnings():
            # Python warns of a set that a later version reads otherwise (`[[`, `--`, `&&`,
            # `~~`, `||` inside brackets): said as the pattern's error, not as Python's.
            warnings.simplefilter("error", FutureWarning)
            compiled = re.compile(source)
            parsed = _sre_parse.parse(source)
        risky = _risky(parsed, False)
        ways = 0 if risky else _ways(parsed)
        if not risky and ways <= MAX_WAYS:
            try:
                automaton = Automaton(parsed)
            except NotRegular as why:
                irregular = str(why)
    except FutureWarning as err:
        raise PatternError(f"regular expression {shown}: {str(err).lower()} (put a "
                           "backslash before the character to mean it literally)") from None
    except re.error as err:
        raise PatternError(f"invalid regular expression {shown}: {err.msg} at position "
                           f"{err.pos}") from None
    except RecursionError:
        raise PatternError(f"regular expression {shown} is nested too deeply") from None
    except Exception as err:  # noqa: BLE001 - whatever re.compile raises (OverflowError, ...)
        raise PatternError(f"invalid regular expression {shown}: "
                           f"{str(err) or type(err).__name__}") from None
    if risky:
        raise PatternError(
            f"regular expression {shown} repeats a group that itself repeats or has "
            "alternatives (like '(a+)+' or '(a|aa)+'), which can take exponential time; "
            "drop the inner or the outer repetition, or use a glob")
    if ways > MAX_WAYS:
        raise PatternError(
            f"regular expression {shown} has too many repetitions that can match the same "
            "text (like '.*.*.*'), which can take minutes per kernel name; use at most two "
            "unbounded repetitions ('*', '+', '{n,}') and few optional parts, or a glob")
    if automaton is None and ways > MAX_WAYS_IRREGULAR:
        raise PatternError(
            f"regular expression {shown} has {irregular} and more than one unbounded "
            "repetition ('*', '+', '{n,}'), which can take minutes per long kernel name; "
            f"with {irregular}, use at most one")
    return Regex(source, compiled, parsed, automaton)


@lru_cache(maxsize=8192)
def _matches(pattern: KernelPattern, demangled: str, mangled: str) -> bool:
    """KernelPattern.matches, kept per (pattern, name): a run launches its kernels again and
    again, and one pattern is asked about each launch."""
    names = pattern.candidates(demangled, mangled or demangled)
    if isinstance(pattern.regex, Glob):
        return any(pattern.regex.fullmatch(c) for c in names)
    return any(pattern.regex.search(c) for c in names)


# The prefix of a pattern that names launches by where they were made, not by kernel.
SCOPE_PREFIX = "scope:"


class HasWhere(Protocol):
    """Where a launch came from (cudump.launches.scopes.Where): what a scope pattern asks."""

    def matches(self, pattern: str) -> bool: ...


@dataclass(frozen=True)
class KernelPattern:
    """A kernel pattern; or, written `scope:GLOB`, a scope pattern: launches any of whose
    open scopes (an NVTX range, a PyTorch module's path, ...) or whose source line
    ("train.py:57") the glob matches, shell-style and case-sensitive. A scope pattern is
    decided at each launch (matches_where), never by the kernel's name: every function may
    be launched inside the scope, so `matches` says yes to every name, and whoever uses the
    pattern asks about every launch and checks it there."""

    text: str                       # as written, `re:`, `regex:` or `scope:` prefix included
    subject: Subject = "demangled"
    regex: Regex | Glob = field(init=False, repr=False, compare=False)
    is_regex: bool = field(init=False, repr=False, compare=False)
    scope: str | None = field(init=False, repr=False, compare=False)   # a scope pattern's glob

    def __post_init__(self) -> None:
        if self.subject not in SUBJECTS:
            raise PatternError(f"unknown subject {self.subject!r}; use one of "
                               f"{', '.join(SUBJECTS)}")
        object.__setattr__(self, "scope", None)
        if self.text.startswith(SCOPE_PREFIX):
            glob = self.text[len(SCOPE_PREFIX):]
            if not glob.strip():
                raise PatternError(f"empty scope pattern after {SCOPE_PREFIX!r} (write "
                                   "scope:GLOB, e.g. 'scope:layer3.*')")
            object.__setattr__(self, "scope", glob)
            object.__setattr__(self, "regex", Glob("*"))
            object.__setattr__(self, "is_regex", False)
            return
        source = regex_source(self.text)
        if source is not None:
            prefix = self.text[:len(self.text) - len(source)]
            object.__setattr__(self, "regex", compile_regex(source, prefix))
            object.__setattr__(self, "is_regex", True)
        else:
            if not self.text.strip():
                raise PatternError("empty kernel pattern")
            object.__setattr__(self, "regex", Glob(self.text))
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
        """Whether a launch of this function may match (a scope pattern: every one may)."""
        return True if self.scope is not None else _matches(self, demangled, mangled)

    def matches_where(self, where: HasWhere | None) -> bool:
        """Whether a launch the name matched is one the pattern takes: any launch for a
        kernel pattern; for a scope pattern one made inside a matching scope (`where`: the
        launch's; None or nothing known: none)."""
        return self.scope is None or (where is not None and where.matches(self.scope))

    def matches_launch(self, demangled: str, mangled: str, where: HasWhere | None) -> bool:
        return self.matches(demangled, mangled) and self.matches_where(where)

    def __reduce__(self) -> tuple[object, tuple[str, Subject]]:
        # Rebuilt from its text: the automaton's matchers cannot be pickled.
        return KernelPattern, (self.text, self.subject)

    def __str__(self) -> str:
        return self.text
