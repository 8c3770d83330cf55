"""Parsing of demangled kernel signatures into a name and typed parameters.

Demangled names are C++ declarations as the GNU demangler prints them:
`void ns::kern<(sl::E)2, std::array<char*, 3ul> >(uchar4*, int const*, ...)`.
Template arguments may hold commas, parentheses, comparisons and lambdas
(`{lambda(int)#1}`), names may hold `(anonymous namespace)` and operator
names (`operator()`, `operator<<`), so the text is tokenized and brackets are
matched before anything is split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ---------------------------------------------------------------- tokens


@dataclass(frozen=True)
class _Token:
    text: str
    start: int
    end: int
    spaced: bool  # whitespace precedes it


_WORD = re.compile(r"[A-Za-z0-9_$.]+")
_SPACE = re.compile(r"\s+")
# Longest first, so that `operator<<=` is not read as `operator<` `<=`.
_OPERATOR_SYMBOLS = sorted(
    ["()", "[]", "->*", "->", "<<=", ">>=", "<=>", "<<", ">>", "<=", ">=", "==", "!=", "&&",
     "||", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<", ">", "+", "-",
     "*", "/", "%", "&", "|", "^", "~", "!", "=", ",", '""'],
    key=len, reverse=True,
)
_OPEN = {"(": ")", "<": ">", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    spaced = False
    while i < len(text):
        space = _SPACE.match(text, i)
        if space:
            i = space.end()
            spaced = True
            continue
        word = _WORD.match(text, i)
        if word:
            end = word.end()
            if word.group() == "operator":
                end = _operator_end(text, end)
            tokens.append(_Token(text[i:end], i, end, spaced))
            i = end
        elif text.startswith("::", i):
            tokens.append(_Token("::", i, i + 2, spaced))
            i += 2
        elif text.startswith("&&", i):
            tokens.append(_Token("&&", i, i + 2, spaced))
            i += 2
        else:
            tokens.append(_Token(text[i], i, i + 1, spaced))
            i += 1
        spaced = False
    return tokens


def _operator_end(text: str, i: int) -> int:
    """End of an operator name whose `operator` keyword ends at i."""
    for symbol in _OPERATOR_SYMBOLS:
        if text.startswith(symbol, i):
            return i + len(symbol)
    # `operator new[]`, `operator delete`: one name with a space inside.
    m = re.compile(r"\s+(new|delete)(\[\])?").match(text, i)
    return m.end() if m else i


@dataclass
class _Scan:
    """Tokens with their bracket depth and the partner of every matched bracket."""

    text: str
    tokens: list[_Token]
    depth: list[int]          # depth outside the token (an opener and its closer share it)
    partner: dict[int, int]   # opener index -> closer index and back

    def slice(self, lo: int, hi: int) -> str:
        if lo >= hi:
            return ""
        return self.text[self.tokens[lo].start:self.tokens[hi - 1].end]


def _is_template_opener(tokens: list[_Token], i: int) -> bool:
    # `<` opens template arguments right after a name; after `)` or a number it
    # is a comparison inside a template-argument expression: `((1)<(2))`.
    if i == 0:
        return False
    prev = tokens[i - 1].text
    return (prev[0].isalpha() or prev[0] in "_$" or prev.startswith("operator")
            or prev in (">", "]", "}"))


def _scan(text: str) -> _Scan:
    tokens = _tokenize(text)
    depth: list[int] = []
    partner: dict[int, int] = {}
    stack: list[int] = []
    for i, tok in enumerate(tokens):
        t = tok.text
        if t in _OPEN and (t != "<" or _is_template_opener(tokens, i)):
            depth.append(len(stack))
            stack.append(i)
        elif t in _CLOSE and stack:
            want = _CLOSE[t]
            if t == ">" and tokens[stack[-1]].text != "<":
                depth.append(len(stack))  # a greater-than sign inside parentheses
                continue
            # Unbalanced `<` left open inside this group were comparisons.
            while stack and tokens[stack[-1]].text != want and tokens[stack[-1]].text == "<":
                stack.pop()
            if stack and tokens[stack[-1]].text == want:
                opener = stack.pop()
                partner[opener] = i
                partner[i] = opener
            depth.append(len(stack))
        else:
            depth.append(len(stack))
    return _Scan(text, tokens, depth, partner)


def _split_commas(scan: _Scan, lo: int, hi: int) -> list[tuple[int, int]]:
    """Index ranges of the comma-separated items in tokens[lo:hi] at the depth of lo."""
    if lo >= hi:
        return []
    base = scan.depth[lo]
    parts: list[tuple[int, int]] = []
    start = lo
    for i in range(lo, hi):
        if scan.tokens[i].text == "," and scan.depth[i] == base:
            parts.append((start, i))
            start = i + 1
    parts.append((start, hi))
    return parts


# ---------------------------------------------------------------- types


@dataclass(frozen=True)
class ParamType:
    text: str           # as written in the demangled signature, e.g. "unsigned char const*"
    base: str           # element type without cv/pointer: "unsigned char", "device::uchar8"
    pointer_depth: int  # 0 for values, 1 for T*, 2 for T**
    const: bool         # the element type (the innermost pointee) is const
    reference: bool = False   # T& or T&& (then pointer_depth counts pointers under it)
    function: bool = False    # a function pointer; base is the function type "R (A, B)"
    extents: tuple[str, ...] = ()  # array extents of a pointer to array: `int (*) [4]` -> ("4",)

    @property
    def is_pointer(self) -> bool:
        return self.pointer_depth > 0


_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict"}


def parse_param_type(text: str) -> ParamType:
    """Parse one parameter type as the demangler prints it."""
    text = text.strip()
    scan = _scan(text)
    toks = scan.tokens
    n = len(toks)
    top = [i for i in range(n) if scan.depth[i] == 0]
    # A parenthesized declarator `(*)`, `(&)`, `(**)` marks a function pointer or a
    # pointer to an array: `double (*)(int, float)`, `int (*) [4]`.
    for i in top:
        if toks[i].text == "(" and i in scan.partner and i + 1 < n \
                and toks[i + 1].text in ("*", "&", "&&"):
            close = scan.partner[i]
            stars = sum(1 for j in range(i + 1, close) if toks[j].text == "*")
            ref = any(toks[j].text in ("&", "&&") for j in range(i + 1, close))
            after = close + 1
            if after < n and toks[after].text == "(" and after in scan.partner:
                result = scan.slice(0, i)
                params = scan.slice(after, scan.partner[after] + 1)
                return ParamType(text, f"{result} {params}", stars, False, ref, True)
            inner = _plain_type(scan, 0, i)
            extents: list[str] = []
            j = after
            while j < n and toks[j].text == "[" and j in scan.partner:
                extents.append(scan.slice(j + 1, scan.partner[j]))
                j = scan.partner[j] + 1
            return ParamType(text, inner.base, inner.pointer_depth + stars, inner.const,
                             ref or inner.reference, False, tuple(extents))
    return _plain_type(scan, 0, n, text)


def _plain_type(scan: _Scan, lo: int, hi: int, text: str | None = None) -> ParamType:
    toks = scan.tokens
    runs: list[str] = []
    run_start: int | None = None
    depth = 0
    const = False
    reference = False
    extents: list[str] = []
    i = lo
    while i < hi:
        t = toks[i].text
        if scan.depth[i] != scan.depth[lo]:
            i += 1
            continue
        is_part = ((t not in _QUALIFIERS or _scope_qualifier(toks, i))
                   and t not in ("*", "&", "&&", "["))
        if is_part and run_start is None:
            run_start = i
        if not is_part and run_start is not None:
            runs.append(scan.slice(run_start, i))
            run_start = None
        if t == "const" and depth == 0 and not is_part:
            const = True
        elif t == "*":
            depth += 1
        elif t in ("&", "&&"):
            reference = True
        elif t == "[" and i in scan.partner:
            extents.append(scan.slice(i + 1, scan.partner[i]))
            i = scan.partner[i] + 1
            continue
        # Skip over a group so that its tokens join the current run.
        i = scan.partner[i] + 1 if t in _OPEN and i in scan.partner else i + 1
    if run_start is not None:
        runs.append(scan.slice(run_start, hi))
    full = scan.slice(lo, hi) if text is None else text
    return ParamType(full, " ".join(runs), depth, const, reference, False, tuple(extents))


# ---------------------------------------------------------------- signatures


@dataclass(frozen=True)
class Signature:
    demangled: str
    qualified_name: str  # "device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>": no return type, no params
    base_name: str       # "FrP0k5607tPV": no namespaces, template arguments or parameters
    params: tuple[ParamType, ...] | None  # None when the name has no parameter list (extern "C")
    return_type: str = ""  # "void" for templates; "" where the demangler prints none

    @property
    def callable_text(self) -> str:
        """The name with its parameter list but without the return type."""
        if self.params is None:
            return self.qualified_name
        return f"{self.qualified_name}({', '.join(p.text for p in self.params)})"


_TRAILING = {"const", "volatile", "&", "&&", "noexcept"}


def parse_signature(demangled: str) -> Signature:
    """Split a demangled function name into return type, name and parameter types."""
    text = demangled.strip()
    scan = _scan(text)
    toks = scan.tokens
    end = len(toks)
    # Drop what may follow the parameter list: `[clone .cold]`, and the
    # qualifiers of member functions (`operator()(int) const`).
    while end > 0:
        last = toks[end - 1].text
        if last == "]" and end - 1 in scan.partner and scan.depth[end - 1] == 0:
            opener = scan.partner[end - 1]
            if opener + 1 < end and toks[opener + 1].text == "clone":
                end = opener
                continue
        if last in _TRAILING and end >= 2 and (toks[end - 2].text == ")"
                                                or toks[end - 2].text in _TRAILING):
            end -= 1
            continue
        break

    params: tuple[ParamType, ...] | None = None
    name_end = end
    if end > 0 and toks[end - 1].text == ")" and end - 1 in scan.partner:
        opener = scan.partner[end - 1]
        before = toks[opener - 1].text if opener > 0 else None
        # `(anonymous namespace)` at the start or after `::` is part of a name.
        if before is not None and before != "::":
            name_end = opener
            items = [scan.slice(a, b) for a, b in _split_commas(scan, opener + 1, end - 1)]
            if items == ["void"]:
                items = []
            params = tuple(parse_param_type(item) for item in items)

    # The name starts after the last space at depth 0 that separates it from
    # the return type. Spaces before `<` (`operator<< <int>`), before a closer
    # (`<..., std::array<char*, 3ul> >`) and before the `const` of a lambda's
    # scope (`operator()(float) const::{lambda(int)#1}`) are inside the name.
    name_start = 0
    for i in range(name_end - 1, 0, -1):
        tok = toks[i]
        inside = (tok.text in _CLOSE or (tok.text == "<" and i in scan.partner)
                  or _scope_qualifier(toks, i))
        if tok.spaced and scan.depth[i] == 0 and not inside:
            name_start = i
            break
    qualified = scan.slice(name_start, name_end)
    return Signature(
        demangled=demangled,
        qualified_name=qualified,
        base_name=_base_name(scan, name_start, name_end),
        params=params,
        return_type=scan.slice(0, name_start),
    )


def _scope_qualifier(toks: list[_Token], i: int) -> bool:
    """`const` in `operator()(float) const::{lambda(int)#1}`: part of a name."""
    return (toks[i].text in ("const", "volatile") and i + 1 < len(toks)
            and toks[i + 1].text == "::")


def _base_name(scan: _Scan, lo: int, hi: int) -> str:
    toks = scan.tokens
    start = lo
    for i in range(lo, hi):
        if toks[i].text == "::" and scan.depth[i] == scan.depth[lo]:
            start = i + 1
    end = hi
    # Strip template arguments and ABI tags: `foo[abi:cxx11]<int>` -> `foo`.
    while end > start and toks[end - 1].text in (">", "]") and end - 1 in scan.partner:
        opener = scan.partner[end - 1]
        if opener <= start:
            break
        end = opener
    return scan.slice(start, end)
