"""The run as the prompt drives it: what the prompt needs of the debugger. The controller's
debugger (cudump/controller/debugger.py) has this shape; the prompt names only this, so that
its commands can be tested against an in-memory stand-in and the controller never imports
the prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from cudump.launches.stop import KernelSeen, ResumeMode, StoppedLaunch
from cudump.policy.breakpoints import Breakpoints
from cudump.rundir.manifest import SnapshotRecord


class Debugger(Protocol):
    """The run as the prompt drives it (implemented by controller/debugger.py).

    Stops arrive one at a time: while one launch is held, every other thread
    and process of the target waits at its next launch (all-stop).
    """

    # "quit" or "kill" once the program is ended from the prompt (the summary says so);
    # None otherwise.
    ended_at_prompt: str | None

    @property
    def breakpoints(self) -> Breakpoints: ...

    @property
    def run_dir(self) -> Path: ...

    def kernels(self) -> list[KernelSeen]: ...

    def changed(self) -> None:
        """Breakpoints changed: every process asks again at its next launch."""
        ...

    def wait_for_stop(self, timeout: float | None = None) -> StoppedLaunch | None:
        """The next stop; None when the run has ended (or `timeout` seconds passed:
        check `finished`)."""
        ...

    @property
    def finished(self) -> bool: ...

    @property
    def interrupted(self) -> bool:
        """A Ctrl-C asked for a stop at the next launch and none has come since (taken
        before the prompt was ready, too): the prompt's next Ctrl-C ends the run."""
        ...

    def resume(self, stop: StoppedLaunch, mode: ResumeMode) -> StoppedLaunch | None:
        """Lets the held launch go. `step` runs the kernel and returns the stop right
        after it (phase "after"), or None if there is none (the launch failed, the
        process went away). The other modes return None at once."""
        ...

    def ended(self, stop: StoppedLaunch) -> str | None:
        """None while the stopped launch's process lives; once it has gone (killed from
        outside, or ended by another of its threads while the launch was held), how it
        ended: "process 4242 exited with status 3", "... was killed by SIGKILL"."""
        ...

    def interrupt(self) -> None:
        """Stop at the next launch of any kernel in any process (Ctrl-C)."""
        ...

    def end(self) -> None:
        """End the run now: the target is killed, what was captured is kept."""
        ...

    def record_dump(self, record: SnapshotRecord) -> None:
        """Append a record of a file `dump` wrote to the run's manifest."""
        ...
