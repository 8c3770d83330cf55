"""What one run under cudump is asked to do (the command line, checked), and its defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cudump.analysis.transplant.donor import Donor
from cudump.policy.rules import Action, Rule

# Slots of each process's trace ring (128 bytes each): 16 MiB of shared memory, touched
# only as far as the trace ever runs ahead of the controller.
TRACE_RING_SLOTS = 1 << 17
# Slots of each process's result ring (16,512 bytes each: 8.1 MiB): launches whose digests and scans
# may be on their way at once before the shim waits for the controller.
RESULT_RING_SLOTS = 1 << 9
# Slots of each process's host-write ring under NaN/Inf scans (128 bytes each: 512 KiB): the
# program's host-to-device copies and memsets that may be on their way at once before the
# shim waits for the controller.
HOST_RING_SLOTS = 1 << 12
# Device memory each process may lend a launch's snapshot copies (see --scratch).
DEFAULT_SCRATCH = 1 << 30
# Host memory each process may pin for deferred copies whose files are not written yet (see
# --write-behind).
DEFAULT_WRITE_BEHIND = 2 << 30
# Launches each process's flight recorder keeps when --flight is given without a number
# (384 bytes each, pinned).
DEFAULT_FLIGHT = 256


@dataclass
class RunOptions:
    argv: list[str]
    run_dir: Path
    trace: bool = False
    layers: bool = False              # --layers: launches name their layer, step and line
    module_outputs: bool = False      # --module-outputs: modules' returned tensors told
    rules: list[Rule] = field(default_factory=list)
    max_bytes: int | None = None
    max_bytes_default: bool = False   # max_bytes is the default budget, not --max-bytes
    staging_bytes: int = 256 << 20
    scratch_bytes: int = DEFAULT_SCRATCH
    write_behind_bytes: int = DEFAULT_WRITE_BEHIND
    breaks: list[str] = field(default_factory=list)
    batch: list[str] | None = None    # --batch FILE: its commands, read and checked up front
    ring_slots: int = TRACE_RING_SLOTS
    break_on_nan: bool = False
    timeline: Path | None = None      # --timeline FILE: the run as trace-event JSON
    injections: list[Donor] = field(default_factory=list)   # --inject RUN:LAUNCH, checked
    flight_slots: int = 0             # --flight N: the last N launches of each process; 0: off
    scans_ahead: bool = True          # --no-scans-ahead turns them off (shim/ahead.h)
    hand_off: bool = True             # --no-hand-off: no launcher thread (shim/handoff.h)
    error_exitcode: int = 0           # --error-exitcode N: cudump's status when it finds
                                      # something (Findings); 0: the program's own
    step_range: str | None = None     # --step-range NAME: each push of that range begins a step
    job: Path | None = None           # --job JOB: run_dir is JOB/nodes/NODE (rundir.job)
    watch_nan: bool = False           # --watch-nan: scans in windows of launches (shim/window.c)
    watch_window: int = 0             # --watch-nan-window N: launches a window holds; 0: default
    watch_then: str = "exact"         # --watch-nan-then: exact, stop or go-on after a finding

    @property
    def reads_scopes(self) -> bool:
        """Whether some mode shows where launches came from (scopes, step, source line):
        the trace, the timeline, snapshots and NaN checks, breakpoints, the flight
        recorder. Without one the target is given nothing of scopes."""
        return bool(self.trace or self.timeline is not None or self.rules or self.debugging
                    or self.flight_slots)

    @property
    def scans(self) -> bool:
        """Whether NaN/Inf scans run (--check-nan, --break-on-nan, `format: check-nan`)."""
        return self.break_on_nan or any(r.actions & Action.SCAN for r in self.rules)

    @property
    def reads_compiled_ops(self) -> bool:
        """Whether a compiled program's own description of its kernels is read (XLA's dump):
        for their layers (--layers) and for their arguments' element types (scans)."""
        return self.layers or self.scans

    @property
    def writes_behind(self) -> bool:
        """Whether launches' plain copies may be deferred and written behind the program."""
        return self.scratch_bytes > 0 and self.write_behind_bytes > 0 and any(
            r.actions & (Action.SNAPSHOT | Action.CAPTURE) for r in self.rules)

    @property
    def debugging(self) -> bool:
        return bool(self.breaks or self.batch is not None or self.break_on_nan
                    or any(r.is_break for r in self.rules))
