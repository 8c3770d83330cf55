"""Arithmetic over kernel argument values, for rule geometry (`height: arg6`).

Grammar (parsed here, never handed to eval()):

    expr  := term (("+" | "-") term)*
    term  := unary (("*" | "/" | "//" | "%") unary)*
    unary := ("-" | "+") unary | atom
    atom  := INT | HEX | FLOAT | argN | ("min" | "max") "(" expr ("," expr)* ")" | "(" expr ")"

`argN` is the value of argument N (0-based) as decoded from the launch.
Division: `/` is exact division - the integer quotient when both sides are
integers and it divides evenly, else a float; `//` is floor division and `%`
the matching remainder (both round toward minus infinity, as in Python).
Geometry that must be whole (`width`, `height`, ...) rejects a fractional
result later, so `arg5 / 3` on a width of 1000 is reported, not truncated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Number = int | float


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
class _Binary:
    op: str
    left: _Node
    right: _Node
    pos: int


@dataclass(frozen=True)
class _Call:
    function: str
    args: tuple[_Node, ...]
    pos: int


_Node = _Num | _Arg | _Neg | _Binary | _Call

_FUNCTIONS: dict[str, Callable[[list[Number]], Number]] = {"min": min, "max": max}
_ARG = re.compile(r"arg(0|[1-9][0-9]*)")
_TOKEN = re.compile(
    r"(?P<space>\s+)"
    r"|(?P<hex>0[xX][0-9a-fA-F]+)"
    r"|(?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)"
    r"|(?P<int>\d+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>//|[-+*/%(),])"
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

    def parse(self) -> _Node:
        node = self.expr()
        tok = self.peek()
        if tok.kind != "end":
            raise ExprError(f"unexpected {_describe(tok)}", tok.pos)
        return node

    def expr(self) -> _Node:
        node = self.term()
        while self.peek().kind == "op" and self.peek().text in "+-":
            op = self.take()
            node = _Binary(op.text, node, self.term(), op.pos)
        return node

    def term(self) -> _Node:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/", "//", "%"):
            op = self.take()
            node = _Binary(op.text, node, self.unary(), op.pos)
        return node

    def unary(self) -> _Node:
        tok = self.peek()
        if tok.kind == "op" and tok.text in "+-":
            self.take()
            operand = self.unary()
            return _Neg(operand, tok.pos) if tok.text == "-" else operand
        return self.atom()

    def atom(self) -> _Node:
        tok = self.take()
        if tok.kind == "int":
            return _Num(int(tok.text), tok.pos)
        if tok.kind == "hex":
            return _Num(int(tok.text, 16), tok.pos)
        if tok.kind == "float":
            return _Num(float(tok.text), tok.pos)
        if tok.kind == "op" and tok.text == "(":
            node = self.expr()
            self.expect(")")
            return node
        if tok.kind == "name":
            if _ARG.fullmatch(tok.text):
                return _Arg(tok.text, tok.pos)
            if tok.text in _FUNCTIONS:
                self.expect("(")
                args = [self.expr()]
                while self.peek().kind == "op" and self.peek().text == ",":
                    self.take()
                    args.append(self.expr())
                self.expect(")")
                return _Call(tok.text, tuple(args), tok.pos)
            raise ExprError(
                f"unknown name {tok.text!r} (use arg0, arg1, ... or min(), max())", tok.pos)
        raise ExprError(f"expected a number, argN or '(', found {_describe(tok)}", tok.pos)


def _describe(tok: _Tok) -> str:
    return "end of expression" if tok.kind == "end" else repr(tok.text)


# ---------------------------------------------------------------- evaluation


def _divide(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b
    return a / b


_BINARY: dict[str, Callable[[Number, Number], Number]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _divide,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


def _evaluate(node: _Node, values: Mapping[str, Number]) -> Number:
    if isinstance(node, _Num):
        return node.value
    if isinstance(node, _Arg):
        if node.name not in values:
            raise ExprError(f"{node.name} has no numeric value in this launch", node.pos)
        return values[node.name]
    if isinstance(node, _Neg):
        return -_evaluate(node.operand, values)
    if isinstance(node, _Call):
        # One list argument, so that min(x) of a single value works too.
        return _FUNCTIONS[node.function]([_evaluate(a, values) for a in node.args])
    left = _evaluate(node.left, values)
    right = _evaluate(node.right, values)
    if node.op in ("/", "//", "%") and right == 0:
        raise ExprError("division by zero", node.pos)
    return _BINARY[node.op](left, right)


def _names(node: _Node) -> frozenset[str]:
    if isinstance(node, _Arg):
        return frozenset({node.name})
    if isinstance(node, _Neg):
        return _names(node.operand)
    if isinstance(node, _Binary):
        return _names(node.left) | _names(node.right)
    if isinstance(node, _Call):
        return frozenset().union(*(_names(a) for a in node.args))
    return frozenset()


@dataclass(frozen=True)
class Expr:
    text: str
    _tree: _Node = field(repr=False, compare=False)

    def names(self) -> frozenset[str]:
        """The argument names the expression reads, e.g. {"arg6"}."""
        return _names(self._tree)

    def evaluate(self, values: Mapping[str, Number]) -> Number:
        return _evaluate(self._tree, values)


def parse_expr(text: str | int | float) -> Expr:
    """Parse an expression; a number (as YAML gives `width: 1920`) is one too."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ExprError(f"expected a number or an expression, got {type(text).__name__}", 0)
    source = text if isinstance(text, str) else repr(text)
    if not source.strip():
        raise ExprError("empty expression", 0)
    return Expr(source, _Parser(source).parse())
