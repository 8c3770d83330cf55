"""`scope:GLOB` patterns and a rule's `scope:` field: launches chosen by where they were made
(an open scope, or the source line), decided at each launch: a scope pattern wants every
function, is never counted or repeated by the shim, and takes only the launches it matches."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest
from pair_kernel import PAIR_FUNC, pair_launch

from cudump.errors import RuleError
from cudump.kernels.pattern import KernelPattern, PatternError
from cudump.launches.process import ProcessState
from cudump.launches.scopes import ScopeKind, ScopeNode, Where
from cudump.policy.breakpoints import Breakpoints, parse_break_spec
from cudump.policy.rules import RuleCounter, load_rules, option_rule
from cudump.policy.snapshot.coordinator import Snapshots
from cudump.rundir.manifest import ManifestWriter

CONV = Where(scopes=("ResNet", "layer3.0.conv1"), layer="layer3.0.conv1", pass_="forward",
             step=2, source="train.py:57")
FC = Where(scopes=("ResNet", "fc"), layer="fc", pass_="forward", source="train.py:60")


def test_a_scope_pattern_wants_every_name_and_takes_launches_by_where():
    pattern = KernelPattern("scope:layer3.*")
    assert pattern.scope == "layer3.*"
    assert pattern.matches("anything(int)") and pattern.matches("k", "_Z1kv")
    assert pattern.matches_where(CONV) and not pattern.matches_where(FC)
    assert not pattern.matches_where(Where()) and not pattern.matches_where(None)
    assert KernelPattern("scope:train.py:6*").matches_where(FC)       # the source line
    assert not KernelPattern("scope:Layer3*").matches_where(CONV)     # case-sensitive
    kernel = KernelPattern("vec*")
    assert kernel.scope is None and kernel.matches_where(None)       # a kernel pattern
    assert not kernel.matches_launch("other(int)", "", CONV)
    with pytest.raises(PatternError, match="empty scope pattern"):
        KernelPattern("scope:")


def write_rules(tmp_path, text: str):
    path = tmp_path / "r.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_a_rules_scope_field(tmp_path):
    rules = load_rules([write_rules(tmp_path, """
        rules:
          - scope: "layer3.*"
            count: 1
          - kernel: "vec*"
            scope: "fc"
          - kernel: "scope:fc"
        """)])
    only, both, written = rules
    assert (only.name, only.scope, only.matcher.text) == ("scope:layer3.*", "layer3.*", "*")
    assert both.name == "vec* scope:fc" and both.matches("vecAdd(int)", "")
    assert not both.matches("k(int)", "")
    assert all(r.by_launch and not r.takes_every_launch for r in rules)
    assert only.matches_where(CONV) and not only.matches_where(FC)
    assert both.matches_where(FC) and written.matches_where(FC) and not written.matches_where(CONV)


@pytest.mark.parametrize("text, message", [
    ('- scope: 3\n', r"r.yaml:1: field 'scope': expected a glob over scope names"),
    ('- scope: ""\n', r"r.yaml:1: field 'scope': expected a glob"),
    ('- scope: "scope:fc"\n', r"r.yaml:1: field 'scope': write the glob alone \('fc'\)"),
    ('- kernel: "scope:"\n', r"r.yaml:1: field 'kernel': empty scope pattern"),
])
def test_a_bad_scope_is_named_with_its_file_line_and_field(tmp_path, text, message):
    with pytest.raises(RuleError, match=message):
        load_rules([write_rules(tmp_path, text)])


def test_break_rules_count_only_the_launches_in_their_scope(tmp_path):
    (rule,) = load_rules([write_rules(tmp_path, """
        - scope: "layer3.*"
          action: break
          skip: 1
        """)])
    counter = RuleCounter([rule])
    assert counter.wants("k(int)", "")
    # the launch in fc is not counted: the second launch in layer3 is the one taken
    assert counter.selected(1, "k(int)", "", CONV) is None
    assert counter.selected(1, "k(int)", "", FC) is None
    assert counter.selected(1, "k(int)", "", CONV) is rule


def test_a_scope_breakpoint_stops_only_inside_its_scope():
    points = Breakpoints()
    bp = points.add("scope:layer3.* if arg0 > 1")
    assert bp.pattern.scope == "layer3.*"
    assert points.wants("k(int)", "_Z1ki")          # any function: decided at the launch
    assert points.hit("k(int)", "_Z1ki", {"arg0": 2}, FC) == (None, [])
    assert points.hit("k(int)", "_Z1ki", {"arg0": 1}, CONV) == (None, [])
    assert points.hit("k(int)", "_Z1ki", {"arg0": 2}, CONV)[0] is bp
    assert points.hit("k(int)", "_Z1ki", {"arg0": 2})[0] is None     # nothing known
    pattern, _ = parse_break_spec("scope:fc")
    assert pattern.matches_where(FC)


def scoped_process() -> ProcessState:
    proc = ProcessState(1, 0, "prog")
    for node in (ScopeNode(1, 0, ScopeKind.FORWARD, "ResNet"),
                 ScopeNode(2, 1, ScopeKind.FORWARD, "layer3.0.conv1"),
                 ScopeNode(3, 1, ScopeKind.FORWARD, "fc")):
        proc.scopes.add(node)
    return proc


@pytest.mark.parametrize("option", ["--capture-launch", "--digest"])
def test_a_scope_rule_plans_only_the_launches_in_its_scope(tmp_path, option):
    """A snapshot rule with a scope pattern (--capture-launch 'scope:...', or -k with a
    digest): the function is wanted, the shim counts nothing and may not repeat a plan, and
    only the launch made in layer3 is planned."""
    from cudump.policy.rules import DIGEST_FORMATS
    formats = DIGEST_FORMATS if option == "--digest" else frozenset({"npy"})
    rule = option_rule(option, formats, "scope:layer3.*", replay=option != "--digest")
    snapshots = Snapshots([rule], tmp_path, None, ManifestWriter(tmp_path))
    proc = scoped_process()
    try:
        assert snapshots.wants(proc, PAIR_FUNC)
        assert snapshots.selectors(proc, PAIR_FUNC) == ([], False)   # ask about every launch
        outside = replace(pair_launch(1, 0x10000, 0x10800), scope=3)
        assert snapshots.plan(proc, PAIR_FUNC, outside, 1 << 20) is None
        inside = replace(pair_launch(2, 0x10000, 0x10800), scope=2)
        planned = snapshots.plan(proc, PAIR_FUNC, inside, 1 << 20)
        assert planned is not None and planned.copies
        assert snapshots.repeat_id(proc, PAIR_FUNC, inside, planned,
                                   snapshots.thread_failures()) is None
        assert all(c.record.extra["layer"] == "layer3.0.conv1" for c in planned.copies)
    finally:
        snapshots.close()
