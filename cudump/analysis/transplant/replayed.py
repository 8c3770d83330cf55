"""`cudump replay --inputs-from RUN`: a captured launch replayed on another run's inputs.

The capture gives the code, the parameters and where each buffer is; RUN's "before"
snapshots of the same launch (same launch number, same kernel) replace the captured
inputs, buffer for buffer (an argument, and the pointer's byte offset inside it), and what
the replay leaves is compared with RUN's "after" snapshots, as `cudump --inject` compares a
live launch's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.replay import Capture, ReplayTrouble
from cudump.analysis.replay_engine import LaunchSpec
from cudump.analysis.transplant.donor import Donor, load_donor, parse_spec
from cudump.analysis.transplant.outcome import check_output
from cudump.errors import CudumpError
from cudump.rundir.injections import InjectionRecord
from cudump.rundir.runs import short_kernel_name

OPTION = "--inputs-from"


@dataclass
class Transplant:
    """The capture's inputs with RUN's put in their place."""

    donor: Donor
    before: list[np.ndarray | None]
    notes: list[str] = field(default_factory=list)
    buffers: int = 0
    bytes: int = 0

    def record(self, capture: Capture, spec: LaunchSpec, got: list[np.ndarray],
               tol: Tolerance | None = None) -> InjectionRecord:
        """What the replay left, against RUN's "after" snapshots."""
        d = self.donor
        record = InjectionRecord(
            source=d.source, launch=d.launch, kernel=d.kernel, occurrence=d.occurrence,
            source_pid=d.pid, status="written", source_rank=d.rank, pid=capture.pid,
            live_kernel=capture.kernel, live_occurrence=capture.occurrence,
            buffers=self.buffers, bytes=self.bytes)
        results = {(b.arg, b.offset): array for b, array in zip(spec.buffers, got, strict=True)}
        for output in d.outputs:
            array = results.get((output.arg, output.offset))
            record.outputs.append(check_output(output, array, tol=tol,
                                               missing="the capture has no such buffer"))
        return record


def transplant(text: str, capture: Capture, spec: LaunchSpec,
               before: list[np.ndarray | None]) -> Transplant:
    """RUN's inputs of the captured launch in place of the captured ones; ReplayTrouble,
    one line, where RUN's launch is of another kernel or a buffer of another size."""
    try:
        donor = load_donor(parse_spec(text, OPTION, launch_required=False), OPTION,
                           capture.launch)
    except CudumpError as err:
        raise ReplayTrouble(str(err)) from None
    except OSError as err:   # a manifest's file name no file system takes, and the like
        raise ReplayTrouble(f"{OPTION} {text}: {unreadable(err)}") from None
    if not donor.same_kernel(capture.kernel, capture.record.mangled):
        mine, theirs = short_kernel_name(capture.kernel), donor.short_kernel
        if mine == theirs:
            mine, theirs = capture.kernel, donor.kernel
        raise ReplayTrouble(f"{OPTION} {text}: launch {donor.launch} of {donor.source} is "
                            f"{theirs}, not {mine} as captured; nothing replayed")
    inputs = {(b.arg, b.offset): b for b in donor.inputs}
    result = Transplant(donor, list(before))
    for i, buffer in enumerate(spec.buffers):
        theirs = inputs.pop((buffer.arg, buffer.offset), None)
        if theirs is None:
            if before[i] is not None:
                result.notes.append(f"{buffer.label} keeps its captured input ({donor.source} "
                                    "has no 'before' snapshot of it)")
            continue
        problem = theirs.fits(buffer.height, buffer.width, donor.source)
        if problem is not None:
            raise ReplayTrouble(f"{OPTION} {text}: sizes differ: {problem}; nothing replayed")
        try:
            result.before[i] = np.ascontiguousarray(theirs.load())
        except CudumpError as err:
            raise ReplayTrouble(f"{OPTION} {text}: {err}") from None
        except OSError as err:
            raise ReplayTrouble(f"{OPTION} {text}: {unreadable(err)}") from None
        result.buffers += 1
        result.bytes += theirs.nbytes
    if inputs:
        extra = next(iter(inputs.values()))
        raise ReplayTrouble(f"{OPTION} {text}: {donor.source} has a 'before' snapshot of "
                            f"{extra.label}, a buffer the capture does not have; nothing "
                            "replayed")
    return result


def unreadable(err: OSError) -> str:
    """An OSError of reading a run's file, in a few words: the file's name (cut short) and
    the reason."""
    name = os.path.basename(str(err.filename)) if err.filename else "a snapshot"
    shown = name if len(name) <= 80 else f"{name[:80]}... ({len(name)} characters)"
    return f"cannot read {shown}: {err.strerror or err}"
