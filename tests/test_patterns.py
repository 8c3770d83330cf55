"""Kernel-name patterns: every pattern that cannot be used is one line naming where it came
from, and matching stays cheap on long names whatever the pattern."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cudump.errors import RuleError, UsageError
from cudump.kernels import pattern as pattern_mod
from cudump.kernels.glob import Glob
from cudump.kernels.pattern import KernelPattern, PatternError, compile_regex
from cudump.kernels.regex_nfa import Automaton, NotRegular
from cudump.policy.breakpoints import BreakpointError, parse_break_spec
from cudump.policy.rules import capture_rule, load_rules
from cudump.rundir.runs import kernel_pattern

try:
    import re._parser as sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]

# Regular expressions re.compile refuses with something other than re.error.
UNCOMPILABLE = [
    ("x{4294967296}", "the repetition number is too large"),          # OverflowError
    ("x{2,4294967296}", "the repetition number is too large"),
    ("(" * 1500 + "a" + ")" * 1500, "nested too deeply"),              # RecursionError
    ("(?:" * 1000 + "a" + ")" * 1000, "nested too deeply"),          # (any recursion limit)
    ("a{3,2}", "min repeat greater than max repeat"),                 # re.error
]


IDS = ["overflow", "overflow-range", "nested-groups", "nested-non-capturing", "re-error"]


@pytest.mark.parametrize(("source", "why"), UNCOMPILABLE, ids=IDS)
def test_a_regex_python_cannot_compile_is_one_line(source: str, why: str) -> None:
    with pytest.raises(PatternError) as info:
        KernelPattern("re:" + source)
    message = str(info.value)
    assert "\n" not in message and why in message and len(message) < 400


def test_deep_nesting_is_refused_whatever_the_recursion_limit() -> None:
    """Refused by depth, not by Python's parser running out of stack: the same under a
    recursion limit another library raised (a test once passed or failed by which tests
    had run before it in its process)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        with pytest.raises(PatternError, match="nested too deeply"):
            KernelPattern("re:" + "(?:" * 1000 + "a" + ")" * 1000)
    finally:
        sys.setrecursionlimit(old)
    assert KernelPattern("re:" + "(" * 200 + "a" + ")" * 200).matches("a", "a")


@pytest.mark.parametrize(("source", "why"), UNCOMPILABLE[:3], ids=IDS[:3])
def test_every_place_a_pattern_is_written_names_itself(tmp_path: Path, source: str,
                                                       why: str) -> None:
    rule = tmp_path / "r.yaml"
    rule.write_text(f"rules:\n  - name: x\n    kernel: 're:{source}'\n")
    with pytest.raises(RuleError) as rule_err:
        load_rules([rule])
    assert str(rule_err.value).startswith(f"{rule}:3: field 'kernel': ")
    with pytest.raises(UsageError, match=r"^--capture-launch re:"):
        capture_rule("re:" + source)
    with pytest.raises(UsageError, match="^bad kernel pattern: "):      # ls/diff/replay/stats
        kernel_pattern("re:" + source)
    with pytest.raises(BreakpointError):                     # --break and the prompt's break
        parse_break_spec("re:" + source)
    assert why in str(rule_err.value) and "\n" not in str(rule_err.value)


def test_nsight_computes_regex_prefix_is_a_regex_everywhere(tmp_path: Path) -> None:
    """`regex:` (Nsight Compute's --kernel-name prefix) means what `re:` means, in every
    place a pattern is read, not a glob that matches nothing."""
    name = "void vecAdd<float>(float*, int)"
    assert KernelPattern("regex:^void vec").matches(name)
    assert KernelPattern("regex:^void vec").is_regex
    assert not KernelPattern("regex:^mul").matches(name)
    rule = tmp_path / "r.yaml"
    rule.write_text("rules:\n  - name: x\n    kernel: 'regex:vecA'\n")
    assert load_rules([rule])[0].matches(name, "")
    assert capture_rule("regex:vecA").matches(name, "")
    assert kernel_pattern("regex:vecA").matches(name)                    # type: ignore[union-attr]
    assert parse_break_spec("regex:vecA")[0].matches(name)
    with pytest.raises(PatternError, match="after 'regex:'"):
        KernelPattern("regex:")
    with pytest.raises(UsageError, match=r"^--capture-launch regex:\(a\+\)\+"):
        capture_rule("regex:(a+)+")


@pytest.mark.parametrize("option", ["--break", "--capture-launch"])
def test_a_bad_regex_option_is_one_line_naming_the_option(shim_lib: Path, tmp_path: Path,
                                                          option: str) -> None:
    env = dict(os.environ, CUDUMP_SHIM=str(shim_lib),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "cudump", option, "re:x{4294967296}",
                           "--out", str(tmp_path / "run"), "--", "true"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"cudump: error: {option} re:x{{4294967296}}: invalid regular expression "
        "'x{4294967296}': the repetition number is too large"]
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- the automaton


def _random_regex(rng: random.Random, depth: int = 0) -> str:
    """A random regular expression over a small alphabet, of the constructs the automaton
    takes (no repetition of a repetition: those are refused before matching)."""
    atoms = ["a", "b", ":", ".", "[ab]", "[^a]", r"\w", r"\W", r"\d", "A", "<", "[a-c:]"]
    parts = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.1:
            parts.append(rng.choice(["^", "$", r"\b", r"\B", r"\A", r"\Z"]))
            continue
        if roll < 0.25 and depth < 2:
            inner = "|".join(_random_regex(rng, depth + 1) for _ in range(rng.randint(1, 3)))
            atom = rng.choice(["(", "(?:", "(?i:"]) + inner + ")"
            repeat = rng.random() < 0.3 and "|" not in inner and not re.search(r"[*+?}]", inner)
        else:
            atom, repeat = rng.choice(atoms), True
        if repeat and rng.random() < 0.5:
            atom += rng.choice(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "*?", "+?", "{2,}"])
        parts.append(atom)
    return ("(?i)" if depth == 0 and rng.random() < 0.1 else "") + "".join(parts)


def test_the_automaton_finds_what_pythons_engine_finds() -> None:
    rng = random.Random(20261207)
    alphabet = "ab:A<1 _\n"
    checked = 0
    while checked < 3000:
        source = _random_regex(rng)
        try:
            parsed = sre_parse.parse(source)
            compiled = re.compile(source)
            automaton = Automaton(parsed)
        except (re.error, NotRegular):
            continue
        for _ in range(5):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
            assert automaton.search(text) == (compiled.search(text) is not None), (source, text)
            checked += 1


@pytest.mark.parametrize("source", [r"(?=a)b", r"(a)\1", r"(a)?(?(1)b|c)", r"(?>a*)b",
                                    r"a*+b", r"(?<!x)y"])
def test_constructs_that_are_not_regular_are_left_to_pythons_engine(source: str) -> None:
    with pytest.raises(NotRegular):
        Automaton(sre_parse.parse(source))
    assert compile_regex(source).automaton is None


def test_a_large_bounded_repetition_is_not_built() -> None:
    with pytest.raises(NotRegular, match="large bounded repetition"):
        Automaton(sre_parse.parse("(abcd){100000}"))
    with pytest.raises(NotRegular):
        Automaton(sre_parse.parse("x{4294967294}"))
    assert Automaton(sre_parse.parse("(){4294967294}b")).search("ab")


def test_an_irregular_regex_may_have_one_unbounded_repetition() -> None:
    assert compile_regex("(?=.*a)(?=.*b).*c").automaton is None        # accepted
    with pytest.raises(PatternError, match="has a lookaround and more than one unbounded"):
        compile_regex("(?=.*a).*b.*c")
    with pytest.raises(PatternError, match="has a backreference and more than one"):
        compile_regex(r"(\w)\1.*.*")


# ---------------------------------------------------------------- long names


def _cutlass_name(length: int) -> str:
    inner = "float"
    while len(inner) < length:
        inner = (f"cutlass::gemm::kernel::Gemm<{inner}, cutlass::gemm::GemmShape<128, 128, 8>, "
                 "(cutlass::arch::CacheOperation::Kind)1>")
    return f"void cutlass::Kernel<{inner}>(cutlass::gemm::kernel::Params)"


class CountingStr(str):
    """A text that counts the characters read from it at Python level."""

    reads = 0

    def __iter__(self):  # type: ignore[override]
        for ch in str.__str__(self):
            CountingStr.reads += 1
            yield ch

    def __getitem__(self, key):  # type: ignore[override]
        CountingStr.reads += 1
        return str.__getitem__(self, key)


class NoEngine:
    """Stands for Python's engine where it must not be used (it would backtrack)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def search(self, text: str) -> None:
        assert len(text) <= self.limit, "Python's engine was given a long name"
        return None


@pytest.mark.parametrize("source", [".*.*Q", ".*.*Params\\)$", "a.*b.*c", "(k|Gemm).*<.*Z",
                                    "\\bGemm.*1>.*\\bX", ".*x.*y?"])
def test_a_regex_on_a_5000_character_name_reads_each_character_once(source: str) -> None:
    name = _cutlass_name(5000)
    regex = compile_regex(source)
    assert regex.automaton is not None and not regex.engine_cheap(len(name))
    CountingStr.reads = 0
    found = regex.automaton.search(CountingStr(name))
    assert found == (re.search(source, name) is not None if source != ".*.*Q" else False)
    assert CountingStr.reads <= len(name) + 1          # linear: the engine's cubic work is gone
    # Through KernelPattern (both forms of the name), Python's engine is never given it.
    pattern = KernelPattern("re:" + source)
    assert isinstance(pattern.regex, pattern_mod.Regex)
    pattern.regex.compiled = NoEngine(1000)  # type: ignore[assignment]
    assert pattern.matches(name) == found


def test_a_glob_of_5000_characters_on_a_5000_character_name_is_linear() -> None:
    name = "a" * 5000
    for glob, expected in [("*" + "a" * 4998 + "b", False), ("?" + "a" * 4998 + "*", True),
                           ("*a" * 2500 + "?b", False), ("*" + "a?" * 2400 + "*b", False),
                           ("?" * 5000, True), ("?" * 5001, False)]:
        CountingStr.reads = 0
        assert Glob(glob).fullmatch(CountingStr(name)) == expected, glob[:20]
        assert CountingStr.reads <= len(name)            # the two-pointer matcher: 12.5 M
        assert KernelPattern(glob).matches(name) == expected


def test_globs_match_as_a_translated_regex_does() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        glob = "".join(rng.choice("ab*?<") for _ in range(rng.randint(1, 8)))
        text = "".join(rng.choice("ab<") for _ in range(rng.randint(0, 9)))
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)
        assert Glob(glob).fullmatch(text) == bool(re.fullmatch(regex, text, re.S)), (glob, text)


def test_answers_are_kept_per_pattern_and_name(monkeypatch: pytest.MonkeyPatch) -> None:
    pattern = KernelPattern("re:unique_kernel_name_[0-9]+\\(")
    calls = []
    real = pattern.regex.search

    def counted(text: str) -> bool:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(pattern.regex, "search", counted)
    for _ in range(100):
        assert pattern.matches("void unique_kernel_name_7(float*)")
    assert len(calls) <= 2        # the two forms of the name, once


def test_a_pattern_survives_pickling() -> None:
    import pickle

    for text in ("re:.*.*Q", "k*", "re:(?=a)b"):
        pattern = KernelPattern(text, "base")
        again = pickle.loads(pickle.dumps(pattern))
        assert again == pattern and again.matches("void Q(int)") == pattern.matches("void Q(int)")
