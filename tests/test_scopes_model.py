"""The launch model's scopes: wire numbers back to names, the report's wording, the record
fields and `scope:` matching."""

from cudump.launches.scopes import NOWHERE, ScopeKind, ScopeNode, ScopeTable, Where


def _table() -> ScopeTable:
    table = ScopeTable()
    for node in (ScopeNode(1, 0, ScopeKind.RANGE, "train"),
                 ScopeNode(2, 1, ScopeKind.FORWARD, "ResNet"),
                 ScopeNode(3, 2, ScopeKind.FORWARD, "layer3"),
                 ScopeNode(4, 3, ScopeKind.FORWARD, "layer3.0.conv1"),
                 ScopeNode(5, 4, ScopeKind.RANGE, "cudnn"),
                 ScopeNode(6, 2, ScopeKind.BACKWARD, "fc"),
                 ScopeNode(9, 0, ScopeKind.SOURCE, "train.py:57")):
        table.add(node)
    return table


def test_the_innermost_module_is_the_layer_even_under_a_range() -> None:
    where = _table().where(5, step=3, source=9)
    assert where.scopes == ("train", "ResNet", "layer3", "layer3.0.conv1", "cudnn")
    assert (where.layer, where.pass_, where.step, where.source) == \
        ("layer3.0.conv1", "forward", 2, "train.py:57")
    assert where.text(rank=1) == "in layer3.0.conv1 (forward, step 2) at train.py:57, rank 1"


def test_backward_ranges_only_and_nothing() -> None:
    table = _table()
    assert table.where(6).text() == "in fc (backward)"
    assert table.where(1).text() == "in train"
    assert table.where(0, step=1).text() == "in step 0"
    assert not table.where(0) and table.where(0) == NOWHERE
    assert NOWHERE.text(rank=2) == "rank 2" and NOWHERE.fields() == {}


def test_unknown_and_cyclic_parents_end_the_chain() -> None:
    table = ScopeTable()
    table.add(ScopeNode(1, 2, ScopeKind.RANGE, "a"))
    table.add(ScopeNode(2, 1, ScopeKind.RANGE, "b"))
    table.add(ScopeNode(3, 77, ScopeKind.RANGE, "c"))
    assert table.where(1).scopes == ("b", "a")
    assert table.where(3).scopes == ("c",)
    assert table.where(42).scopes == ()
    assert table.where(0, source=1).source is None     # not a SOURCE node


def test_record_fields_round_trip_and_reject_wrong_types() -> None:
    where = _table().where(4, step=1, source=9)
    assert Where.from_fields(where.fields()) == where
    assert Where.from_fields({"scope": "x", "step": True, "layer": 3}) == NOWHERE


def test_scope_patterns_match_any_open_scope_or_the_source() -> None:
    where = _table().where(5, source=9)
    assert where.matches("layer3.*") and where.matches("train") and where.matches("*.py:57")
    assert not where.matches("layer4*") and not where.matches("Train")
