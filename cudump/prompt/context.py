"""What the prompt's commands share: the debugger, the current stop, where output goes."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from cudump.kernels.args import ArgValue, arg_values
from cudump.kernels.geometry import Allocation, CopyPlan
from cudump.launches.stop import Frame, StoppedLaunch, TargetError
from cudump.prompt.debugger import Debugger

Out = Callable[[str], None]
Number = int | float


class CommandError(Exception):
    """A command that cannot do what was asked; printed as one `error: ...` line."""


class Outcome(enum.Enum):
    """What a command did to the held launch."""

    RESUMED = "resumed"   # the launch was let go: wait for the next stop
    ENDED = "ended"       # detach, kill, quit: the prompt stops reading


@dataclass
class KeptArg:
    """One argument's buffer read before a step and again after it."""

    plan: CopyPlan
    channels: int          # values per element (uchar4: 4)
    before: bytes
    after: bytes | None = None


@dataclass
class Kept:
    """Buffers kept across `step` for one launch (identified by pid and launch number)."""

    pid: int
    launch: int
    args: dict[int, KeptArg] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)   # arg index -> why not kept


@dataclass
class Display:
    """An expression `display` shows at every stop."""

    number: int
    expr: str
    fmt: str | None = None      # a print/FMT letter


@dataclass
class Context:
    debugger: Debugger
    out: Out
    confirm: Callable[[str], bool] = lambda question: True
    stop: StoppedLaunch | None = None
    kept: Kept | None = None
    # gdb's `x` remembers its last format, unit and the address after the last one shown.
    x_format: str = "x"
    x_unit: str = "w"
    x_next: int | None = None
    # What Enter on an empty line runs (at a terminal), as gdb: the last command, if it is
    # one that repeats; x sets its own form (no address: it goes on after the last shown).
    repeat: str | None = None
    # The held launch's host stack, unwound once per stop, and the frame `frame`, `up` and
    # `down` selected (0: innermost).
    frames: list[Frame] | None = None
    frame: int = 0
    # `display`: shown at every stop, numbered from 1 as gdb numbers them.
    displays: list[Display] = field(default_factory=list)
    display_number: int = 0

    def say(self, line: str = "") -> None:
        self.out(line)

    def check_gone(self) -> bool:
        """Whether the held launch's process has gone (killed from outside, or ended by
        another of its threads while the launch was held): then it says so, as gdb's
        "The program is not being run.", and drops the stop; nothing is read from the
        stop's cached state any more."""
        stop = self.stop
        if stop is None:
            return False
        why = self.debugger.ended(stop)
        if why is None:
            return False
        self.debugger.resume(stop, "continue")   # no launch of the run stays held for it
        self.set_stop(None)
        if self.debugger.finished:
            self.say(f"The program is not being run: {why}.")
        else:
            self.say(f"Launch {stop.info.launch} is no longer held: {why}; the program's "
                     "other processes run on to the next stop.")
        return True

    def set_stop(self, stop: StoppedLaunch | None) -> None:
        """A new stop from wait_for_stop: what was kept for an earlier launch is dropped."""
        self.stop = stop
        self.kept = None
        self.x_next = None
        self.frames = None
        self.frame = 0

    def backtrace(self) -> list[Frame]:
        """The held launch's host stack (unwound at the first use at this stop)."""
        if self.frames is None:
            self.frames = self.stopped.backtrace()
        return self.frames

    @property
    def stopped(self) -> StoppedLaunch:
        """The held launch; commands guarded by STOPPED can rely on it."""
        if self.stop is None:
            raise CommandError("the program is not stopped at a launch")
        return self.stop

    def arg(self, index: int) -> ArgValue:
        args = self.stopped.info.args
        if not 0 <= index < len(args):
            have = f"arg0..arg{len(args) - 1}" if args else "none"
            raise CommandError(f"the kernel has no arg{index} (arguments: {have})")
        return args[index]

    def values(self) -> dict[str, Number]:
        return arg_values(self.stopped.info.args)

    def allocation_for(self, arg: ArgValue) -> Allocation | None:
        """The allocation an argument points into: as the shim resolved it at the launch,
        else (typed non-null pointers only) as the target finds it now."""
        stop = self.stopped
        alloc = stop.info.allocation_of(arg.index)
        if alloc is not None:
            return alloc
        if (arg.type is not None and arg.type.is_pointer and not arg.type.function
                and isinstance(arg.value, int) and arg.value != 0):
            try:
                return stop.allocation(arg.value)
            except TargetError:
                return None
        return None
