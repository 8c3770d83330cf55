"""One door for a scan's result: read from the package's source, not from a run.

A launch's digests and NaN/Inf scans reach their records, the report and the snapshots that
follow a producer through one route (policy/snapshot/route.py), whichever copy strategy
made them and whichever way the shim gave them back; every NaN/Inf line is said in one
module (nanreport.py); and the snapshot policy's parts are given what they need when they
are made, never patched afterwards. A second door (a strategy weighing scans itself, a
report said elsewhere, a callback wired in after construction) fails here."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pair_kernel import kept_pair_plan, scanning
from records import manifest

import cudump
from cudump.policy.snapshot.planned import HOLD_NOT_SERVED, NOT_HELD
from cudump.policy.snapshot.results import SLOT, _Ring, _Taken
from cudump.wire import protocol as p

PACKAGE = Path(cudump.__file__).resolve().parent
SNAPSHOT = PACKAGE / "policy" / "snapshot"


@functools.cache
def _modules() -> tuple[tuple[str, ast.Module], ...]:
    return tuple((path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path)))
                 for path in sorted(PACKAGE.rglob("*.py")))


def _calls(tree: ast.Module) -> Iterator[tuple[str, ast.Call]]:
    """Every call, with the function (Class.method) it is made in."""

    def walk(node: ast.AST, where: list[str]) -> Iterator[tuple[str, ast.Call]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                yield from walk(child, [*where, child.name])
                continue
            if isinstance(child, ast.Call):
                yield ".".join(where), child
            yield from walk(child, where)

    yield from walk(tree, [])


def _called_name(call: ast.Call) -> tuple[str | None, str | None]:
    """(what the function is reached through, its name): `self.nan.producers(...)` is
    ("nan", "producers"), `add_scan(...)` (None, "add_scan")."""
    func = call.func
    if isinstance(func, ast.Name):
        return None, func.id
    if isinstance(func, ast.Attribute):
        owner = func.value
        via = owner.attr if isinstance(owner, ast.Attribute) else \
            owner.id if isinstance(owner, ast.Name) else None
        return via, func.attr
    return None, None


def callers(via: str | None, name: str) -> set[str]:
    """module:function of every call of `name` (reached through `via`, if given)."""
    found = set()
    for module, tree in _modules():
        for where, call in _calls(tree):
            how, called = _called_name(call)
            if called == name and (via is None or how == via):
                found.add(f"{module}:{where}")
    return found


ROUTE = "policy/snapshot/route.py:ResultRoute.deliver"


def test_scans_are_weighed_only_on_the_route():
    """Only the route turns a scan's result into findings and asks the NaN/Inf watch what
    they mean; only it makes a digest's record."""
    assert callers(None, "add_scan") == {ROUTE}
    assert callers("nan", "producers") == {ROUTE}
    assert callers(None, "producers") == {ROUTE}
    assert callers(None, "digest_fields") == {
        "policy/snapshot/route.py:ResultRoute._digest",
        "policy/snapshot/records.py:digest_record"}   # a repeated plan's template line


def test_every_strategy_reports_its_own_results_through_the_route():
    """Plain and write-behind copies (collect.py) and repeated plans (repeat.py: the slot
    the shim reported, MSG_REPEAT, and the one the ring's reader found late alike) each
    hand their own outcomes to the one route."""
    assert callers(None, "deliver") == {
        "policy/snapshot/collect.py:Collector.collect",
        "policy/snapshot/collect.py:Collector.collect_behind",
        "policy/snapshot/repeat.py:Repeater._report"}
    # Both of the repeated plans' ways in take the same function.
    assert {c for c in callers("self", "_report") if c.startswith("policy/snapshot/")} == {
        "policy/snapshot/repeat.py:Repeater.repeat_report",
        "policy/snapshot/repeat.py:Repeater._unusual"}
    # No strategy goes through another's: the repeated one does not collect.
    assert not {c for c in callers(None, "collect") if c.startswith("policy/snapshot/repeat")}


def _strings(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def test_every_nan_line_is_said_by_the_reporter():
    """`cudump: NaN/Inf:` is written in one module, whose two reports (a launch's buffer,
    a memset's pattern) are made from the NaN/Inf watch and the host-write watch only."""
    saying = {module for module, tree in _modules()
              if any("cudump: NaN/Inf" in s for s in _strings(tree))}
    assert saying == {"policy/snapshot/nanreport.py"}
    assert callers("report", "launch") == {"policy/snapshot/nan.py:NanWatch._learn"}
    assert callers("report", "memset") == {"policy/snapshot/hostwrites.py:HostWriteWatch.took"}


def test_nothing_is_patched_in_after_construction():
    """The coordinator makes each part after what it needs and hands it over: its
    constructor sets only its own attributes, and no part of the snapshot policy keeps a
    do-nothing callable (`lambda pid: None`) waiting to be replaced."""
    coordinator = ast.parse((SNAPSHOT / "coordinator.py").read_text())
    (init,) = [f for f in ast.walk(coordinator)
               if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
    for node in ast.walk(init):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute):
                    assert isinstance(part.value, ast.Name) and part.value.id == "self", \
                        f"coordinator.py:{node.lineno} sets {ast.unparse(target)}"
    for path in sorted(SNAPSHOT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            value = (node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None)
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
                value = next((k.value for k in value.keywords if k.arg == "default"), None)
            assert not isinstance(value, ast.Lambda), \
                f"{path.name}:{node.lineno} keeps a placeholder to be patched in later"


def _producer_slot(plan_id: int, gate: int) -> np.ndarray:
    """Launch 5 made with plan `plan_id`: the buffer at byte 0 finite before it, 2 elements
    non-finite after it (the first at index 3)."""
    slots = np.zeros(1, dtype=SLOT)
    slots["plan"], slots["ncopies"], slots["gate"] = plan_id, 4, gate
    for name, value in (("seq", 5), ("occurrence", 5), ("grid", (1, 1, 1)),
                        ("block", (32, 1, 1)), ("device", 0)):
        slots["event"][name] = value
    slots["results"][0, 1]["words"] = (2, ~3 & (1 << 64) - 1)
    return slots


@pytest.mark.parametrize(("gate", "reason"), [(p.Gate.RELEASED, HOLD_NOT_SERVED),
                                              (p.Gate.NONE, NOT_HELD)])
def test_both_ways_in_report_alike_and_the_late_one_records_no_snapshots(tmp_path, gate,
                                                                          reason):
    """The same producer, reported by the shim (MSG_REPEAT) or found late by the ring's
    reader, has the same report; the first gets its snapshots asked for, the second has
    them recorded as not taken, with why."""
    made = {}
    for way in ("watcher", "ring"):
        run_dir = tmp_path / way
        run_dir.mkdir()
        snapshots = scanning(run_dir)
        try:
            proc, _, repeat = kept_pair_plan(snapshots)
            slots = _producer_slot(repeat.plan_id, gate)
            if way == "watcher":
                follow = snapshots.repeat_report(proc, slots[0])
                assert follow is not None and follow.copies
                assert snapshots.state.proc(1).pending[5] is follow
                asked = len(follow.copies)
            else:
                templates = snapshots.state.proc(1).templates
                ring = _Ring(proc, None, slots, templates)   # type: ignore[arg-type]
                taken = _Taken(slots["event"], slots["plan"], slots["flags"],
                               slots["launch_rc"], slots["results"][:, :4])
                snapshots.repeater.results._handle(ring, taken, np.arange(1))
                assert 5 not in snapshots.state.proc(1).pending
        finally:
            snapshots.close()
        made[way] = manifest(run_dir)
    reports = {way: [r for r in records if "nonfinite" in r] for way, records in made.items()}
    assert len(reports["watcher"]) == 1 and reports["watcher"] == reports["ring"]
    assert (reports["ring"][0]["launch"], reports["ring"][0]["nonfinite"],
            reports["ring"][0]["origin"]) == (5, 2, "produced")
    lost = [r for r in made["ring"] if r.get("nan_producer") and "nonfinite" not in r]
    assert len(lost) == asked
    assert all(r["status"] == "error" and r["reason"] == reason and r.get("file") is None
               for r in lost)
    assert not [r for r in made["watcher"] if r.get("status") == "error"]
