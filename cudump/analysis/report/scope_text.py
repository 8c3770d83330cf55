"""Runs compared scope by scope (cudump.analysis.diff.by_scope) as terminal text: a line per
scope occurrence, the first that differs, the launches inside it, and the counts."""

from __future__ import annotations

from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.by_scope import (
    UNTYPED,
    LaunchesInside,
    ScopeDiff,
    ScopePair,
    geometry,
    nbytes,
)
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.report.formats import fmt_count, fmt_num, fmt_tol, plural
from cudump.analysis.report.text import digest_text, launch_place

STATUS_TEXT = {"equal": "same", "differ": "DIFF", "only-a": "only A", "only-b": "only B",
               "unpaired": "none", "error": "ERROR", "pending": "-", "noise": "noise",
               "undecided": "?"}


def output_detail(pair: PairResult, tol: Tolerance) -> str:
    """How an output pair differs: `max abs 0.32 > atol 0, rtol 0 (3 of 64 elements)`."""
    m = pair.metrics
    if m is not None:
        within = "within" if m.equal else ">"
        return (f"max abs {fmt_num(m.max_abs)} {within} tolerance ({fmt_tol(tol)}), "
                f"{fmt_count(m.differing)} of {fmt_count(m.elements)} elements differ")
    return digest_text(pair) or pair.reason or pair.status


def output_text(place: int, pair: PairResult, tol: Tolerance) -> str:
    """`output 0 float32[8,256,14,14] max abs 0.32 > tolerance (...)`."""
    assert pair.a is not None
    return f"output {place} {geometry(pair.a)} {output_detail(pair, tol)}"


def scope_line(pair: ScopePair, diff: ScopeDiff, tol: Tolerance) -> str:
    """One scope occurrence, indented by its depth: its name, status and outputs."""
    indent = "  " * (pair.key.depth - 1)
    head = f"{indent}{pair.key.text(diff.ranked)}"
    status = STATUS_TEXT.get(pair.status, pair.status)
    outs = pair.outputs
    if pair.status == "differ":
        place, first = pair.differing[0]
        more = len(pair.differing) - 1
        tail = output_text(place, first, tol) + (f" (and {more} more)" if more else "")
    elif pair.status in ("only-a", "only-b"):
        tail = "no such scope in " + ("B" if pair.status == "only-a" else "A")
    elif pair.status == "error":
        tail = next((p.reason or "" for p in outs.pairs if p.status == "error"), "")
    elif pair.status == "undecided":
        parts = sum(p.status == "undecided" for p in outs.pairs)
        tail = (f"{plural(parts, 'output is', 'outputs are')} part of a larger digest that "
                "differs: only snapshots of the elements can tell")
    elif pair.status == "unpaired":
        tail = (f"no outputs to compare (A {len(outs.unpaired_a)}, B "
                f"{len(outs.unpaired_b)}, none of the same size)")
    else:
        tail = plural(len(outs.pairs), "output", "outputs") + " match"
    if pair.both and (outs.unpaired_a or outs.unpaired_b) and pair.status != "unpaired":
        tail += f"; unpaired: A {len(outs.unpaired_a)}, B {len(outs.unpaired_b)}"
    return f"{head}  {status}  {tail}"


def first_scope_line(pair: ScopePair, tol: Tolerance, ranked: bool = False) -> str:
    """`first difference: layer3.0.conv1 (forward, step 0): output 0 float32[...] max abs
    0.32 > tolerance (atol 0, rtol 0), 12 of 64 elements differ`."""
    place, first = pair.differing[0]
    return f"first difference: {pair.key.text(ranked)}: {output_text(place, first, tol)}"


def untyped_note(pair: ScopePair) -> str | None:
    """A line where the scope's first differing output is known on both sides only as an
    allocation from its pointer on (no element type from its kernels), and the two sides'
    launches are not the same kernels: the outputs were then paired by those sizes and the
    order of their last writes, which a caching allocator's block (PyTorch's) makes a guess
    (a temporary of one side can pair with the other's result). None otherwise."""
    if not pair.differing or pair.a is None or pair.b is None:
        return None
    _, first = pair.differing[0]
    if first.a is None or first.b is None or any(
            s.record.dtype not in (None, *UNTYPED) for s in (first.a, first.b)):
        return None
    kernels = [[ln.kernel for ln in occ.launches] for occ in (pair.a, pair.b)]
    if kernels[0] == kernels[1]:
        return None
    sizes = " and ".join(f"{fmt_count(n)} bytes" if (n := nbytes(s)) is not None
                         else "a size not recorded" for s in (first.a, first.b))
    return (f"  note: this output is known on each side only as an allocation from its "
            f"pointer on ({sizes}; its kernels give no element type), and the two sides "
            f"launch other kernels, so outputs were paired by those sizes and the order of "
            f"their last writes: inside a caching allocator's block, a temporary of one side "
            f"can be paired with the other's result, and this finding may name the wrong "
            f"scope")


def inside_lines(inside: LaunchesInside, processes: int = 1) -> list[str]:
    """The launches inside the first differing scope: the first that differs where both
    sides' launches line up, else why they do not."""
    if not inside.lined_up:
        if len(inside.a) == len(inside.b):
            other = next((x, y) for x, y in zip(inside.a, inside.b, strict=True)
                         if x.kernel != y.kernel)
            why = (f"{plural(len(inside.a), 'launch', 'launches')} each, of other kernels: "
                   f"A {other[0].short}, B {other[1].short}")
        else:
            kernels = (len({x.kernel for x in inside.a}), len({x.kernel for x in inside.b}))
            why = (f"A: {plural(len(inside.a), 'launch', 'launches')} of "
                   f"{plural(kernels[0], 'kernel', 'kernels')}, B: "
                   f"{plural(len(inside.b), 'launch', 'launches')} of "
                   f"{plural(kernels[1], 'kernel', 'kernels')}")
        return [f"  its launches do not line up ({why}): its outputs are what compares"]
    count = plural(len(inside.a), "launch", "launches")
    if inside.first is None:
        return [f"  its {count} line up; no launch inside it differs (only the outputs "
                "paired across its launches)"]
    first = inside.first
    assert first.a is not None
    r = first.a.record
    return [f"  first launch inside it that differs ({count} line up): "
            f"{launch_place(first.a, processes)}, arg {r.arg} {r.phase}",
            f"    {_elements(first) if first.metrics else digest_text(first) or first.reason}"]


def _elements(pair: PairResult) -> str:
    m = pair.metrics
    assert m is not None
    return (f"{fmt_count(m.differing)} of {fmt_count(m.elements)} elements differ, largest "
            f"{fmt_num(m.max_abs)}")


def summary_line(diff: ScopeDiff, by_digest: bool = False) -> str:
    """`12 scopes compared, 3 differ, 1 only in A, 0 only in B, 2 with no outputs to pair`;
    `by_digest`: digests compared, with a tolerance they cannot judge (`3 with outputs whose
    digests differ`)."""
    counts = diff.counts()
    compared = sum(counts.get(s, 0) for s in ("equal", "differ", "error", "undecided"))
    unpaired = counts.get("unpaired", 0)
    errors = counts.get("error", 0)
    undecided = counts.get("undecided", 0)
    verb = "with outputs whose digests differ" if by_digest else "differ"
    return (f"{plural(compared, 'scope', 'scopes')} compared, {counts.get('differ', 0)} {verb}"
            + (f", {undecided} that only their elements can tell" if undecided else "")
            + (f", {errors} could not be compared" if errors else "")
            + f", {counts.get('only-a', 0)} only in A, {counts.get('only-b', 0)} only in B"
            + (f", {unpaired} with no outputs of the same size" if unpaired else ""))


def no_difference_line(tol: Tolerance, undecided: int = 0) -> str:
    if undecided:
        return (f"no divergence found beyond the tolerance ({fmt_tol(tol)}), but "
                f"{plural(undecided, 'scope', 'scopes')} could not be told by digests (an "
                "output part of a larger digest that differs): compare runs with snapshots, "
                "or `cudump bisect --layers`, which takes them")
    return (f"no divergence beyond the tolerance ({fmt_tol(tol)}): every aligned scope's "
            "outputs match")
