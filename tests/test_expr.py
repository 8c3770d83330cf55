"""The geometry expression language: evaluation, names and errors with positions."""

import pytest

from cudump.kernels.expr import ExprError, parse_expr

VALUES = {"arg0": 0x7F0000001000, "arg1": 4096, "arg4": 7680, "arg5": 1920, "arg6": 1080,
          "arg7": 1.5}


@pytest.mark.parametrize("text,expected", [
    ("arg5", 1920),
    ("arg5 * 2", 3840),
    ("arg5*arg6*4", 1920 * 1080 * 4),
    ("1 + 2 * 3", 7),
    ("(1 + 2) * 3", 9),
    ("10 - 4 - 3", 3),
    ("-arg5 + 2000", 80),
    ("--3", 3),
    ("+7", 7),
    ("0x100", 256),
    ("0XfF", 255),
    ("arg6 / 2", 540),
    ("7 // 2", 3),
    ("-7 // 2", -4),
    ("7 % 3", 1),
    ("-7 % 3", 2),
    ("(arg5 * 4 + 255) // 256 * 256", (1920 * 4 + 255) // 256 * 256),
    ("min(arg5, 1000)", 1000),
    ("max(arg5, arg6, 5000)", 5000),
    ("min(3)", 3),
    ("arg7 * 2", 3.0),
    ("2.5e1", 25.0),
    (".5 + 1.", 1.5),
])
def test_evaluates(text, expected):
    value = parse_expr(text).evaluate(VALUES)
    assert value == expected
    assert type(value) is type(expected)


def test_exact_division_stays_integer_and_inexact_becomes_float():
    assert parse_expr("9 / 3").evaluate({}) == 3
    assert isinstance(parse_expr("9 / 3").evaluate({}), int)
    assert parse_expr("7 / 2").evaluate({}) == 3.5


@pytest.mark.parametrize("value", [1920, 3, 0.5])
def test_numbers_from_yaml_are_expressions(value):
    expr = parse_expr(value)
    assert expr.text == repr(value)
    assert expr.evaluate({}) == value
    assert expr.names() == frozenset()


def test_names():
    assert parse_expr("arg6").names() == frozenset({"arg6"})
    assert parse_expr("max(arg1, arg2 * (arg10 - 1))").names() == frozenset(
        {"arg1", "arg2", "arg10"})


@pytest.mark.parametrize("text,message,position", [
    ("arg5 +", "expected a number, argN or '(', found end of expression at column 7", 6),
    ("width * 2", "unknown name 'width' (use arg0, arg1, ... or min(), max()) at column 1", 0),
    ("arg5 $ 2", "unexpected character '$' at column 6", 5),
    ("(arg5 * 2", "expected ')', found end of expression at column 10", 9),
    ("arg5 arg6", "unexpected 'arg6' at column 6", 5),
    ("arg05", "unknown name 'arg05' (use arg0, arg1, ... or min(), max()) at column 1", 0),
    ("min arg5", "expected '(', found 'arg5' at column 5", 4),
    ("max(1,)", "expected a number, argN or '(', found ')' at column 7", 6),
    ("", "empty expression at column 1", 0),
    ("   ", "empty expression at column 1", 0),
    ("2 ** 3", "expected a number, argN or '(', found '*' at column 4", 3),
])
def test_parse_errors_name_the_position(text, message, position):
    with pytest.raises(ExprError) as info:
        parse_expr(text)
    assert str(info.value) == message
    assert info.value.position == position


def test_evaluation_errors_name_the_position():
    with pytest.raises(ExprError) as info:
        parse_expr("arg5 * arg9").evaluate(VALUES)
    assert str(info.value) == "arg9 has no numeric value in this launch at column 8"
    assert info.value.position == 7
    with pytest.raises(ExprError) as info:
        parse_expr("arg5 // (arg6 - 1080)").evaluate(VALUES)
    assert str(info.value) == "division by zero at column 6"


@pytest.mark.parametrize("value", [True, None, [1, 2]])
def test_non_numbers_are_rejected(value):
    with pytest.raises(ExprError):
        parse_expr(value)


def test_expression_is_value_like():
    assert parse_expr("arg1 + 1") == parse_expr("arg1 + 1")
    assert parse_expr("arg1 + 1") != parse_expr("arg1+1")


# ---------------------------------------------------------------- hostile input


@pytest.mark.parametrize("text", [
    "(" * 250 + "1" + ")" * 250,          # a RecursionError before nesting was bounded
    "(" * 5000 + "1" + ")" * 5000,
    "-" * 5000 + "1",
    "min(" * 300 + "1" + ")" * 300,
])
def test_deep_nesting_is_an_expression_error(text):
    with pytest.raises(ExprError) as info:
        parse_expr(text)
    assert "nested too deeply" in str(info.value)


def test_nesting_up_to_the_limit_is_fine():
    from cudump.kernels.expr import MAX_NESTING

    assert parse_expr("(" * MAX_NESTING + "arg1" + ")" * MAX_NESTING).evaluate(VALUES) == 4096
    assert parse_expr("-" * MAX_NESTING + "3").evaluate({}) == 3


def test_long_flat_sums_and_products_need_no_recursion():
    text = " + ".join(["arg5"] * 20000)
    assert parse_expr(text).evaluate(VALUES) == 1920 * 20000
    assert parse_expr(" * ".join(["1"] * 20000)).evaluate({}) == 1


@pytest.mark.parametrize("text", ["1" * 5000, "0x" + "f" * 5000, "9" * 41, "1e999", "1.5e400"])
def test_numbers_too_large_are_expression_errors(text):
    with pytest.raises(ExprError) as info:
        parse_expr(text)
    assert str(info.value).startswith("number too large")


@pytest.mark.parametrize("text,values", [
    ("0x" + "f" * 32 + " * 0x" + "f" * 32, {}),        # int beyond 2**128
    ("arg0 * arg0 * arg0 * arg0 * arg0", {"arg0": 1 << 40}),
    ("-(0x" + "f" * 32 + " * 2)", {}),
])
def test_results_too_large_are_expression_errors(text, values):
    with pytest.raises(ExprError) as info:
        parse_expr(text).evaluate(values)
    assert "number too large" in str(info.value)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1 << 200])
def test_yaml_numbers_that_are_not_usable(value):
    with pytest.raises(ExprError):
        parse_expr(value)


@pytest.mark.parametrize("text,message", [
    ("4 // 0 * arg1", "division by zero at column 3"),
    ("arg1 % (2 - 2)", "division by zero at column 6"),
    ("max(arg1, 1 / 0)", "division by zero at column 13"),
])
def test_check_finds_what_fails_for_any_argument_values(text, message):
    with pytest.raises(ExprError) as info:
        parse_expr(text).check()
    assert str(info.value) == message


def test_check_accepts_what_depends_on_the_launch():
    parse_expr("arg1 // (arg2 - 1)").check()
    parse_expr("(arg5 * 4 + 255) // 256 * 256").check()
