"""Pairs compared by digest: a digest side is never loaded, a file side is digested the way
the other side's digest was taken."""

from __future__ import annotations

from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.metrics import Tolerance
from cudump.errors import DiffTrouble
from cudump.rundir.runs import Digest, Snapshot
from cudump.wire import digest as digests

EXACT = Tolerance()


def _geometry(snap: Snapshot) -> str | None:
    """dtype[shape] as a record states it, None when it does not."""
    r = snap.record
    return None if r.dtype is None or r.shape is None else f"{r.dtype}{list(r.shape)}"


def _digest_mismatch(a: Snapshot, da: Digest, b: Snapshot, db: Digest) -> str | None:
    """Why two digested buffers are not the same kind of data, or None."""
    ga, gb = _geometry(a), _geometry(b)
    if ga is not None and gb is not None and ga != gb:
        return f"{ga} vs {gb}"
    if da.bytes != db.bytes:
        return f"{da.bytes} vs {db.bytes} bytes"
    if da.row_bytes != db.row_bytes:
        return f"rows of {da.row_bytes} vs {db.row_bytes} bytes"
    return None


def _digest_of_file(snap: Snapshot, like: Digest) -> Digest:
    """The digest of a snapshot file's bytes, taken as `like` was (rows of its row_bytes)."""
    if like.algorithm != digests.ALGORITHM:
        raise DiffTrouble(f"cannot digest a file the way '{like.algorithm}' does (cudump "
                          f"computes {digests.ALGORITHM})")
    array = snap.load()
    size = int(array.nbytes)
    if size != like.bytes or (like.row_bytes and size % like.row_bytes):
        return Digest("", size, like.row_bytes, None, like.algorithm)
    value = digests.digest_hex(digests.digest(array, like.row_bytes or None))
    return Digest(value, size, like.row_bytes, size // like.row_bytes if like.row_bytes
                  else 0, like.algorithm)


def compare_digests(pair: PairResult, tol: Tolerance = EXACT) -> PairResult:
    """A pair of which one side or both hold a digest only: by digest, never loading a digest
    side (a file side is digested the way the other side's digest was taken). With a
    tolerance, digests that differ are told apart by their sums of |x| where both sides have
    one (cudump.wire.digest): "close" when the sums are within it (the elements may be),
    "differ" when they are not (the elements are not)."""
    a, b = pair.a, pair.b
    assert a is not None and b is not None
    da = a.digest if a.digest_only else None
    db = b.digest if b.digest_only else None
    if da is None and db is None:
        raise DiffTrouble("neither side holds a digest")
    if da is None:
        assert db is not None
        da = _digest_of_file(a, db)
    elif db is None:
        db = _digest_of_file(b, da)
    if da.algorithm != db.algorithm:
        raise DiffTrouble(f"digests by different algorithms: {da.algorithm} vs {db.algorithm}")
    mismatch = _digest_mismatch(a, da, b, db)
    if mismatch is not None:
        pair.status, pair.reason = "mismatch", mismatch
        return pair
    pair.digests = (da.value, db.value)
    pair.status = "equal" if da.value == db.value else "differ"
    pair.reason = None if pair.status == "equal" else "digest differs"
    if (pair.status == "differ" and tol.given and da.abs_sum is not None
            and db.abs_sum is not None and da.sum_of == db.sum_of):
        pair.sums = (da.abs_sum, db.abs_sum)
        if digests.sums_within(da.abs_sum, db.abs_sum, db.elements, tol.atol, tol.rtol):
            pair.status = "close"
    return pair

