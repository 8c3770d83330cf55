"""What each result of a repeated plan is, as arrays, so that the result drain reads a batch
of ring slots with numpy instead of launch by launch (results.py).

A ring slot holds one launch's results, one per copy of its plan, in the plan's order. Which
of them are digests, which of those carry a sum of |x|, which are scans after the launch,
and where each digest comes in the plan's template line, depends on the plan only: the
table gives each plan it meets a row and keeps those facts in that row, one column per
copy. Row 0 is no plan's (every fact false), for slots whose plan the controller no longer
keeps.
"""

from __future__ import annotations

import numpy as np

from cudump.policy.snapshot.templates import RepeatTemplate

# Rows of plans let go that may wait for a sweep, beyond twice the plans kept.
SLACK = 1024


class PlanColumns:
    def __init__(self) -> None:
        self._row: dict[int, int] = {}          # plan -> row
        self._plan: list[int] = [0]              # row -> plan
        self._template: list[RepeatTemplate | None] = [None]   # row -> its template
        self._free: list[int] = []
        self.width = 0                           # columns: the most copies of a plan met
        self.ncopies = np.zeros(1, np.int64)     # row -> its plan's copies
        self.after = np.zeros((1, 0), bool)      # a scan after the launch
        self.digest = np.zeros((1, 0), bool)     # a digest
        self.has_sum = np.zeros((1, 0), bool)    # a digest with a sum of |x|
        self.rank = np.zeros((1, 0), np.uint16)  # a digest's place in the template line
        self.scans_after = np.zeros(1, bool)     # row -> any scan after the launch

    def rows(self, plans: np.ndarray, templates: dict[int, RepeatTemplate]) -> np.ndarray:
        """Each plan's row (0 where `templates` no longer has the plan)."""
        if not self._free and len(self._row) > 2 * len(templates) + SLACK:
            self._sweep(templates)
        unique, inverse = np.unique(plans, return_inverse=True)
        found = np.array([self._row_of(plan, templates.get(plan)) for plan in unique.tolist()],
                         dtype=np.intp)
        return found[inverse.reshape(-1)]

    @property
    def held(self) -> int:
        """Rows that hold a plan's template."""
        return len(self._row)

    def template(self, row: int) -> RepeatTemplate:
        template = self._template[row]
        assert template is not None, "row 0 has no template"
        return template

    def plan(self, row: int) -> int:
        return self._plan[row]

    def _sweep(self, templates: dict[int, RepeatTemplate]) -> None:
        """Frees the rows of plans the controller let go: most never come back to the ring
        (a kernel over ever new buffers makes a plan a launch), and a row holds its template
        with the records of its first launch."""
        for plan, row in list(self._row.items()):
            if templates.get(plan) is not self._template[row]:
                self._release(plan, row)

    def _release(self, plan: int, row: int) -> None:
        del self._row[plan]
        self._template[row] = None
        self._free.append(row)

    def _row_of(self, plan: int, template: RepeatTemplate | None) -> int:
        row = self._row.get(plan)
        if row is not None and self._template[row] is template:
            return row
        if row is not None:              # the controller let the plan go: so does the table
            self._release(plan, row)
        if template is None:
            return 0
        row = self._free.pop() if self._free else self._grow()
        self._fill(row, plan, template)
        return row

    def _grow(self) -> int:
        row = len(self._plan)
        self._plan.append(0)
        self._template.append(None)
        if row >= len(self.ncopies):
            self._resize(2 * len(self.ncopies), self.width)
        return row

    def _resize(self, rows: int, width: int) -> None:
        def grown(old: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
            new = np.zeros(shape, old.dtype)
            new[tuple(slice(0, n) for n in old.shape)] = old
            return new

        self.ncopies = grown(self.ncopies, (rows,))
        self.scans_after = grown(self.scans_after, (rows,))
        for name in ("after", "digest", "has_sum", "rank"):
            setattr(self, name, grown(getattr(self, name), (rows, width)))
        self.width = width

    def _fill(self, row: int, plan: int, template: RepeatTemplate) -> None:
        copies = len(template.copies)
        if copies > self.width:
            self._resize(len(self.ncopies), copies)
        self._row[plan] = row
        self._plan[row] = plan
        self._template[row] = template
        self.ncopies[row] = copies
        for name in ("after", "digest", "has_sum", "rank"):
            getattr(self, name)[row] = 0
        self.after[row, template.after_scans] = True
        self.digest[row, template.digests] = True
        self.has_sum[row, template.sums] = True
        self.rank[row, template.digests] = np.arange(len(template.digests))
        self.scans_after[row] = bool(template.after_scans)
