"""Comparisons as terminal text: `cudump diff FILE FILE` and `cudump diff RUN RUN`."""

from __future__ import annotations

from collections.abc import Sequence

from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.causes import Attribution, attribute
from cudump.analysis.diff.metrics import Metrics, Tolerance
from cudump.analysis.diff.runs import DivergentLaunch, RunDiff
from cudump.analysis.report.formats import (
    fmt_count,
    fmt_num,
    fmt_psnr,
    fmt_share,
    fmt_tol,
    fmt_where,
    plural,
    ratio,
)
from cudump.analysis.report.tables import Column, fit, render_line
from cudump.rundir.runs import Snapshot, short_kernel_name

# ---------------------------------------------------------------------------------------
# cudump diff FILE FILE


def file_report(path_a: str, path_b: str, m: Metrics, tol: Tolerance) -> list[str]:
    lines = [
        f"A: {path_a}",
        f"B: {path_b}",
        f"data: {m.dtype} {list(m.shape)}, {fmt_count(m.elements)} elements",
        f"differing elements: {fmt_count(m.differing)} of {fmt_count(m.elements)} "
        f"({fmt_share(m.share)})  [{fmt_tol(tol)}]",
    ]
    if m.channel_differing is not None:
        names = "rgba" if m.channels <= 4 else ""
        pixels = m.elements // m.channels
        for ch, count in enumerate(m.channel_differing):
            label = f"{ch} ({names[ch]})" if names else str(ch)
            lines.append(f"  channel {label}: {fmt_count(count)} "
                         f"({fmt_share(ratio(count, pixels))})")
        assert m.pixels_differing is not None
        lines.append(f"differing pixels: {fmt_count(m.pixels_differing)} of "
                     f"{fmt_count(pixels)} ({fmt_share(ratio(m.pixels_differing, pixels))})")
    if m.nonfinite_mismatch:
        lines.append(f"NaN/Inf disagreeing: {fmt_count(m.nonfinite_mismatch)} elements")
    if m.max_index is None:
        lines.append("largest difference: 0")
    else:
        lines.append(f"largest difference: {fmt_num(m.max_abs)} at {fmt_where(m.max_index)} "
                     f"(A={fmt_num(m.a_at_max)}, B={fmt_num(m.b_at_max)})")
    lines.append(f"mean absolute difference: {fmt_num(m.mean_abs)}")
    lines.append(f"RMSE: {fmt_num(m.rmse)}")
    peak = f" (peak {fmt_num(m.peak)})" if m.peak is not None else ""
    psnr = fmt_psnr(m.psnr)
    lines.append(f"PSNR: {psnr} dB{peak}" if psnr not in ("inf", "-") else f"PSNR: {psnr}")
    lines.append("equal within tolerance" if m.equal else "different")
    return lines


# ---------------------------------------------------------------------------------------
# cudump diff RUN RUN

STATUS_TEXT = {
    "equal": "same",
    "differ": "DIFF",
    "mismatch": "SHAPE",
    "error": "ERROR",
    "only-a": "only A",
    "only-b": "only B",
    "uncaptured": "none",
    "close": "close",
}


class PairTable:
    """One line per pair, aligned before any result is known so lines can stream."""

    def __init__(self, pairs: Sequence[PairResult], kernel_width: int = 48) -> None:
        names = [short_kernel_name(p.launch_snapshot.record.kernel) for p in pairs]
        launches = [str(p.launch_snapshot.record.launch) for p in pairs]
        width = min(max([6] + [len(n) for n in names]), kernel_width)
        # Jobs (analysis.job_runs): each pair's node first, `a|b` where the sides' differ.
        nodes = [_nodes(p) for p in pairs] if any(
            s is not None and s.job_node is not None for p in pairs for s in (p.a, p.b)) else []
        self.lead = [Column("node", max([4] + [len(n) for n in nodes]))] if nodes else []
        self.columns = self.lead + [
            Column("launch", max([6] + [len(x) for x in launches]), True),
            Column("kernel", width),
            Column("occ", 3, True),
            Column("arg", 3, True),
            Column("phase", 6),
            Column("status", 6),
            Column("differing", 11, True),
            Column("share", 8, True),
            Column("max", 9, True),
            Column("at", 16),
            Column("mean", 9, True),
            Column("rmse", 9, True),
            Column("psnr", 7, True),
        ]

    def header(self) -> str:
        return render_line(self.columns, [c.header for c in self.columns])

    def line(self, pair: PairResult) -> str:
        r = pair.launch_snapshot.record
        k = len(self.lead)
        head = [_nodes(pair)] * k + [
            str(r.launch), fit(short_kernel_name(r.kernel), self.columns[k + 1].width),
            str(r.occurrence), str(r.arg), r.phase, STATUS_TEXT.get(pair.status, pair.status)]
        m = pair.metrics
        if m is not None:
            tail = [fmt_count(m.differing), fmt_share(m.share), fmt_num(m.max_abs),
                    fmt_where(m.max_index), fmt_num(m.mean_abs), fmt_num(m.rmse),
                    fmt_psnr(m.psnr)]
            return render_line(self.columns, head + tail)
        # No metrics: the reason takes the place of the numbers.
        text = render_line(self.columns[:6 + k], head)
        reason = digest_text(pair) or pair.reason or ""
        if pair.status == "only-a":
            reason = "no such snapshot in B"
        elif pair.status == "only-b":
            reason = "no such snapshot in A"
        return f"{text.ljust(sum(c.width + 2 for c in self.columns[:6 + k]))}{reason}"


def _nodes(pair: PairResult) -> str:
    """The node of a pair of two jobs' snapshots: `a`, or `a|b` where the sides differ."""
    sides = [s.job_node or "-" for s in (pair.a, pair.b) if s is not None]
    return sides[0] if len(set(sides)) == 1 else "|".join(sides)


def digest_text(pair: PairResult) -> str | None:
    """How a pair compared by digest, in a few words; None when it was not."""
    if pair.digests is None:
        return None
    a, b = pair.digests
    if a == b:
        return f"digest {a}"
    if pair.sums is not None:
        sa, sb = (fmt_num(s) for s in pair.sums)
        if pair.status == "close":
            return f"digest differs; sum of |x| within the tolerance: A {sa}, B {sb}"
        return f"sum of |x| differs beyond the tolerance: A {sa}, B {sb}"
    return f"digest differs: A {a}, B {b}"


def describe_pair(pair: PairResult) -> str:
    r = pair.launch_snapshot.record
    return (f"launch {r.launch} {short_kernel_name(r.kernel)} occurrence {r.occurrence} "
            f"arg {r.arg} {r.phase}")


def _graph_place(snap: Snapshot) -> str:
    extra = snap.record.extra
    if snap.node < 0:
        return ""
    return f" (graph {extra.get('graph', '?')} replay {extra.get('replay', '?')} node {snap.node})"



def launch_place(snap: Snapshot, processes: int = 1) -> str:
    """`launch 17 of void k(float*, int) (occurrence 3, rank 1, process 2 of 2 (pid 42))`:
    the rank where the record has one, the process where the run has several."""
    r = snap.record
    where = f"occurrence {r.occurrence}"
    if r.rank is not None:
        where += f", rank {r.rank}"
    if snap.job_node is not None:
        where += f", node {snap.job_node}"
    if processes > 1:
        where += f", process {snap.process} of {processes} (pid {r.pid})"
    return f"launch {r.launch}{_graph_place(snap)} of {r.kernel} ({where})"


def divergent_line(first: DivergentLaunch) -> str:
    """The first divergent launch in one line: `first divergent: launch 17 of void
    k(float*, int) (occurrence 3, process 2 of 2), arg 0 after; 16 launches matched before
    it`."""
    r = first.snapshot.record
    matched = plural(first.matched, "launch", "launches")
    return (f"first divergent: {launch_place(first.snapshot, first.processes)}, "
            f"arg {r.arg} {r.phase}; {matched} matched before it")


MORE_ROOT_CAUSES = 4      # root causes named after the first, at most


def attribution_lines(found: Attribution, processes: int = 1) -> list[str]:
    """Root causes and consequences among the divergent launches: the earliest root cause
    named first, the others after it, then the counts."""
    if not found.launches:
        return []
    roots = found.root_causes
    lines: list[str] = []
    if roots:
        first = roots[0]
        r = first.first.launch_snapshot.record
        lines.append(f"root cause: {launch_place(first.snapshot, processes)}, arg {r.arg} "
                     f"{r.phase}: its inputs matched, its output differs")
        for other in roots[1:1 + MORE_ROOT_CAUSES]:
            o = other.first.launch_snapshot.record
            lines.append(f"  another root cause: {launch_place(other.snapshot, processes)}, "
                         f"arg {o.arg} {o.phase}")
        if len(roots) > 1 + MORE_ROOT_CAUSES:
            lines.append(f"  and {len(roots) - 1 - MORE_ROOT_CAUSES} more root causes")
    else:
        lines.append("root cause: none among the recorded launches (no divergent launch had "
                     "all its inputs equal)")
    counts = [plural(len(roots), "root cause", "root causes"),
              plural(len(found.consequences), "consequence", "consequences")
              + " (inputs already differed)"]
    if found.unknown:
        counts.append(f"{len(found.unknown)} with inputs not recorded")
    lines.append(f"divergent launches: {len(found.launches)}: {', '.join(counts)}")
    return lines


def pair_detail(pair: PairResult) -> str | None:
    """How a differing pair differs, in one line; None when there is nothing to add."""
    if pair.metrics is not None:
        m = pair.metrics
        return (f"{fmt_count(m.differing)} elements ({fmt_share(m.share)}) differ, "
                f"largest {fmt_num(m.max_abs)} at {fmt_where(m.max_index)}")
    return digest_text(pair) or pair.reason


def run_summary(result: RunDiff) -> list[str]:
    lines: list[str] = []
    first = result.first_divergent_launch
    if first is not None:
        lines.append(divergent_line(first))
        detail = pair_detail(first.pair)
        if detail:
            lines.append(f"  {detail}")
        if any(p.digests is not None for p in result.pairs):
            lines += attribution_lines(attribute(result.pairs, result.noise), first.processes)
    for title, group in (("only in A", result.only_a), ("only in B", result.only_b),
                         ("not captured on either side", result.uncaptured)):
        if group:
            lines.append(f"{title} ({len(group)}):")
            lines += [f"  {describe_pair(p)}" for p in group]
    uncaptured = len(result.uncaptured)
    compared = len(result.compared) - uncaptured
    differ = sum(1 for p in result.compared if p.status in ("differ", "mismatch"))
    neither = f", {uncaptured} not captured on either side" if uncaptured else ""
    close = sum(1 for p in result.compared if p.status == "close")
    within = (f", {close} close (digests differ, sums of |x| within the tolerance)" if close
              else "")
    lines.append(
        f"{compared} pairs compared, {differ} differ{within}, {len(result.errors)} could not "
        f"be compared, {len(result.only_a)} only in A, {len(result.only_b)} only in B{neither}"
    )
    return lines
