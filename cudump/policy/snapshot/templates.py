"""A plan the shim repeats on its own, as the controller keeps it: its copies (what each
computes, and when) and how a digest's record is made, for the plan's template line in the
manifest (results.py writes it, plan_columns.py reads a batch of its results)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cudump.launches.process import FuncInfo
from cudump.policy.snapshot.planned import PlannedLaunch
from cudump.rundir.manifest import SnapshotRecord, template_line
from cudump.wire import protocol as p


@dataclass
class RepeatCopy:
    """One copy of a repeated plan: what it computes, when, and for a digest how the record
    of the first launch (its digest fields in) that the plan's template line is made from
    is made: once, when the line is written."""

    tool: p.ToolMode
    phase: str
    make_record: Callable[[], SnapshotRecord] | None = None
    sum_of: p.ToolMode | None = None    # a digest's sum of |x|: the element format
    made: SnapshotRecord | None = field(default=None, repr=False)

    @property
    def record(self) -> SnapshotRecord | None:
        if self.made is None and self.make_record is not None:
            self.made = self.make_record()
        return self.made


@dataclass
class RepeatTemplate:
    copies: list[RepeatCopy]
    func: FuncInfo
    first: PlannedLaunch | None   # the first launch's plan, None if no copies
    written: bool = False   # its template line is in the manifest

    def __post_init__(self) -> None:
        self.digests: list[int] = []
        self.sums: list[int] = []         # the digests with a sum of |x|
        self.after_scans: list[int] = []  # a launch is plain when these found nothing
        for k, c in enumerate(self.copies):
            if c.tool == p.ToolMode.DIGEST:
                self.digests.append(k)
                if c.sum_of is not None:
                    self.sums.append(k)
            elif c.phase == "after":
                self.after_scans.append(k)

    def template_line(self, key: str) -> str:
        records = [self.copies[k].record for k in self.digests]
        assert all(r is not None for r in records)
        return template_line(key, records)  # type: ignore[arg-type]
