"""Property-based tests of the rule loader and the expression language.

Whatever a rule file holds, loading it gives rules or a RuleError naming the file and the
line (one line of text), never another exception, in bounded time. Whatever an expression
says, parsing, checking and evaluating it give a value or an ExprError.
"""

from __future__ import annotations

import math
import tempfile
from datetime import timedelta
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cudump.errors import RuleError
from cudump.kernels.expr import Expr, ExprError, parse_expr
from cudump.policy.rules import OVERRIDE_KEYS, RULE_KEYS, Rule, load_rules

# No example database: nothing is written into the checkout.
FUZZ = settings(max_examples=200, deadline=timedelta(seconds=5), database=None,
                suppress_health_check=[HealthCheck.too_slow])


def load_text(text: str | bytes) -> list[Rule] | RuleError:
    """Load one rule file holding `text`; the RuleError if it is refused."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8",
                                                                          "surrogatepass"))
        try:
            return load_rules([path])
        except RuleError as err:
            assert err.path == str(path)
            assert "\n" not in str(err) and str(err).startswith(str(path))
            if err.line is not None:
                assert err.line >= 1 and str(err).startswith(f"{path}:{err.line}:")
            else:
                # Only problems of the file as a whole have no line.
                assert err.problem in ("not UTF-8 text", "empty rule file; expected 'rules:' "
                                       "and a list of rules"), err
            return err


def check_rules(rules: list[Rule]) -> None:
    for rule in rules:
        assert rule.action in ("snapshot", "break") and rule.matcher.text
        assert rule.skip >= 0 and rule.every >= 1 and (rule.count is None or rule.count >= 1)
        for override in rule.overrides.values():
            for key in ("channels", "width", "height", "pitch", "count"):
                expr = getattr(override, key)
                if expr is not None and not expr.names():
                    value = expr.evaluate({})
                    assert math.isfinite(value) and value >= 1 and value == int(value)
            if override.range is not None:
                low, high = override.range
                assert math.isfinite(low) and math.isfinite(high) and low < high
            assert override.field is None or 0 <= override.field < 32768


# ---------------------------------------------------------------- YAML documents

# Characters from a fixed range: the default alphabet costs seconds of set-up per run.
CHARS = st.characters(min_codepoint=0, max_codepoint=0x24F)
ANY_TEXT = st.text(alphabet=CHARS, max_size=15)
EXPRESSION_TEXT = st.text(alphabet="arg0123456789+-*/%(), .xXeEminax_", max_size=30)
PATTERN_TEXT = st.one_of(
    st.text(alphabet="abk:<>()*?[]^$+.|\\{}, void", max_size=20),
    st.text(alphabet="abk:<>()*?[]^$+.|\\{}, ", max_size=20).map(lambda s: "re:" + s),
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True), ANY_TEXT,
    EXPRESSION_TEXT, PATTERN_TEXT,
    st.sampled_from(["both", "before", "after", "npy", "png", "pointers", "break",
                     "snapshot", "demangled", "mangled", "base", "uint8", "uchar4", "float32",
                     "arg5", "arg5 * arg6", "1/0", "-3", ".inf"]),
)
# Flat values: nesting is the business of the deep-YAML test, and generating nested data is
# what costs the time here.
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3),
                   st.dictionaries(SCALARS, SCALARS, max_size=3))


def mostly(plausible: st.SearchStrategy, garbage: st.SearchStrategy = VALUES
           ) -> st.SearchStrategy:
    """Values a user might write, three times in four; anything at all otherwise.

    (Not one_of: it flattens nested unions, and garbage has many more branches.)"""
    return st.sampled_from([plausible, plausible, plausible, garbage]).flatmap(lambda s: s)


GEOMETRY = mostly(st.one_of(
    st.integers(-2, 5000), EXPRESSION_TEXT,
    st.sampled_from(["arg5", "arg6 // 2", "(arg1 + 255) // 256 * 256", "min(arg5, 1920)",
                     "1/0", "-3", "2.5", "0", "arg4 % 0", "1e999", "9" * 50])))
OVERRIDE_VALUES = {
    "dtype": mostly(st.sampled_from(["uint8", "float32", "uchar4", "float2", "__half",
                                     "unsigned short", "uchar8", "int128"])),
    "range": mostly(st.lists(st.one_of(st.integers(-(2**70), 2**70),
                                       st.floats(allow_nan=True, allow_infinity=True)),
                             min_size=1, max_size=3)),
    "field": mostly(st.integers(-16, 40000)),
    **{key: GEOMETRY for key in ("channels", "width", "height", "pitch", "count")},
}
RULE_VALUES = {
    "name": mostly(ANY_TEXT),
    "kernel": mostly(st.one_of(st.sampled_from(
        ["device::FrP0k5607tPV*", "re:FrP0k", "k", "*", "re:(a+)+$", "re:((a))*", "re:[",
         "void k<int>(float*)", "nv12*"]), PATTERN_TEXT.filter(lambda p: p.strip(" re:")))),
    "match": mostly(st.sampled_from(["demangled", "mangled", "base"])),
    "action": mostly(st.sampled_from(["snapshot", "break"])),
    "skip": mostly(st.integers(-1, 10)),
    "count": mostly(st.integers(-1, 10)),
    "every": mostly(st.integers(-1, 10)),
    "args": mostly(st.one_of(st.just("pointers"), st.lists(st.integers(-1, 8), max_size=4))),
    "when": mostly(st.one_of(st.sampled_from(["before", "after", "both"]),
                             st.lists(st.sampled_from(["before", "after", "both"]),
                                      max_size=3))),
    "format": mostly(st.one_of(st.sampled_from(["npy", "png", "both"]),
                               st.lists(st.sampled_from(["npy", "png"]), max_size=3))),
}


@st.composite
def overrides(draw: st.DrawFn) -> dict:
    out: dict = {}
    for _ in range(draw(st.integers(0, 3))):
        index = draw(mostly(st.integers(0, 8), st.one_of(st.integers(-2, 9), ANY_TEXT)))
        keys = draw(st.lists(st.sampled_from(OVERRIDE_KEYS), max_size=4, unique=True))
        out[index] = {k: draw(OVERRIDE_VALUES.get(k, VALUES)) for k in keys}
    return out


@st.composite
def rules(draw: st.DrawFn) -> dict:
    keys = draw(st.lists(st.sampled_from(RULE_KEYS), max_size=5, unique=True))
    rule: dict = {"kernel": draw(RULE_VALUES["kernel"])}
    for key in keys:
        if key == "overrides":
            rule[key] = draw(mostly(overrides()))
        else:
            rule[key] = draw(RULE_VALUES.get(key, VALUES))
    return rule


RULE_FILES = st.builds(lambda rs: {"rules": rs}, st.lists(rules(), min_size=1, max_size=3))
DOCUMENTS = st.sampled_from([RULE_FILES, RULE_FILES, RULE_FILES, st.lists(rules(), max_size=3),
                             rules(), VALUES]).flatmap(lambda s: s)


@FUZZ
@given(DOCUMENTS)
def test_generated_rule_documents_load_or_name_file_and_line(document) -> None:
    result = load_text(yaml.safe_dump(document, allow_unicode=True))
    event("loaded" if isinstance(result, list) else f"refused: {result.field}")
    if isinstance(result, list):
        check_rules(result)


YAML_ALPHABET = st.sampled_from(list("rules:- kernel\n  \t[]{},&*!|>'\"#%@`?012345678.9eE")
                                + ["arg5", "overrides", "width", "!!int ", "!!float ",
                                   "!!timestamp ", "!!binary ", "!!python/object ", "&a ",
                                   "*a", "<<: ", "\n    ", "0x", ".inf", "~"])


@FUZZ
@given(st.lists(YAML_ALPHABET, max_size=60).map("".join))
def test_yaml_like_text_loads_or_names_file_and_line(text: str) -> None:
    result = load_text(text)
    if isinstance(result, list):
        check_rules(result)


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes_load_or_name_the_file(data: bytes) -> None:
    load_text(data)


@settings(max_examples=20, deadline=timedelta(seconds=5), database=None)
@given(st.integers(65, 100_000), st.sampled_from(["[", "{a: ", "- ", "!!seq ["]))
def test_deep_yaml_is_refused_quickly(depth: int, opener: str) -> None:
    """PyYAML alone takes quadratic time on `[[[[...` (seconds for a few thousand)."""
    if opener == "- ":
        # At most 1000 levels: deeper, the indentation alone passes the size bound (1 MiB).
        text = "rules:\n" + "".join("  " * i + "- \n" for i in range(min(depth, 1000)))
    else:
        closer = {"[": "]", "{a: ": "}", "!!seq [": "]"}[opener]
        text = "rules: " + opener * depth + "1" + closer * depth + "\n"
    result = load_text(text)
    assert isinstance(result, RuleError) and "nested too deeply" in result.problem


# ---------------------------------------------------------------- expressions

VALUE_MAP = st.dictionaries(st.sampled_from([f"arg{i}" for i in range(8)]),
                            st.one_of(st.integers(-(2**64), 2**64),
                                      st.floats(allow_nan=True, allow_infinity=True)),
                            max_size=8)


def structured_expressions() -> st.SearchStrategy[str]:
    atoms = st.one_of(st.integers(0, 2**70).map(str), st.sampled_from(
        ["arg0", "arg5", "0x10", "1.5", "1e308", "0", "arg99"]))
    return st.recursive(atoms, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%"]), inner).map(
            lambda t: f"{t[0]} {t[1]} {t[2]}"),
        inner.map(lambda x: f"({x})"), inner.map(lambda x: f"-{x}"),
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: f"min({', '.join(xs)})"),
    ), max_leaves=30)


def exercise(text: str | int | float, values: dict) -> None:
    try:
        expr = parse_expr(text)
    except ExprError as err:
        assert 0 <= err.position and "\n" not in str(err)
        return
    assert isinstance(expr, Expr)
    for step in (expr.check, lambda: expr.evaluate(values), lambda: expr.evaluate({})):
        try:
            result = step()
        except ExprError:
            continue
        assert result is None or isinstance(result, int | float)
        if isinstance(result, int):
            assert abs(result) <= 2**128


@FUZZ
@given(st.one_of(EXPRESSION_TEXT, st.text(alphabet=CHARS, max_size=40),
                 structured_expressions()), VALUE_MAP)
def test_expressions_parse_and_evaluate_or_raise_expr_error(text: str, values: dict) -> None:
    exercise(text, values)


@settings(FUZZ, max_examples=100)
@given(st.one_of(st.integers(-(2**200), 2**200), st.floats(allow_nan=True)), VALUE_MAP)
def test_numbers_as_expressions(number: int | float, values: dict) -> None:
    exercise(number, values)


@settings(max_examples=30, deadline=timedelta(seconds=5), database=None)
@given(st.integers(1, 5000), st.sampled_from(["(", "-", "+", "min("]))
def test_nesting_of_any_depth_is_an_answer_not_a_crash(depth: int, opener: str) -> None:
    closer = ")" if "(" in opener else ""
    exercise(opener * depth + "arg1" + closer * depth, {"arg1": 3})
