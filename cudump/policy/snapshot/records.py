"""The manifest record of one copy around a launch, and the file it is written to."""

from __future__ import annotations

from collections.abc import Callable

from cudump.kernels.geometry import CopyPlan
from cudump.policy.rules import Rule
from cudump.policy.snapshot.planned import LaunchContext
from cudump.rundir.formats import NPY
from cudump.rundir.manifest import SnapshotRecord
from cudump.rundir.wheres import set_where
from cudump.wire.digest import ALGORITHM as DIGEST_ALGORITHM
from cudump.wire.digest import SUM_DTYPES, digest_hex, sum_json, sum_of_bits
from cudump.wire.protocol import ToolMode


def make_record(ctx: LaunchContext, arg: int, phase: str, plan: CopyPlan | None,
                type_text: str | None = None, stem: str | None = None,
                rule: Rule | None = None, offset: int = 0,
                extent: str | None = None) -> SnapshotRecord:
    """The manifest record of one copy (`stem`: the file it is written to, if any), or
    of one that could not be planned (no `plan`)."""
    ev, func = ctx.event, ctx.func
    record = SnapshotRecord(
        kernel=func.demangled, mangled=func.mangled, launch=ev.seq,
        occurrence=ev.occurrence, pid=ctx.proc.pid, grid=list(ev.grid),
        block=list(ev.block), stream=ev.stream_hex, arg=arg,
        type=plan.type_text if plan is not None else type_text, phase=phase,
        address=f"0x{plan.address:x}" if plan is not None else "",
        dtype=plan.dtype if plan is not None else None,
        shape=list(plan.shape) if plan is not None else None,
        # The planned name: the writer gives it each format's suffix (rundir.formats).
        file=f"{stem}{NPY.suffix}" if stem is not None else None,
        device=ev.device if ev.device >= 0 else None, rank=ctx.proc.rank,
    )
    if plan is not None and plan.note:
        record.extra["note"] = plan.note
    if offset:
        record.extra["offset"] = offset   # byte offset of the pointer inside the argument
    if ctx.in_graph:
        record.extra.update(graph=ev.graph, replay=ev.replay, node=ev.node)
    # Where the launch came from in the program's terms (layer, pass, step, source line).
    set_where(record.extra, ev.where(ctx.proc))
    if rule is not None:
        record.extra["rule"] = rule.origin
    if extent is not None:
        # From the pointer to the end of its allocation (or to the next buffer): with a
        # caching allocator that may run past the tensor; a rule's count narrows it.
        record.extra["extent"] = extent
    return record


def stem(ctx: LaunchContext, arg: int, phase: str, offset: int, stems: set[str]) -> str:
    """The file name (less its suffix) of a snapshot of one buffer around one launch."""
    ev = ctx.event
    where = f"-g{ev.graph}r{ev.replay}n{ev.node}" if ctx.in_graph else ""
    inside = f"-off{offset}" if offset else ""
    name = f"{ev.seq:06d}-{ctx.proc.pid}{where}-{ctx.file_name}-arg{arg}{inside}-{phase}"
    # Two rules on the same buffer: each snapshot gets its own file.
    base, n = name, 2
    while name in stems:
        name, n = f"{base}-{n}", n + 1
    stems.add(name)
    return name


def digest_fields(plan: CopyPlan, words: int, sum_of: ToolMode | None = None,
                  sum_bits: int = 0) -> dict[str, object]:
    """What a digest record holds beyond the snapshot fields: with `sum_of`, the sum of |x|
    of its elements of that format (the kernel's second word, `sum_bits`)."""
    fields: dict[str, object] = {
        "digest": digest_hex(words), "bytes": plan.width_bytes * plan.height,
        "row_bytes": plan.width_bytes, "rows": plan.height, "algorithm": DIGEST_ALGORITHM}
    if sum_of is not None:
        fields["sum_of"] = SUM_DTYPES[sum_of]
        fields["abs_sum"] = sum_json(sum_of_bits(sum_bits))
    return fields


def digest_record(make: Callable[[], SnapshotRecord], plan: CopyPlan,
                  sum_of: ToolMode | None = None) -> SnapshotRecord:
    """A repeated plan's digest record (made once, for its template line): the first
    launch's record, with the digest fields."""
    record = make()
    record.extra.update(digest_fields(plan, 0, sum_of))
    return record
