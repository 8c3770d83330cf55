"""bisect with --atol/--rtol: which launches may differ beyond the tolerance, as the digests'
sums of |x| tell (cudump.wire.digest), and the float type a buffer of no known type is
compared as, from the launches that typed the same memory."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cudump.analysis.bisect.errors import BisectError
from cudump.analysis.bisect.target import Target, not_reached
from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.runs import DIVERGED, DivergentLaunch, RunDiff, divergent_launches
from cudump.analysis.diff.runs import launches_in_order as pairs_by_launch
from cudump.analysis.report.formats import plural
from cudump.rundir.manifest import SnapshotRecord

# Element types a buffer of no known type is read as (one-byte views of anything).
UNTYPED = ("uint8", "int8")
# Sums of |x| of these formats say which numpy type to compare elements as (bfloat16 has
# none: its snapshots are uint16 bits).
VIEWS = {"float16": "float16", "float32": "float32", "float64": "float64"}
VIEW_SIZES = {"float16": 2, "float32": 4, "float64": 8}
# BLAS kernels say their precision in one letter before gemm/gemv (cutlass_80_simt_sgemm_...,
# ampere_sgemm_128x64_nn): their buffers are of that type where no launch typed them.
BLAS = re.compile(r"(?<![A-Za-z0-9])([sdh])gem[mv](?![A-Za-z])")
BLAS_TYPES = {"s": "float32", "d": "float64", "h": "float16"}


def certain(pair: PairResult) -> bool:
    """Differs beyond any tolerance: its sums of |x| are further apart than the tolerance
    allows, or its shapes differ."""
    return pair.status == "mismatch" or (pair.status == "differ" and pair.sums is not None)


def unknown(pair: PairResult) -> bool:
    """Digests that differ with no sums to judge them by (a buffer of no known type)."""
    return pair.status == "differ" and pair.sums is None


@dataclass(frozen=True)
class Candidates:
    """The launches whose elements step 3 compares, in A's order; `certain`: the last of
    them is known to differ beyond the tolerance (its sums); `trusted`: launches passed over
    because their sums are within the tolerance (--by-sums)."""

    launches: list[DivergentLaunch]
    certain: bool
    trusted: int

    def trusted_line(self) -> str:
        return (f"  --by-sums: {plural(self.trusted, 'launch', 'launches')} whose digests "
                "differ with sums of |x| within the tolerance taken as within it (not "
                "compared element by element)")

    def verdict(self, within: str) -> str:
        """What bisect says when no candidate differs beyond the tolerance (`within`)."""
        if self.trusted:
            return f"no divergence beyond the tolerance ({within}) by the sums of |x|"
        return (f"no divergence beyond the tolerance ({within}): "
                f"{plural(len(self.launches), 'launch', 'launches')} with digests that "
                "differ, each within it")


def candidates(result: RunDiff, by_sums: bool) -> Candidates:
    """Each launch with a pair whose digests differ, up to the first that certainly differs
    beyond the tolerance; with `by_sums`, only those with a pair the sums cannot judge, and
    that last one."""
    pairs = {launch[0].launch_snapshot.launch_key(): launch
             for launch in pairs_by_launch(result.pairs)}
    found: list[DivergentLaunch] = []
    trusted = 0
    for launch in divergent_launches(result.pairs, result.noise, (*DIVERGED, "close")):
        mine = [p for p in pairs[launch.snapshot.launch_key()] if p.key not in result.noise]
        sure = any(certain(p) for p in mine)
        if by_sums and not sure and not any(unknown(p) for p in mine):
            trusted += 1
            continue
        found.append(launch)
        if sure:
            return Candidates(found, True, trusted)
    return Candidates(found, False, trusted)


class FloatTypes:
    """The float types digest run A's typed buffers had (those with sums of |x|), by the
    memory they cover: a buffer of no known type that starts inside memory another launch
    typed, on a whole element of it, is compared as that type (the nearest such launch in
    A's order), else as the type a BLAS kernel's name says, so that the tolerance applies
    to it."""

    def __init__(self, digest_pairs: list[PairResult]) -> None:
        self._records = {_where(p.a.record): p.a.record for p in digest_pairs
                         if p.a is not None}
        # pid -> (start, end, launch, numpy type) of each typed buffer
        self._typed: dict[int, list[tuple[int, int, int, str]]] = {}
        for record in self._records.values():
            view = VIEWS.get(str(record.extra.get("sum_of")))
            start = _address(record.address)
            if view is not None and start is not None:
                size = int(record.extra.get("bytes") or 0)
                self._typed.setdefault(record.pid, []).append(
                    (start, start + size, record.launch, view))

    def view(self, snapshot: SnapshotRecord) -> str | None:
        """The numpy type to compare a snapshot's buffer as, or None (its own type)."""
        if snapshot.dtype not in UNTYPED:
            return None
        record = self._records.get(_where(snapshot))   # the same buffer in the digest run
        at = _address(record.address) if record is not None else None
        if record is not None and at is not None:
            near = [(abs(launch - record.launch), view)
                    for start, end, launch, view in self._typed.get(record.pid, [])
                    if start <= at < end and (at - start) % VIEW_SIZES[view] == 0]
            if near:
                return min(near)[1]
        blas = BLAS.search(snapshot.kernel)
        return BLAS_TYPES[blas.group(1)] if blas else None


def _where(record: SnapshotRecord) -> tuple[str, int, int, str, int, int]:
    """A buffer of a launch, the same in every run of the program: kernel, occurrence,
    argument, phase, the pointer's offset inside the argument, rank (0 without one)."""
    return (record.kernel, record.occurrence, record.arg, record.phase,
            int(record.extra.get("offset") or 0), record.rank or 0)


def _address(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


def first_beyond(chunk: list[Target], pairs: list[PairResult]) -> tuple[Target, bool] | None:
    """The first launch of a batch whose snapshots differ beyond the tolerance, and whether
    its inputs were within it (only its outputs differ); None when every one is within it.
    A launch the runs did not reach, or did not snapshot whole, is trouble."""
    for target in chunk:
        mine = [p for p in pairs if target.wants(p)]
        if not mine:
            raise not_reached(target)
        if any(p.status == "uncaptured" for p in mine):
            raise BisectError(f"launch {target.record.launch}'s buffers were not all "
                              "snapshotted (the disk budget, or a copy that failed: the runs' "
                              "logs say); a smaller --batch-size takes fewer at a time")
        beyond = [p for p in mine if p.status in DIVERGED]
        if beyond:
            return target, not any(p.key[3] == "before" for p in beyond)
    return None
