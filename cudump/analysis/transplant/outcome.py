"""After a transplant: each buffer the launch left against the donor's "after" snapshot of
it, and the lines that say so (`cudump --inject` at the end of the run, `cudump replay
--inputs-from`).

Buffers compare exactly, element by element as `cudump diff` compares them. Two snapshots
of one buffer taken by different rules may read its bytes as other element types or shapes
(`uchar8*` rows as bytes, or as RGBA pixels): of the same size in bytes, they are compared
in the donor's dtype and shape.
"""

from __future__ import annotations

import numpy as np

from cudump.analysis.diff.arrays import compare_arrays
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.report.formats import fmt_count, fmt_num
from cudump.analysis.transplant.donor import DonorBuffer
from cudump.errors import CudumpError
from cudump.rundir.injections import InjectionRecord, OutputCheck
from cudump.rundir.runs import short_kernel_name
from cudump.rundir.summary import plural
from cudump.sizes import human_bytes


def as_donor(donor: DonorBuffer, array: np.ndarray) -> np.ndarray | None:
    """`array` read as the donor's dtype and shape, or None when its bytes are not as many."""
    array = np.ascontiguousarray(array)
    if array.nbytes != donor.nbytes:
        return None
    return array.reshape(-1).view(np.uint8).view(donor.dtype).reshape(donor.shape)


def check_output(donor: DonorBuffer, array: np.ndarray | None, file: str | None = None,
                 missing: str = "not snapshotted", tol: Tolerance | None = None
                 ) -> OutputCheck:
    """How `array` (this launch's buffer after it ran; None: there is none, `missing` says
    why) compares with the donor's `after` snapshot of it (exactly, or within `tol`)."""
    check = OutputCheck(donor.arg, donor.offset, "missing", file=file)
    if array is None:
        check.reason = missing
        return check
    mine = as_donor(donor, array)
    if mine is None:
        check.reason = (f"{np.asarray(array).nbytes:,} bytes here, {donor.nbytes:,} in the "
                        "donor run")
        return check
    try:
        metrics = compare_arrays(donor.load(), mine, tol)
    except CudumpError as err:
        check.reason = str(err)
        return check
    check.elements, check.differing = metrics.elements, metrics.differing
    if metrics.equal:
        check.status = "equal"
        return check
    check.status = "differs"
    check.max_abs = float(metrics.max_abs) if metrics.max_index is not None else None
    return check


def injection_lines(record: InjectionRecord, prefix: str = "cudump: inject") -> list[str]:
    """The report of one transplant: one line per output compared."""
    head = (f"{prefix}: launch {record.launch} of {short_kernel_name(record.kernel)} "
            f"(occurrence {record.occurrence})")
    source = record.source
    if record.status == "not-reached":
        return [f"{head}: never reached in this run; nothing written"]
    if record.status == "refused":
        return [f"{head}: refused, nothing written: {record.reason}"]
    written = (f"inputs from {source} written ({plural(record.buffers, 'buffer')}, "
               f"{human_bytes(record.bytes)})")
    if record.status == "failed":
        written = f"writing the inputs from {source} failed ({record.reason}); it ran on"
    if not record.outputs:
        return [f"{head}: {written}; {source} has no 'after' snapshot to compare with"]
    return [f"{head}: {written}; {output_text(check, source)}" for check in record.outputs]


def output_text(check: OutputCheck, source: str) -> str:
    """`arg 2 after now equals RUN's`, or how it still differs."""
    what = f"{check.label} after"
    if check.status == "equal":
        return f"{what} now equals {source}'s"
    if check.status == "differs":
        largest = f" (max abs diff {fmt_num(check.max_abs)})" if check.max_abs is not None \
            else " (NaN/Inf where the other has a number)"
        return (f"{what} still differs from {source}'s in {fmt_count(check.differing or 0)} "
                f"of {fmt_count(check.elements or 0)} elements{largest}")
    return f"{what} cannot be compared with {source}'s: {check.reason}"
