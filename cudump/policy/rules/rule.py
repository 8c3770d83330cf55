"""The rule type: which kernels a rule takes, and what it does at their launches.

One type for every rule, whatever made it (a rule file, --digest, --check-nan,
--capture-launch): its `actions` flags say what it does, as uftrace's filter
triggers carry theirs. How a rule file is read and checked is in yaml_file.py and
validation.py; which launches and arguments a rule takes, in matching.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cudump.errors import UsageError
from cudump.kernels.overrides import ArgOverride
from cudump.kernels.pattern import KernelPattern, PatternError
from cudump.policy.rules.matching import RuleMatching
from cudump.rundir import formats as file_formats

PHASES = frozenset({"before", "after"})
# The formats that write files (npy, png) are the registry's: cudump.rundir.formats.
# `format: digest`: a content hash computed on the GPU instead of a copy (cudump.wire.digest).
DIGEST_FORMATS = frozenset({"digest"})
# `format: check-nan`: scan floating-point buffers for NaN/Inf on the GPU, before and after.
SCAN_FORMATS = frozenset({"check-nan"})
STANDALONE_FORMATS = {"digest": DIGEST_FORMATS, "check-nan": SCAN_FORMATS}


class Action(enum.Flag):
    """What a rule does at the launches it selects."""

    SNAPSHOT = 1    # copy the buffers to files (format: npy, png, both: rundir.formats)
    DIGEST = 2      # a content hash of each buffer, on the GPU (format: digest, --digest)
    SCAN = 4        # scan float buffers for NaN/Inf (format: check-nan, --check-nan)
    BREAK = 8       # stop at the prompt (action: break)
    CAPTURE = 16    # capture the launch for `cudump replay` (replay: true, --capture-launch)
    # What the snapshot planner does to buffers (every action but BREAK).
    BUFFERS = SNAPSHOT | DIGEST | SCAN | CAPTURE

    @classmethod
    def of_formats(cls, formats: frozenset[str], replay: bool = False) -> Action:
        """A buffer-taking rule's actions, from its formats (and `replay: true`)."""
        actions = (cls.DIGEST if formats == DIGEST_FORMATS
                   else cls.SCAN if formats == SCAN_FORMATS else cls.SNAPSHOT)
        return actions | cls.CAPTURE if replay else actions


@dataclass
class Rule(RuleMatching):
    name: str
    path: Path
    line: int
    matcher: KernelPattern
    skip: int = 0
    count: int | None = None
    every: int = 1
    args: list[int] | Literal["pointers"] = "pointers"
    when: frozenset[str] = PHASES
    formats: frozenset[str] = field(default_factory=file_formats.names)
    overrides: dict[int, ArgOverride] = field(default_factory=dict)
    # What the rule does. A break rule takes no snapshots: its `when` and `formats` are
    # empty. CAPTURE takes the module image, the parameter bytes and every buffer before
    # and after (args: pointers, when: both, .npy).
    actions: Action = Action.SNAPSHOT
    # The command-line option that made the rule (--digest, --check-nan), not a file.
    option: str | None = None
    # A rule file's `scope:` glob: only launches made inside a matching scope (or at a
    # matching source line) are taken (RuleMatching.matches_where).
    scope: str | None = None

    @property
    def origin(self) -> str:
        return self.option or f"{self.path}:{self.line}"

    @property
    def pattern(self) -> KernelPattern:
        return self.matcher

    @property
    def action(self) -> str:
        """The rule file's `action:`: "break", or "snapshot" (every buffer-taking rule)."""
        return "break" if self.is_break else "snapshot"

    @property
    def is_break(self) -> bool:
        return Action.BREAK in self.actions

    @property
    def is_digest(self) -> bool:
        return Action.DIGEST in self.actions

    @property
    def is_scan(self) -> bool:
        return Action.SCAN in self.actions

    @property
    def replay(self) -> bool:
        """Whether it captures the launches it takes for `cudump replay`."""
        return Action.CAPTURE in self.actions

    @property
    def takes_buffers(self) -> bool:
        """Whether the snapshot planner takes it (a snapshot, digest, scan or capture)."""
        return bool(self.actions & Action.BUFFERS)


@dataclass(frozen=True)
class LaunchChoice:
    """Which launches the command line's modes take (`-k/--kernel-name`, `--launch-skip`,
    `--launch-count`, as Nsight Compute's options of those names): of the launches of
    kernels matching `kernel`, counted per process, the first `skip` are passed over and
    the next `count` (all, where None) taken."""

    kernel: str | None = None
    skip: int = 0
    count: int | None = None

    @property
    def narrows(self) -> bool:
        return self.kernel is not None or self.skip > 0 or self.count is not None


ALL_LAUNCHES = LaunchChoice()


def option_rule(option: str, formats: frozenset[str], pattern: str = "*",
                replay: bool = False, choice: LaunchChoice = ALL_LAUNCHES) -> Rule:
    """The rule a command-line option stands for: every buffer of every matching kernel
    (of the launches `choice` takes)."""
    return Rule(name=option, path=Path(option), line=0, matcher=KernelPattern(pattern),
                formats=formats, option=option, actions=Action.of_formats(formats, replay),
                skip=choice.skip, count=choice.count)


def _chosen_rule(option: str, formats: frozenset[str], choice: LaunchChoice) -> Rule:
    try:
        return option_rule(option, formats, choice.kernel or "*", choice=choice)
    except PatternError as err:
        raise UsageError(f"--kernel-name {choice.kernel}: {err}") from None


def digest_rule(choice: LaunchChoice = ALL_LAUNCHES) -> Rule:
    """--digest: a GPU content digest of every buffer of every kernel (that `choice` takes)."""
    return _chosen_rule("--digest", DIGEST_FORMATS, choice)


def scan_rule(choice: LaunchChoice = ALL_LAUNCHES) -> Rule:
    """--check-nan (and --break-on-nan): every float buffer of every kernel (that `choice`
    takes) scanned."""
    return _chosen_rule("--check-nan", SCAN_FORMATS, choice)


def capture_rule(pattern: str, choice: LaunchChoice = ALL_LAUNCHES) -> Rule:
    """--capture-launch PATTERN: every launch of matching kernels (past `choice`'s skip,
    up to its count), captured for replay."""
    try:
        return option_rule("--capture-launch", frozenset({file_formats.NPY.name}), pattern,
                           replay=True, choice=choice)
    except PatternError as err:
        raise UsageError(f"--capture-launch {pattern}: {err}") from None
