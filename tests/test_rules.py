"""Rule files: loading, matching, launch selection, and every error message."""

import textwrap
from pathlib import Path

import pytest

from cudump.errors import RuleError
from cudump.kernels.args import decode_args
from cudump.kernels.signature import parse_signature
from cudump.policy.rules import (
    Action,
    ArgOverride,
    RuleCounter,
    capture_rule,
    digest_rule,
    load_rules,
    scan_rule,
)

ROOT = Path(__file__).resolve().parent.parent
ZED = ("void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>"
       "(uchar4*, int, device::uchar8*, device::uchar8*, int, int, int, float)")
ZED_MANGLED = "_ZN6device12FrP0k5607tPVILN2sl14YUV_CONVENTIONE2EEEvP6uchar4iPNS_6uchar8ES6_iiif"
NV12 = ("nv12_to_uyvy(unsigned char const*, unsigned int, unsigned char*, unsigned int, "
        "unsigned int, unsigned int)")
NV12_MANGLED = "_Z12nv12_to_uyvyPKhjPhjjj"


def write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def load(tmp_path: Path, text: str):
    return load_rules([write(tmp_path, text)])


def error(tmp_path: Path, text: str) -> RuleError:
    path = write(tmp_path, text)
    with pytest.raises(RuleError) as info:
        load_rules([path])
    return info.value


# ---------------------------------------------------------------- loading


def test_defaults(tmp_path):
    (rule,) = load(tmp_path, """
        rules:
          - kernel: "device::*"
        """)
    assert rule.name == "device::*"
    assert rule.line == 2
    assert rule.path == tmp_path / "r.yaml"
    assert (rule.skip, rule.count, rule.every, rule.args) == (0, None, 1, "pointers")
    assert rule.when == {"before", "after"}
    assert rule.formats == {"npy", "png"}
    assert rule.overrides == {}
    assert rule.matcher.subject == "demangled"


def test_all_fields(tmp_path):
    (rule,) = load(tmp_path, """
        rules:
          - name: left
            kernel: "re:FrP0k"
            match: base
            skip: 2
            count: 3
            every: 4
            args: [0, 2]
            when: after
            format: [png]
            overrides:
              2: {dtype: uchar4, width: arg5, height: "arg6 // 2", pitch: arg4, range: [0, 1]}
              "0": {dtype: float32, count: "arg5 * arg6"}
        """)
    assert (rule.name, rule.skip, rule.count, rule.every, rule.args) == ("left", 2, 3, 4, [0, 2])
    assert rule.when == {"after"} and rule.formats == {"png"}
    two = rule.overrides[2]
    assert two.dtype == "uint8" and two.channels.text == "4"
    assert (two.width.text, two.height.text, two.pitch.text) == ("arg5", "arg6 // 2", "arg4")
    assert two.range == (0.0, 1.0) and two.count is None
    zero = rule.overrides[0]
    assert (zero.dtype, zero.channels, zero.count.text) == ("float32", None, "arg5 * arg6")


def test_list_and_single_rule_files(tmp_path):
    listed = load(tmp_path, """
        - kernel: a*
        - kernel: b*
          when: [before, after]
        """)
    assert [r.matcher.text for r in listed] == ["a*", "b*"]
    assert [r.line for r in listed] == [1, 2]
    assert listed[1].when == {"before", "after"}
    (single,) = load(tmp_path, "kernel: nv12*\nformat: npy\n")
    assert single.matcher.text == "nv12*" and single.formats == {"npy"}


def test_several_files_in_order(tmp_path):
    a = write(tmp_path, "- kernel: a\n", "a.yaml")
    b = write(tmp_path, "- kernel: b\n- kernel: c\n", "b.yaml")
    rules = load_rules([a, b])
    assert [(r.path.name, r.matcher.text, r.line) for r in rules] == [
        ("a.yaml", "a", 1), ("b.yaml", "b", 1), ("b.yaml", "c", 2)]


# ---------------------------------------------------------------- matching


@pytest.mark.parametrize("pattern,match,expected", [
    ("device::FrP0k5607tPV*", "demangled", True),     # without the return type
    ("void device::FrP0k5607tPV*", "demangled", True),  # with it
    ("FrP0k5607tPV*", "demangled", True),             # ... or the bare function name
    ("FrP0k5607tPV", "demangled", True),
    ("device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>", "demangled", True),  # without params
    ("FrP0k", "demangled", False),                    # a plain word is not a substring
    ("*FrP0k5607*", "demangled", True),
    ("*tPV", "demangled", True),
    ("*FrP0k5607tPV*", "demangled", True),
    ("device::FrP0k5607tPV<(sl::YUV_CONVENTION)?>(*", "demangled", True),
    ("*(uchar4*, int, device::uchar8*, device::uchar8*, int, int, int, float)", "demangled",
     True),
    ("device::FrP0k5607tPV[*", "demangled", False),   # brackets are literal
    ("re:FrP0k", "demangled", True),                  # regex: searched
    ("re:^device::", "demangled", True),              # searched with and without "void "
    ("re:^void device::", "demangled", True),
    ("re:^FrP0k", "demangled", False),
    ("re:YUV_CONVENTION\\)2", "demangled", True),
    ("FrP0k5607tPV", "base", True),
    ("FrP*", "base", True),
    ("device::FrP0k5607tPV", "base", False),
    ("_ZN6device12FrP0k*", "mangled", True),
    ("device::FrP0k5607tPV*", "mangled", False),
    ("re:YUV_CONVENTIONE2", "mangled", True),
])
def test_matches_seed_kernel(tmp_path, pattern, match, expected):
    (rule,) = load(tmp_path, f"- kernel: '{pattern}'\n  match: {match}\n")
    assert rule.matches(ZED, ZED_MANGLED) is expected


def test_matches_extern_c_and_plain_names(tmp_path):
    (rule,) = load(tmp_path, "- kernel: 'nv12_to_uyvy*'\n")
    assert rule.matches(NV12, NV12_MANGLED)
    assert rule.matches("nv12_to_uyvy", "nv12_to_uyvy")
    assert not rule.matches(ZED, ZED_MANGLED)
    (base,) = load(tmp_path, "- kernel: 'nv12_to_uyvy'\n  match: base\n")
    assert base.matches(NV12, NV12_MANGLED)
    assert base.matches("nv12_to_uyvy", "nv12_to_uyvy")


def selected(rule, launches):
    return [n for n in range(1, launches + 1) if rule.selects(n)]


@pytest.mark.parametrize("fields,expected", [
    ("", list(range(1, 21))),
    ("skip: 3", list(range(4, 21))),
    ("count: 2", [1, 2]),
    ("every: 5", [1, 6, 11, 16]),
    ("skip: 2\n  every: 3\n  count: 4", [3, 6, 9, 12]),
    ("skip: 18\n  count: 5", [19, 20]),
    ("skip: 25", []),
])
def test_selects(tmp_path, fields, expected):
    (rule,) = load(tmp_path, f"- kernel: k\n  {fields}\n")
    assert selected(rule, 20) == expected


def test_selected_args(tmp_path):
    sig = parse_signature(ZED)
    args = decode_args(sig, [b"\0" * 8, b"\0" * 4, b"\0" * 8, b"\0" * 8, b"\0" * 4,
                             b"\0" * 4, b"\0" * 4, b"\0" * 4])
    (rule,) = load(tmp_path, "- kernel: k\n")
    assert rule.selected_args(args) == [0, 2, 3]
    (rule,) = load(tmp_path, "- kernel: k\n  overrides: {5: {count: 1}}\n")
    assert rule.selected_args(args) == [0, 2, 3, 5]
    (rule,) = load(tmp_path, "- kernel: k\n  args: [3, 1, 9]\n")
    assert rule.selected_args(args) == [3, 1]


def test_zed_rules_file():
    (rule,) = load_rules([ROOT / "rules" / "zed.yaml"])
    assert rule.matches(ZED, ZED_MANGLED)
    assert not rule.matches(NV12, NV12_MANGLED)
    assert rule.args == [0, 2, 3]
    assert rule.when == {"before", "after"} and rule.formats == {"npy", "png"}
    assert set(rule.overrides) == {0, 2, 3}
    for index in (2, 3):
        o = rule.overrides[index]
        assert (o.dtype, o.channels.text, o.width.text, o.height.text, o.pitch.text) == (
            "uint8", "4", "arg5", "arg6", "arg4")
    zero = rule.overrides[0]
    assert zero.dtype is None  # uchar4 from the signature
    assert (zero.width.text, zero.height.text, zero.pitch.text) == ("arg5", "arg6", "arg1")
    assert all(rule.selects(n) for n in range(1, 50))


def test_override_defaults():
    o = ArgOverride()
    assert not o.is_2d and o.dtype is None


# ---------------------------------------------------------------- errors


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(RuleError) as info:
        load_rules([path])
    assert str(info.value) == f"{path}: no such rule file"
    assert info.value.exit_code == 2


def test_directory(tmp_path):
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path])
    assert str(info.value) == f"{tmp_path}: is a directory, not a rule file"


def test_not_utf8(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_bytes(b"rules:\n  - kernel: \xff\xfe\n")
    with pytest.raises(RuleError) as info:
        load_rules([path])
    assert str(info.value) == f"{path}: not UTF-8 text"


@pytest.mark.parametrize("text", ["", "# nothing here\n", "\n\n"])
def test_empty_file(tmp_path, text):
    err = error(tmp_path, text)
    assert str(err) == (f"{tmp_path / 'r.yaml'}: empty rule file; "
                        "expected 'rules:' and a list of rules")
    assert (err.line, err.field) == (None, None)


def test_yaml_syntax_error_names_the_line(tmp_path):
    err = error(tmp_path, """
        rules:
          - kernel: a
           skip: 1
        """)
    assert str(err) == (f"{tmp_path / 'r.yaml'}:3: YAML syntax error: expected <block end>, "
                        "but found '<block mapping start>' (check indentation and quoting)")
    assert err.line == 3


def test_yaml_unclosed_quote(tmp_path):
    err = error(tmp_path, 'rules:\n  - kernel: "abc\n')
    assert str(err) == (f"{tmp_path / 'r.yaml'}:3: YAML syntax error: found unexpected end "
                        "of stream (check indentation and quoting)")


P = "r.yaml"

ERRORS = [
    # (file text, line, field, problem)
    ("42\n", 1, None, "expected 'rules:' and a list of rules, got 42"),
    ("rules: nv12*\n", 1, "rules", "expected a list of rules, got 'nv12*'"),
    ("rules:\n", 1, "rules", "expected a list of rules, got nothing"),
    ("rules: []\n", 1, "rules",
     "the list is empty; add a rule such as '- kernel: \"name*\"'"),
    ("{}\n", 1, "rules", "missing; expected 'rules:' and a list of rules"),
    ("rule:\n  - kernel: a\n", 1, "rule",
     "unknown key; did you mean 'rules'? (expected one of: rules)"),
    ("rules:\n  - kernel: a\nversion: 2\n", 3, "version",
     "unknown key; (expected one of: rules)"),
    ("rules:\n  - nv12*\n", 2, "rules",
     "each rule must be a mapping with a 'kernel:' key, got 'nv12*'"),
    ("rules:\n  - name: x\n", 2, "kernel",
     "missing; every rule needs a kernel pattern such as 'device::FrP0k5607tPV*' or 're:FrP0k'"),
    ("rules:\n  - kernal: a\n", 2, "kernal",
     "unknown key; did you mean 'kernel'? (expected one of: name, kernel, match, skip, count, "
     "every, args, when, format, overrides, action, replay, scope)"),
    ("rules:\n  - kernel: a\n    kernel: b\n", 3, "kernel", "appears twice"),
    ("rules:\n  - kernel: 12\n", 2, "kernel", "expected a pattern string, got 12"),
    ("rules:\n  - kernel: [a]\n", 2, "kernel", "expected a pattern string, got a list"),
    ("rules:\n  - kernel: ''\n", 2, "kernel", "empty kernel pattern"),
    ("rules:\n  - kernel: 're:'\n", 2, "kernel", "empty regular expression after 're:'"),
    ("rules:\n  - kernel: 're:foo(bar'\n", 2, "kernel",
     "invalid regular expression 'foo(bar': missing ), unterminated subpattern at position 3"),
    ("rules:\n  - kernel: a\n    name: 3\n", 3, "name", "expected a string, got 3"),
    ("rules:\n  - kernel: a\n    match: symbol\n", 3, "match",
     "expected one of demangled, mangled, base, got 'symbol'"),
    ("rules:\n  - kernel: a\n    skip: -1\n", 3, "skip", "expected a whole number >= 0, got -1"),
    ("rules:\n  - kernel: a\n    skip: 1.5\n", 3, "skip",
     "expected a whole number >= 0, got 1.5"),
    ("rules:\n  - kernel: a\n    count: 0\n", 3, "count", "expected a whole number >= 1, got 0"),
    ("rules:\n  - kernel: a\n    every: true\n", 3, "every",
     "expected a whole number >= 1, got true"),
    ("rules:\n  - kernel: a\n    every: two\n", 3, "every",
     "expected a whole number >= 1, got 'two'"),
    ("rules:\n  - kernel: a\n    args: all\n", 3, "args",
     "expected a list of argument indexes such as [0, 2] or 'pointers', got 'all'"),
    ("rules:\n  - kernel: a\n    args: []\n", 3, "args",
     "expected a list of argument indexes such as [0, 2] or 'pointers', got a list"),
    ("rules:\n  - kernel: a\n    args:\n      - 0\n      - x\n", 5, "args",
     "argument index must be a whole number >= 0, got 'x'"),
    ("rules:\n  - kernel: a\n    args: [0, -2]\n", 3, "args",
     "argument index must be a whole number >= 0, got -2"),
    ("rules:\n  - kernel: a\n    args: [2, 2]\n", 3, "args", "argument 2 is listed twice"),
    ("rules:\n  - kernel: a\n    when: during\n", 3, "when",
     "expected before, after or both, got 'during'"),
    ("rules:\n  - kernel: a\n    when: [before, both]\n", 3, "when",
     "expected before, after or both, got 'both'"),
    ("rules:\n  - kernel: a\n    when: []\n", 3, "when",
     "expected before, after or both, got an empty list"),
    ("rules:\n  - kernel: a\n    format: jpg\n", 3, "format",
     "expected npy, png, both, digest or check-nan, got 'jpg'"),
    ("rules:\n  - kernel: a\n    overrides: [2]\n", 3, "overrides",
     "expected a mapping from argument index to settings, e.g. {2: {dtype: uint8}}, "
     "got a list"),
    ("rules:\n  - kernel: a\n    overrides:\n      left: {dtype: uint8}\n", 4, "overrides",
     "argument index must be a whole number >= 0, got 'left'"),
    ("rules:\n  - kernel: a\n    overrides:\n      2: {dtype: uint8}\n      '2': {}\n", 5,
     "overrides.2", "appears twice"),
    ("rules:\n  - kernel: a\n    args: [0, 2]\n    overrides:\n      5: {dtype: uint8}\n", 5,
     "overrides.5", "argument 5 is not in 'args' [0, 2]; add it there"),
    ("rules:\n  - kernel: a\n    overrides:\n      2: uint8\n", 4, "overrides.2",
     "expected a mapping of settings (dtype, channels, width, height, pitch, count, range, "
     "field), "
     "got 'uint8'"),
    ("rules:\n  - kernel: a\n    overrides:\n      2:\n        dtype: uint8\n        hight: 3\n",
     6, "overrides.2.hight",
     "unknown key; did you mean 'height'? (expected one of: dtype, channels, width, height, "
     "pitch, count, range, field)"),
    ("rules:\n  - kernel: a\n    overrides:\n      2: {dtype: uchar8}\n", 4,
     "overrides.2.dtype", "unknown dtype 'uchar8'; use a numpy name (uint8, uint16, int32, "
     "float16, float32, ...), bfloat16 or a CUDA type (uchar4, float2, ...)"),
    ("rules:\n  - kernel: a\n    overrides:\n      2: {dtype: 8}\n", 4,
     "overrides.2.dtype", "unknown dtype 8; use a numpy name (uint8, uint16, int32, "
     "float16, float32, ...), bfloat16 or a CUDA type (uchar4, float2, ...)"),
    ("rules:\n  - kernel: a\n    overrides:\n      2: {dtype: uchar4, channels: 3}\n", 4,
     "overrides.2.channels",
     "dtype 'uchar4' already has 4 channels; drop 'channels' or give dtype uint8"),
    ("rules:\n  - kernel: a\n    overrides:\n      2:\n        width: arg5 +\n", 5,
     "overrides.2.width", "bad expression 'arg5 +': expected a number, argN or '(', "
     "found end of expression at column 7"),
    ("rules:\n  - kernel: a\n    overrides:\n      2:\n        height: rows\n", 5,
     "overrides.2.height", "bad expression 'rows': unknown name 'rows' (use arg0, arg1, ... "
     "or min(), max()) at column 1"),
    ("rules:\n  - kernel: a\n    overrides:\n      2:\n        pitch: [1]\n", 5,
     "overrides.2.pitch", "expected a number or an expression such as 'arg5 * 2', got a list"),
    ("rules:\n  - kernel: a\n    overrides:\n      2:\n        channels: yes\n", 5,
     "overrides.2.channels",
     "expected a number or an expression such as 'arg5 * 2', got true"),
    ("rules:\n  - kernel: a\n    overrides:\n      2:\n        width: 4\n        count: 9\n", 6,
     "overrides.2.count", "cannot be combined with width, height or pitch; use count for 1-D "
     "buffers and width/height/pitch for images"),
    ("rules:\n  - kernel: a\n    overrides:\n      2: {range: [1, 0]}\n", 4,
     "overrides.2.range", "expected [low, high], finite numbers with low < high, got [1, 0]"),
    ("rules:\n  - kernel: a\n    overrides:\n      2: {range: [0, x, 2]}\n", 4,
     "overrides.2.range", "expected [low, high], finite numbers with low < high, got [0, 'x', 2]"),
    ("rules:\n  - kernel: a\n    overrides:\n      2: {range: 1}\n", 4,
     "overrides.2.range", "expected [low, high], finite numbers with low < high, got 1"),
    ("rules:\n  - kernel: a\n    overrides:\n      2: {field: 4}\n", 4,
     "overrides.2.field",
     "expected the byte offset of a pointer inside the argument (0, 8, 16, ...), got 4"),
    # Numbers the shim's counters cannot hold (proto_selector: every 32 bits, skip and count
    # 64, count 2**64 - 1 meaning no limit).
    ("rules:\n  - kernel: a\n    every: 4294967296\n", 3, "every",
     "4294967296 is too large: at most 4294967295 (the shim holds it in 32 bits)"),
    ("rules:\n  - kernel: a\n    skip: 18446744073709551616\n", 3, "skip",
     "18446744073709551616 is too large: at most 18446744073709551615 (the shim holds it in "
     "64 bits)"),
    ("rules:\n  - kernel: a\n    count: 18446744073709551615\n", 3, "count",
     "18446744073709551615 is too large: at most 18446744073709551614 (the shim holds it in "
     "64 bits)"),
    ("rules:\n  - kernel: a\n    action: break\n    skip: " + "1" + "0" * 30 + "\n", 4, "skip",
     "1000000000000000000000000000000 is too large: at most 18446744073709551615 (the shim "
     "holds it in 64 bits)"),
]


@pytest.mark.parametrize("text,line,field,problem", ERRORS)
def test_error_messages(tmp_path, text, line, field, problem):
    err = error(tmp_path, text)
    what = f" field '{field}':" if field else ""
    assert str(err) == f"{tmp_path / P}:{line}:{what} {problem}"
    assert (err.path, err.line, err.field, err.problem) == (str(tmp_path / P), line, field,
                                                            problem)
    assert "\n" not in str(err)


def test_first_bad_file_is_named(tmp_path):
    good = write(tmp_path, "- kernel: a\n", "good.yaml")
    bad = write(tmp_path, "- kernel: a\n- kernel: b\n  skip: x\n", "bad.yaml")
    with pytest.raises(RuleError) as info:
        load_rules([good, bad])
    assert str(info.value) == f"{bad}:3: field 'skip': expected a whole number >= 0, got 'x'"


# ---------------------------------------------------------------- action


def test_action_defaults_to_snapshot(tmp_path):
    (rule,) = load(tmp_path, "- kernel: k\n")
    assert rule.action == "snapshot" and not rule.is_break
    assert rule.when == {"before", "after"} and rule.formats == {"npy", "png"}


def test_break_rule_needs_no_snapshot_fields(tmp_path):
    (rule,) = load(tmp_path, """
        rules:
          - kernel: "device::FrP0k5607tPV*"
            action: break
            skip: 1
            count: 2
        """)
    assert rule.action == "break" and rule.is_break
    assert rule.matches(ZED, ZED_MANGLED)
    assert [n for n in range(1, 6) if rule.selects(n)] == [2, 3]
    # A break rule takes no snapshots, even for a consumer that forgets to check action.
    assert rule.when == frozenset() and rule.formats == frozenset() and rule.overrides == {}


@pytest.mark.parametrize("text,actions", [
    ("- kernel: k\n", Action.SNAPSHOT),
    ("- {kernel: k, format: png}\n", Action.SNAPSHOT),
    ("- {kernel: k, format: digest}\n", Action.DIGEST),
    ("- {kernel: k, format: check-nan}\n", Action.SCAN),
    ("- {kernel: k, replay: true}\n", Action.SNAPSHOT | Action.CAPTURE),
    ("- {kernel: k, replay: false}\n", Action.SNAPSHOT),
    ("- {kernel: k, action: break}\n", Action.BREAK),
])
def test_a_rule_file_sets_the_action_flags(tmp_path, text, actions):
    (rule,) = load(tmp_path, text)
    assert rule.actions == actions
    assert rule.takes_buffers == (actions != Action.BREAK)
    assert rule.replay == (Action.CAPTURE in actions)


def test_the_options_set_the_action_flags():
    assert digest_rule().actions == Action.DIGEST and digest_rule().is_digest
    assert scan_rule().actions == Action.SCAN and scan_rule().is_scan
    captured = capture_rule("k*")
    assert captured.actions == Action.SNAPSHOT | Action.CAPTURE and captured.replay
    assert captured.formats == {"npy"} and captured.origin == "--capture-launch"


def test_break_rules_are_counted_per_process_and_the_first_that_selects_wins(tmp_path):
    first, second = load(tmp_path, """
        - {kernel: k, action: break, skip: 1}
        - {kernel: k, action: break}
        """)
    counter = RuleCounter([first, second])
    assert counter.wants("k", "_Z1kv") and not counter.wants("other", "_Z5otherv")
    assert counter.selected(1, "k", "_Z1kv") is second      # the first skips its first
    assert counter.selected(1, "k", "_Z1kv") is first
    assert counter.selected(2, "k", "_Z1kv") is second      # counted per process
    assert counter.selected(1, "other", "_Z5otherv") is None


@pytest.mark.parametrize("key,value", [("args", "[0]"), ("when", "after"),
                                       ("format", "npy"), ("overrides", "{0: {count: 4}}")])
def test_break_rule_refuses_snapshot_fields(tmp_path, key, value):
    err = error(tmp_path, f"- kernel: k\n  action: break\n  {key}: {value}\n")
    assert (err.line, err.field) == (3, key)
    assert "takes no snapshots" in err.problem and f"drop '{key}'" in err.problem


def test_unknown_action(tmp_path):
    err = error(tmp_path, "- kernel: k\n  action: stop\n")
    assert (err.line, err.field) == (2, "action")
    assert err.problem == "expected one of snapshot, break, got 'stop'"


# ---------------------------------------------------------------- checked before running


CONSTANT_ERRORS = [
    # (override settings, field, problem)
    ("{width: -3}", "width", "expected a whole number >= 1, got -3"),
    ("{height: 0}", "height", "expected a whole number >= 1, got 0"),
    ("{pitch: '-1'}", "pitch", "expected a whole number >= 1, got -1"),
    ("{count: 0}", "count", "expected a whole number >= 1, got 0"),
    ("{channels: 0}", "channels", "expected a whole number >= 1, got 0"),
    ("{width: 2.5}", "width", "expected a whole number >= 1, got 2.5"),
    ("{height: '2 - 5'}", "height", "expected a whole number >= 1, got '2 - 5' = -3"),
    ("{width: '1/0'}", "width", "bad expression '1/0': division by zero at column 2"),
    ("{count: '(4 // 0) * arg5'}", "count",
     "bad expression '(4 // 0) * arg5': division by zero at column 4"),
    ("{pitch: 'arg4 % 0'}", "pitch", "bad expression 'arg4 % 0': division by zero at column 6"),
    ("{width: 1.0e+400}", "width", "got inf: not a finite number"),
    ("{width: .nan}", "width", "got nan: not a finite number"),
    ("{count: 1000000000000000}", "count",
     "1000000000000000 is larger than any device buffer (at most 281474976710656)"),
    ("{width: '" + "9" * 400 + "'}", "width", None),           # too large, not a crash
    ("{range: [0, .inf]}", "range",
     "expected [low, high], finite numbers with low < high, got [0, inf]"),
    ("{range: [.nan, 1]}", "range",
     "expected [low, high], finite numbers with low < high, got [nan, 1]"),
    ("{range: [-.inf, 0]}", "range",
     "expected [low, high], finite numbers with low < high, got [-inf, 0]"),
    ("{range: [1, 1]}", "range",
     "expected [low, high], finite numbers with low < high, got [1, 1]"),
    ("{range: [0, 0x" + "f" * 300 + "]}", "range", None),        # beyond a float
    ("{field: -8}", "field",
     "expected the byte offset of a pointer inside the argument (0, 8, 16, ...), got -8"),
    ("{field: 40000}", "field",
     "byte offset 40000 is beyond the largest kernel parameter block (32764 bytes)"),
]


@pytest.mark.parametrize("settings,key,problem", CONSTANT_ERRORS)
def test_constant_bad_values_are_refused_before_running(tmp_path, settings, key, problem):
    err = error(tmp_path, f"- kernel: k\n  overrides:\n    0: {settings}\n")
    assert (err.path, err.line, err.field) == (str(tmp_path / P), 3, f"overrides.0.{key}")
    if problem is not None:
        assert err.problem == problem
    assert "\n" not in str(err) and len(str(err)) < 400


@pytest.mark.parametrize("settings", [
    "{width: arg5, height: 'arg6 - 2000', pitch: 'arg4 * -1'}",   # per launch: fine now
    "{count: '8 / 2'}", "{channels: 4.0}", "{range: [-1.5, 0x10]}", "{field: 32752}",
    "{width: '" + "+".join(["1"] * 2000) + "'}",                    # a long flat sum
])
def test_values_that_can_only_be_checked_per_launch_or_are_fine(tmp_path, settings):
    (rule,) = load(tmp_path, f"- kernel: k\n  overrides:\n    0: {settings}\n")
    assert 0 in rule.overrides


def test_nested_repetition_regex_is_a_rule_error(tmp_path):
    # Without the check, `re:(a+)+$` takes seconds per kernel name at every launch.
    err = error(tmp_path, "rules:\n  - name: slow\n    kernel: 're:(a+)+$'\n")
    assert (err.path, err.line, err.field) == (str(tmp_path / P), 3, "kernel")
    assert "repeats a group that itself repeats" in err.problem


@pytest.mark.parametrize("regex", ["[[a]", "[a--b]", "[a&&b]"])
def test_a_set_python_would_read_otherwise_is_a_rule_error_not_a_python_warning(tmp_path,
                                                                              regex, recwarn):
    err = error(tmp_path, f"rules:\n  - name: odd\n    kernel: 're:{regex}'\n")
    assert (err.path, err.line, err.field) == (str(tmp_path / P), 3, "kernel")
    assert "possible " in err.problem and " set " in err.problem and "backslash" in err.problem
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize("regex", [
    ".*.*.*.*.*.*.*.*.*.*.*.*Q",      # minutes per kernel name without the check
    ".*.*.*", ".+x.+y.+", ".?" * 18, ".{0,100}" * 3, "(?=.*a.*b.*c)",
    "(?>(a+)+$)", "(a)?(?(1)(a+)+$|b)",   # exponential inside an atomic group or a condition
])
def test_regex_with_too_many_ways_to_match_is_a_rule_error(tmp_path, regex):
    err = error(tmp_path, f"rules:\n  - name: slow\n    kernel: 're:{regex}'\n")
    assert (err.path, err.line, err.field) == (str(tmp_path / P), 3, "kernel")
    assert "can take" in err.problem and "\n" not in str(err)


@pytest.mark.parametrize("regex", [
    "FrP0k", "^void device::", "k<\\d+>", "foo.*bar.*baz", "(a|b).*c.*d?", ".*x.*y?",
    "(?=.*a)(?=.*b).*c", "a{5}.*b{3,7}", "(a.*)?b.*",
])
def test_regex_with_few_ways_to_match_is_accepted(tmp_path, regex):
    (rule,) = load(tmp_path, f"rules:\n  - kernel: 're:{regex}'\n")
    assert rule.matcher.is_regex


@pytest.mark.parametrize("size", [(1 << 20) + 1, 50 << 20])
def test_a_rule_file_over_1_mib_is_refused_before_parsing(tmp_path, size):
    """50 MB of rules took PyYAML five minutes and gigabytes before the program ran."""
    rule = "  - kernel: k\n    every: 2\n"
    path = tmp_path / "huge.yaml"
    path.write_text("rules:\n" + rule * (size // len(rule) + 1))
    with pytest.raises(RuleError) as info:
        load_rules([path])
    assert str(info.value) == (f"{path}: larger than 1 MiB; a rule file needs a few kilobytes "
                               "(is this the right file?)")


def test_a_rule_file_of_1_mib_is_read(tmp_path):
    path = tmp_path / "big.yaml"
    head = "rules:\n  - kernel: k\n"
    path.write_text(head + "#" * ((1 << 20) - len(head) - 1) + "\n")
    assert [r.matcher.text for r in load_rules([path])] == ["k"]


def test_an_endless_rule_file_is_refused(tmp_path):
    with pytest.raises(RuleError, match="larger than 1 MiB"):
        load_rules([Path("/dev/zero")])


def test_expression_nested_too_deeply_is_a_rule_error(tmp_path):
    deep = "(" * 300 + "arg1" + ")" * 300
    err = error(tmp_path, f"- kernel: k\n  overrides:\n    0:\n      width: '{deep}'\n")
    assert (err.line, err.field) == (4, "overrides.0.width")
    assert "nested too deeply" in err.problem and len(str(err)) < 400


@pytest.mark.parametrize("text", [
    "rules: " + "[" * 1000 + "]" * 1000 + "\n",
    "rules:\n" + "".join("  " * i + "- \n" for i in range(1000)),
    "rules:\n  - kernel: k\n    overrides: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n",
])
def test_yaml_nested_too_deeply_is_a_rule_error(tmp_path, text):
    err = error(tmp_path, text)
    assert "nested too deeply" in err.problem
    assert err.line is not None and str(err).startswith(f"{tmp_path / P}:{err.line}:")


@pytest.mark.parametrize("text,problem", [
    ("- kernel: k\n  skip: 2001-13-45\n", "cannot read '2001-13-45' as a timestamp"),
    ("- kernel: k\n  skip: !!bool maybe\n", "cannot read 'maybe' as a bool"),
    ("- kernel: k\n  overrides: {0: {width: 0x" + "f" * 5000 + "}}\n",
     "got a number too large to show: number too large"),
])
def test_values_yaml_cannot_construct_are_rule_errors(tmp_path, text, problem):
    err = error(tmp_path, text)
    assert err.line == 2 and problem in err.problem


def test_errors_stay_on_one_line(tmp_path):
    err = error(tmp_path, '- kernel: k\n  "bad\\nkey\\u0007": 1\n')
    assert "\n" not in str(err) and "\x07" not in str(err)
    assert err.field == "bad\\nkey\\x07"


def test_rules_and_offline_tools_share_the_pattern_semantics(tmp_path):
    from cudump.rundir.runs import kernel_pattern

    for pattern in ("device::FrP0k5607tPV*", "void device::*", "FrP0k5607tPV", "FrP0k",
                    "*uchar8*", "re:^device::", "nv12_to_uyvy", "re:YUV_CONVENTION\\)2"):
        (rule,) = load(tmp_path, f"- kernel: '{pattern}'\n")
        offline = kernel_pattern(pattern)
        assert offline is not None
        for name, mangled in ((ZED, ZED_MANGLED), (NV12, NV12_MANGLED)):
            assert rule.matches(name, mangled) == offline.matches(name, mangled), pattern


def test_control_characters_are_a_rule_error_with_a_line(tmp_path):
    err = error(tmp_path, "rules:\n  - kernel: k\x07\n")
    assert err.line == 2 and err.problem.startswith("YAML syntax error: character #x0007")
