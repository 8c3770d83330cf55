"""The confirmation bisect suggests once it has shown the divergent launch: B run again with
A's inputs at that launch (`cudump --inject a-snap/:LAUNCH`). Its outputs become A's if the
difference came in through the launch's inputs; they still differ if the launch itself (its
code, its scalar parameters) makes it.

Suggested only when it is true: the work directory is kept (a-snap/ is still there), the
rules took each buffer whole as the kernel sees it (no `count`, `width`, `height` or `pitch`
override, which --inject could not match), and the command is short enough to read.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from cudump.analysis.bisect.sides import Side
from cudump.policy.rules import Rule
from cudump.rundir.manifest import SnapshotRecord
from cudump.rundir.runs import Run

MAX_COMMAND = 200            # characters: longer is not worth a line of the report


def whole_buffers(rules: list[Rule]) -> bool:
    """Whether these rules take every buffer as a rule without overrides would (a dtype, its
    channels or a field inside a struct change how it is read, not which bytes)."""
    return not any(o.count is not None or o.is_2d for r in rules for o in r.overrides.values())


def confirm_command(b: Side, a_snap: Run, record: SnapshotRecord) -> str | None:
    """`NAME=VALUE cudump --inject A_SNAP[:PID_OR_RANK]:LAUNCH -- PROGRAM_B ARGS` for the launch
    of A's snapshot run that `record` is of, or None when that run has no input of it or the
    command would be long."""
    launch = record.launch
    pids = {s.record.pid for s in a_snap.snapshots
            if s.record.launch == launch and s.record.phase == "before" and s.ok
            and s.record.file is not None}
    if record.pid not in pids:
        return None
    who = "" if len(pids) == 1 else \
        f"{record.rank if record.rank is not None else record.pid}:"
    spec = f"{Path(a_snap.path)}:{who}{launch}"
    env = "".join(f"{name}={shlex.quote(value)} " for name, value in b.env)
    command = f"{env}cudump --inject {shlex.quote(spec)} -- {shlex.join(b.argv)}"
    return command if len(command) <= MAX_COMMAND else None
