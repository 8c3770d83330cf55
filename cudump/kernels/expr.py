"""Arithmetic over kernel argument values, for rule geometry (`height: arg6`) and
breakpoint conditions (`break k if arg5 > 1000 && arg6 != 0`).

Grammar (parsed here, never handed to eval()):

    expr  := conj ("||" conj)*
    conj  := cmp ("&&" cmp)*
    cmp   := sum [("<" | "<=" | ">" | ">=" | "==" | "!=") sum]
    sum   := term (("+" | "-") term)*
    term  := unary (("*" | "/" | "//" | "%") unary)*
    unary := ("-" | "+") unary | atom
    atom  := INT | HEX | FLOAT | argN | ("min" | "max") "(" expr ("," expr)* ")" | "(" expr ")"

`argN` is the value of argument N (0-based) as decoded from the launch.
Comparisons, `&&` and `||` give 1 (true) or 0 (false); a condition is true
when its value is not 0.
Division: `/` is exact division - the integer quotient when both sides are
integers and it divides evenly, else a float; `//` is floor division and `%`
the matching remainder (both round toward minus infinity, as in Python).
Geometry that must be whole (`width`, `height`, ...) rejects a fractional
result later, so `arg5 / 3` on a width of 1000 is reported, not truncated.

Limits, so that no text can make parsing or evaluation fail other than with an
ExprError: parentheses, signs and calls nest at most MAX_NESTING deep (a long
flat sum such as `arg1 + arg2 + ...` is fine at any length); integers, written
or computed, stay within +/- 2**128 (`number too large`); a float literal must
be finite.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Number = int | float

MAX_NESTING = 64            # parentheses, unary signs and calls inside one another
MAX_INT = 1 << 128          # |integers| written or computed; far beyond any geometry
_MAX_DIGITS = 40            # a decimal literal longer than this is beyond MAX_INT


class ExprError(ValueError):
    """A bad expression, or one that cannot be evaluated. `position` is 0-based."""

    def __init__(self, problem: str, position: int) -> None:
        super().__init__(f"{problem} at column {position + 1}")
        self.problem = problem
        self.position = position


# ---------------------------------------------------------------- syntax tree


@dataclass(frozen=True)
class _Num:
    value: Number
    pos: int


@dataclass(frozen=True)
class _Arg:
    name: str
    pos: int


@dataclass(frozen=True)
class _Neg:
    operand: _Node
    pos: int


@dataclass(frozen=True)
class _Chain:
    """`first op1 x1 op2 x2 ...` of one precedence level, evaluated left to right.

    Flat rather than a left-deep tree, so a long sum costs no recursion."""

    first: _Node
    rest: tuple[tuple[str, _Node, int], ...]   # (operator, operand, operator's position)


@dataclass(frozen=True)
class _Call:
    function: str
    args: tuple[_Node, ...]
    pos: int


_Node = _Num | _Arg | _Neg | _Chain | _Call

_FUNCTIONS: dict[str, Callable[[list[Number]], Number]] = {"min": min, "max": max}
_ARG = re.compile(r"arg(0|[1-9][0-9]*)")
_TOKEN = re.compile(
    r"(?P<space>\s+)"
    r"|(?P<hex>0[xX][0-9a-fA-F]+)"
    r"|(?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)"
    r"|(?P<int>\d+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>//|<=|>=|==|!=|&&|\|\||[-+*/%(),<>])"
)


@dataclass(frozen=True)
class _Tok:
    kind: str   # "int", "float", "hex", "name", "op", "end"
    text: str
    pos: int


def _tokenize(text: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    i = 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if not m:
            raise ExprError(f"unexpected character {text[i]!r}", i)
        kind = m.lastgroup or ""
        if kind != "space":
            tokens.append(_Tok(kind, m.group(), i))
        i = m.end()
    tokens.append(_Tok("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    def peek(self) -> _Tok:
        return self.tokens[self.i]

    def take(self) -> _Tok:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, op: str) -> _Tok:
        tok = self.peek()
        if tok.kind != "op" or tok.text != op:
            raise ExprError(f"expected {op!r}, found {_describe(tok)}", tok.pos)
        return self.take()

    def enter(self, tok: _Tok) -> None:
        """One level deeper (a parenthesis, a sign, a call); refuses runaway nesting."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ExprError(f"nested too deeply (more than {MAX_NESTING} levels of "
                            "parentheses, signs or calls)", tok.pos)

    def parse(self) -> _Node:
        node = self.expr()
        tok = self.peek()
        if tok.kind != "end":
            raise ExprError(f"unexpected {_describe(tok)}", tok.pos)
        return node

    def chain(self, operand: Callable[[], _Node], ops: tuple[str, ...]) -> _Node:
        first = operand()
        rest: list[tuple[str, _Node, int]] = []
        while self.peek().kind == "op" and self.peek().text in ops:
            op = self.take()
            rest.append((op.text, operand(), op.pos))
        return _Chain(first, tuple(rest)) if rest else first

    def expr(self) -> _Node:
        return self.chain(self.conj, ("||",))

    def conj(self) -> _Node:
        return self.chain(self.cmp, ("&&",))

    def cmp(self) -> _Node:
        left = self.sum()
        tok = self.peek()
        if tok.kind == "op" and tok.text in _RELATIONS:
            self.take()
            return _Chain(left, ((tok.text, self.sum(), tok.pos),))
        return left

    def sum(self) -> _Node:
        return self.chain(self.term, ("+", "-"))

    def term(self) -> _Node:
        return self.chain(self.unary, ("*", "/", "//", "%"))

    def unary(self) -> _Node:
        tok = self.peek()
        if tok.kind == "op" and tok.text in "+-":
            self.take()
            self.enter(tok)
            operand = self.unary()
            self.depth -= 1
            return _Neg(operand, tok.pos) if tok.text == "-" else operand
        return self.atom()

    def atom(self) -> _Node:
        tok = self.take()
        if tok.kind in ("int", "hex", "float"):
            return _Num(_literal(tok), tok.pos)
        if tok.kind == "op" and tok.text == "(":
            self.enter(tok)
            node = self.expr()
            self.expect(")")
            self.depth -= 1
            return node
        if tok.kind == "name":
            if _ARG.fullmatch(tok.text):
                return _Arg(tok.text, tok.pos)
            if tok.text in _FUNCTIONS:
                return self.call(tok)
            raise ExprError(
                f"unknown name {tok.text!r} (use arg0, arg1, ... or min(), max())", tok.pos)
        raise ExprError(f"expected a number, argN or '(', found {_describe(tok)}", tok.pos)

    def call(self, name: _Tok) -> _Node:
        self.expect("(")
        self.enter(name)
        args = [self.expr()]
        while self.peek().kind == "op" and self.peek().text == ",":
            self.take()
            args.append(self.expr())
        self.expect(")")
        self.depth -= 1
        return _Call(name.text, tuple(args), name.pos)


def _literal(tok: _Tok) -> Number:
    """The value of a number token; refuses what no geometry can use."""
    if tok.kind == "float":
        value = float(tok.text)
        if not math.isfinite(value):
            raise ExprError("number too large", tok.pos)
        return value
    if tok.kind == "int" and len(tok.text.lstrip("0")) > _MAX_DIGITS:
        raise ExprError("number too large", tok.pos)
    number = int(tok.text, 16) if tok.kind == "hex" else int(tok.text)
    if number > MAX_INT:
        raise ExprError("number too large", tok.pos)
    return number


def _describe(tok: _Tok) -> str:
    return "end of expression" if tok.kind == "end" else repr(tok.text)


# ---------------------------------------------------------------- evaluation


def _divide(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b
    return a / b


_RELATIONS = ("<", "<=", ">", ">=", "==", "!=")

_BINARY: dict[str, Callable[[Number, Number], Number]] = {
    "<": lambda a, b: int(a < b),
    "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b),
    "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b),
    "&&": lambda a, b: int(bool(a) and bool(b)),
    "||": lambda a, b: int(bool(a) or bool(b)),
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _divide,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


def _checked(value: Number, pos: int) -> Number:
    if isinstance(value, int) and not -MAX_INT <= value <= MAX_INT:
        raise ExprError("number too large", pos)
    return value


def _apply(op: str, left: Number, right: Number, pos: int) -> Number:
    if op in ("/", "//", "%") and right == 0:
        raise ExprError("division by zero", pos)
    try:
        return _checked(_BINARY[op](left, right), pos)
    except (OverflowError, ZeroDivisionError):
        raise ExprError("number too large", pos) from None


def _evaluate(node: _Node, values: Mapping[str, Number]) -> Number:
    if isinstance(node, _Num):
        return node.value
    if isinstance(node, _Arg):
        if node.name not in values:
            raise ExprError(f"{node.name} has no numeric value in this launch", node.pos)
        return values[node.name]
    if isinstance(node, _Neg):
        return _checked(-_evaluate(node.operand, values), node.pos)
    if isinstance(node, _Call):
        # One list argument, so that min(x) of a single value works too.
        return _FUNCTIONS[node.function]([_evaluate(a, values) for a in node.args])
    result = _evaluate(node.first, values)
    for op, operand, pos in node.rest:
        result = _apply(op, result, _evaluate(operand, values), pos)
    return result


def _scaled(ptr: str, size: int | None, offset: Number, pos: int) -> int:
    if size is None:
        raise ExprError(f"{ptr} points to a type of unknown size: no pointer arithmetic",
                        pos)
    if not isinstance(offset, int):
        raise ExprError(f"pointer arithmetic on {ptr} needs a whole number, not {offset}",
                        pos)
    return int(_checked(offset * size, pos))


def _evaluate_typed(node: _Node, values: Mapping[str, Number],
                    sizes: Mapping[str, int | None]) -> tuple[Number, str | None]:
    """As _evaluate, with C's pointer arithmetic for the arguments in `sizes` (name ->
    the size of what it points to): pointer +/- integer moves by whole elements, and
    pointer - pointer counts elements. Returns the value and, when it is a pointer, the
    argument whose type it has. Elsewhere (comparisons, products) pointers are addresses."""
    if isinstance(node, _Arg):
        return _evaluate(node, values), (node.name if node.name in sizes else None)
    if isinstance(node, _Num):
        return node.value, None
    if isinstance(node, _Neg):
        return _checked(-_evaluate_typed(node.operand, values, sizes)[0], node.pos), None
    if isinstance(node, _Call):
        return _FUNCTIONS[node.function](
            [_evaluate_typed(a, values, sizes)[0] for a in node.args]), None
    result, ptr = _evaluate_typed(node.first, values, sizes)
    for op, operand, pos in node.rest:
        right, rptr = _evaluate_typed(operand, values, sizes)
        if op not in ("+", "-") or (ptr is None and rptr is None):
            result, ptr = _apply(op, result, right, pos), None
        elif ptr is not None and rptr is not None:
            if op == "+":
                raise ExprError(f"cannot add two pointers ({ptr} and {rptr})", pos)
            size, rsize = sizes[ptr], sizes[rptr]
            if size is None or size != rsize:
                raise ExprError(f"{ptr} and {rptr} point to different types", pos)
            result, ptr = _apply("/", _apply("-", result, right, pos), size, pos), None
        elif ptr is not None:
            result = _apply(op, result, _scaled(ptr, sizes[ptr], right, pos), pos)
        else:
            assert rptr is not None
            if op == "-":
                raise ExprError(f"cannot subtract a pointer ({rptr}) from a number", pos)
            result, ptr = _apply("+", _scaled(rptr, sizes[rptr], result, pos), right, pos), rptr
    return result, ptr


def _names(node: _Node) -> frozenset[str]:
    if isinstance(node, _Arg):
        return frozenset({node.name})
    if isinstance(node, _Neg):
        return _names(node.operand)
    if isinstance(node, _Chain):
        return _names(node.first).union(*(_names(x) for _, x, _ in node.rest))
    if isinstance(node, _Call):
        return frozenset().union(*(_names(a) for a in node.args))
    return frozenset()


def _check(node: _Node) -> None:
    """Raise the ExprError that some part of the expression gives for any argument values:
    a constant part that cannot be evaluated (`4 // 0`, a result too large) or a division
    by a constant zero (`arg5 % 0`)."""
    if not _names(node):
        _evaluate(node, {})
        return
    if isinstance(node, _Neg):
        _check(node.operand)
    elif isinstance(node, _Call):
        for arg in node.args:
            _check(arg)
    elif isinstance(node, _Chain):
        _check(node.first)
        for op, operand, pos in node.rest:
            _check(operand)
            if op in ("/", "//", "%") and not _names(operand) and _evaluate(operand, {}) == 0:
                raise ExprError("division by zero", pos)


@dataclass(frozen=True)
class Expr:
    text: str
    _tree: _Node = field(repr=False, compare=False)

    def names(self) -> frozenset[str]:
        """The argument names the expression reads, e.g. {"arg6"}."""
        return _names(self._tree)

    def evaluate(self, values: Mapping[str, Number]) -> Number:
        return _evaluate(self._tree, values)

    def evaluate_typed(self, values: Mapping[str, Number], sizes: Mapping[str, int | None]
                       ) -> tuple[Number, str | None]:
        """The value with C's pointer arithmetic for the pointer arguments in `sizes` (the
        size of what each points to; None: unknown), and the argument whose pointer type
        the value has (None for a number): `arg0 + 4` on a float* is 16 bytes on."""
        return _evaluate_typed(self._tree, values, sizes)

    def check(self) -> None:
        """Raise ExprError for what fails whatever the argument values (see _check)."""
        _check(self._tree)


def parse_expr(text: str | int | float) -> Expr:
    """Parse an expression; a number (as YAML gives `width: 1920`) is one too."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ExprError(f"expected a number or an expression, got {type(text).__name__}", 0)
    if isinstance(text, int) and not -MAX_INT <= text <= MAX_INT:
        raise ExprError("number too large", 0)
    if isinstance(text, float) and not math.isfinite(text):
        raise ExprError("not a finite number", 0)
    source = text if isinstance(text, str) else repr(text)
    if not source.strip():
        raise ExprError("empty expression", 0)
    return Expr(source, _Parser(source).parse())
