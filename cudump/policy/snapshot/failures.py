"""Copies not taken, and what rules are told once: each failure has its manifest record
and a warning (once per kernel, argument and reason); a rule that finds nothing to copy,
or passes a pointer over, says so once per kernel."""

from __future__ import annotations

import threading

from cudump.console import warn
from cudump.kernels.args import ArgValue
from cudump.launches.process import FuncInfo, LaunchEvent, ProcessState
from cudump.policy.rules import Rule
from cudump.policy.snapshot.planned import LaunchContext, base_name
from cudump.policy.snapshot.records import make_record
from cudump.policy.snapshot.state import SnapshotState
from cudump.rundir.manifest import SnapshotRecord


class Failures:
    """Records snapshots that are not taken, counting them per thread."""

    def __init__(self, state: SnapshotState) -> None:
        self.state = state
        self.said: set[tuple[str, str, str]] = set()
        # Failures recorded by each thread: whether planning one launch recorded any is
        # told apart from failures other threads record meanwhile (the result drain's).
        self._thread_failures = threading.local()

    def thread_failures(self) -> int:
        """Failures recorded so far by the calling thread."""
        return int(getattr(self._thread_failures, "count", 0))

    def fail(self, record: SnapshotRecord, reason: str) -> None:
        record.status = "error"
        record.reason = reason
        record.file = None
        self._thread_failures.count = self.thread_failures() + 1
        what = f"arg {record.arg}" if not record.extra.get("arg_unknown") else "its arguments"
        state = self.state
        with state.lock:
            state.tally.failed += 1
            # Said once per kernel, argument and reason (a rule on every launch of a kernel
            # would say it thousands of times); the manifest has every one.
            said = (record.kernel, what, reason)
            first = said not in self.said
            if first and len(self.said) < 100_000:
                self.said.add(said)
        if first:
            warn(f"no snapshot of {record.kernel} {what} ({record.phase}, launch "
                 f"{record.launch}): {reason}")
        with state.lock:
            state.append_locked(record)

    def error(self, ctx: LaunchContext, arg: ArgValue | None, phase: str, rule: Rule,
              reason: str) -> None:
        """A copy of `arg` (None: of arguments not known) that could not be planned."""
        index = arg.index if arg is not None else None
        record = make_record(ctx, index if index is not None else 0, phase, None,
                             arg.type.text if arg is not None and arg.type else None)
        if index is None:
            record.extra["arg_unknown"] = True
        if arg is not None and isinstance(arg.value, int):
            record.address = f"0x{arg.value:x}"
        record.extra["rule"] = rule.origin
        self.fail(record, reason)


class Notices:
    """What is said once of a rule at a kernel (or of a graph), not at every launch."""

    def __init__(self, state: SnapshotState) -> None:
        self.state = state
        self.unsafe_warned: set[tuple[int, int]] = set()
        self.said_no_buffer: set[tuple[int, str]] = set()

    def _first(self, key: tuple[int, str]) -> bool:
        with self.state.lock:
            if key in self.said_no_buffer:
                return False
            self.said_no_buffer.add(key)
            return True

    def unsafe_graph(self, proc: ProcessState, func: FuncInfo, event: LaunchEvent) -> None:
        if (proc.pid, event.graph) not in self.unsafe_warned:
            self.unsafe_warned.add((proc.pid, event.graph))
            warn(f"graph {event.graph} of process {proc.pid} has memory-allocation or "
                 f"conditional nodes: cudump runs it unchanged, and takes no snapshots of "
                 f"its kernels (here {func.demangled})")

    def untracked(self, ctx: LaunchContext, rule: Rule, arg: ArgValue) -> None:
        """A typed pointer `args: pointers` passes over: said once per kernel and argument."""
        if not self._first((id(rule), f"{ctx.func.mangled}/{arg.index}")):
            return
        type_text = arg.type.text if arg.type is not None else "?"
        warn(f"rule {rule.name} ({rule.path}:{rule.line}): {ctx.func.demangled} arg "
             f"{arg.index} ({type_text}) holds {int(arg.value or 0):#x}, which is in no tracked "
             "allocation (host memory, or memory cudump does not see); args: pointers "
             f"passes over it (name it with args: [{arg.index}] to be told at every launch)")

    def no_such_args(self, ctx: LaunchContext, rule: Rule, absent: list[int],
                     nargs: int) -> None:
        """A rule naming arguments past the kernel's last says so once per kernel."""
        if not self._first((id(rule), f"{ctx.func.mangled}/args")):
            return
        which = ", ".join(f"arg {i}" for i in absent)
        have = f" (arg 0 to arg {nargs - 1})" if nargs > 1 else ""
        warn(f"rule {rule.name} ({rule.path}:{rule.line}): {base_name(ctx.func)} has "
             f"{nargs} argument{'' if nargs == 1 else 's'}{have}; args: {list(rule.args)} "
             f"names {which}, which it does not have")

    def no_buffer(self, ctx: LaunchContext, rule: Rule) -> None:
        """A rule that matches launches but finds nothing to copy says so once per kernel."""
        if rule.option is not None:
            return  # --digest and the like take what there is, and say nothing of the rest
        if not self._first((id(rule), ctx.func.mangled)):
            return
        warn(f"rule {rule.name} ({rule.path}:{rule.line}) matches {ctx.func.demangled} but "
             "finds no buffer in its arguments (no pointer into a tracked allocation); name "
             "one with args: [N] and an override such as {N: {field: 0, dtype: float32, "
             "count: argK}}")
