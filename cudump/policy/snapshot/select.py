"""Which functions the snapshot rules want, and which of their launches each rule takes
(skip, every, count): counted by the shim where the control page has room, else here."""

from __future__ import annotations

from cudump.kernels.signature import parse_signature
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.launches.scopes import Where
from cudump.policy.rules import Rule
from cudump.policy.snapshot.state import FuncRules, ProcessSnapshots, SnapshotState
from cudump.wire import protocol as p


class Selection:
    """The snapshot rules of one run, and the shim's counters of those that take only some
    of the launches they match."""

    def __init__(self, state: SnapshotState, rules: list[Rule]) -> None:
        self.state = state
        self.rules = [r for r in rules if r.action == "snapshot"]
        # id(rule) -> its slot in the control page's rule_counts, for rules that take only
        # some of the launches they match: the shim counts those launches itself
        self.counters: dict[int, int] = {}

    def wants(self, proc: ProcessState, func: FuncInfo) -> bool:
        matched = [r for r in self.rules if r.matches(func.demangled, func.mangled)]
        if not matched:
            return False
        self.state.proc(proc.pid).rules[func.id] = FuncRules(parse_signature(func.demangled),
                                                             matched)
        return True

    def selectors(self, proc: ProcessState, func: FuncInfo) -> tuple[list[p.Selector], bool]:
        """The rules of this function (after `wants`) that take only some of the launches
        they match (skip, every, count), as the shim counts them, and whether those are all
        its rules: then the shim asks only about the launches one of them takes. A rule past
        the control page's MAX_COUNTERS, or a kernel with more than MAX_SELECTORS of them,
        is counted here, launch by launch, as before."""
        fr = self.state.proc(proc.pid).rules.get(func.id)
        if fr is None:
            return [], False
        selectors = []
        for rule in fr.rules:
            counter = self._counter(rule)
            if counter is not None:
                selectors.append(p.Selector(counter, rule.every, rule.skip,
                                            p.NO_LIMIT if rule.count is None else rule.count))
        every = len(selectors) == len(fr.rules) and len(selectors) <= p.MAX_SELECTORS
        return selectors[:p.MAX_SELECTORS], every

    def _counter(self, rule: Rule) -> int | None:
        if rule.takes_every_launch or rule.by_launch:
            return None   # nothing to count, or only here: the shim cannot see a scope
        with self.state.lock:
            counter = self.counters.get(id(rule))
            if counter is None and len(self.counters) < p.MAX_COUNTERS:
                counter = self.counters[id(rule)] = len(self.counters)
            return counter

    def captures_launches(self, proc: ProcessState, func: FuncInfo) -> bool:
        """Whether a rule captures this function's launches for replay (after `wants`)."""
        fr = self.state.proc(proc.pid).rules.get(func.id)
        return fr is not None and any(r.replay for r in fr.rules)

    def taken(self, ps: ProcessSnapshots, fr: FuncRules, event: LaunchEvent,
              where: Where | None = None) -> list[Rule]:
        """The function's rules that take this launch (made `where`), counting it for each
        that matches it."""
        taken: list[Rule] = []
        for rule in fr.rules:
            if rule.by_launch and not rule.matches_where(where):
                continue
            counter = self.counters.get(id(rule))
            if counter is not None and counter in event.counted:
                n = event.counted[counter]   # counted by the shim, across all its kernels
            else:
                n = ps.matches.get(id(rule), 0) + 1
                ps.matches[id(rule)] = n
            if rule.selects(n):
                taken.append(rule)
        return taken
