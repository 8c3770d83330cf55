"""Pairs compared `jobs` at a time: in this process, on threads, or in forked workers."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from cudump.analysis.diff.align import PairResult
from cudump.analysis.diff.compare import compare_pair
from cudump.analysis.diff.metrics import Metrics, Tolerance
from cudump.errors import DiffTrouble
from cudump.rundir.runs import Snapshot

# Pairs holding at least this many bytes (both sides) are compared in worker processes.
PROCESS_MIN_BYTES = 64 << 20


def _snapshot_bytes(snap: Snapshot | None) -> int:
    r = snap.record if snap is not None else None
    if r is None or r.dtype is None or r.shape is None or snap is None or snap.digest_only:
        return 0
    try:
        return int(np.dtype(r.dtype).itemsize * math.prod(r.shape))
    except (TypeError, ValueError):
        return 0


def parallel_kind(pairs: Sequence[PairResult], jobs: int) -> str:
    """How compare_pairs spreads `pairs` over `jobs`: "serial", "threads" or "processes".

    numpy releases the GIL in its loops, but a pair takes a few hundred of them, and threads
    handing the GIL to each other that often mostly wait: on 2 cores, 2 threads compared
    1920x1080 RGBA pairs no faster than 1 (4.6 against 4.5-4.8 ms a pair), 2 processes in
    2.5 ms. Worker processes are forked (nothing to import again), when there is enough to
    compare to repay starting them (about 10 ms) and only from a process running one thread
    (forking copies no other)."""
    todo = [p for p in pairs if p.a is not None and p.b is not None]
    if jobs == 1 or len(todo) <= 1:
        return "serial"
    size = sum(_snapshot_bytes(p.a) + _snapshot_bytes(p.b) for p in todo)
    if (size >= PROCESS_MIN_BYTES and sys.platform == "linux"
            and threading.active_count() == 1):
        return "processes"
    return "threads"


def _worker_start() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is for the parent to handle


_Outcome = tuple[str, Metrics | None, str | None, tuple[str, str] | None,
                 tuple[float, float] | None]


def _compare_in_worker(pair: PairResult, tol: Tolerance) -> _Outcome:
    done = compare_pair(pair, tol)
    return done.status, done.metrics, done.reason, done.digests, done.sums


def _in_processes(pairs: Sequence[PairResult], tol: Tolerance,
                  jobs: int) -> tuple[Executor, Iterator[PairResult]] | None:
    """Pairs compared in worker processes, or None if they cannot be started."""
    pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork"),
                               initializer=_worker_start)
    batch = max(1, min(8, len(pairs) // (8 * jobs)))
    try:
        results = pool.map(_compare_in_worker, pairs, [tol] * len(pairs), chunksize=batch)
    except OSError:                 # no fork: out of memory or of processes
        pool.shutdown(wait=True, cancel_futures=True)
        return None

    def filled() -> Iterator[PairResult]:
        for pair, result in zip(pairs, results, strict=True):
            pair.status, pair.metrics, pair.reason, pair.digests, pair.sums = result
            yield pair

    return pool, filled()


def compare_pairs(
    pairs: Sequence[PairResult], tol: Tolerance, jobs: int | None = None
) -> Iterator[PairResult]:
    """Compare pairs `jobs` at a time (default: one per CPU); results come back in the order
    given, as they are ready."""
    if jobs is not None and jobs < 1:
        raise DiffTrouble(f"jobs must be 1 or more, not {jobs}")
    jobs = jobs or os.cpu_count() or 1
    kind = parallel_kind(pairs, jobs)
    if kind == "serial":
        for pair in pairs:
            yield compare_pair(pair, tol)
        return
    started = _in_processes(pairs, tol, jobs) if kind == "processes" else None
    if started is None:
        threads = ThreadPoolExecutor(max_workers=jobs)
        started = threads, threads.map(lambda p: compare_pair(p, tol), pairs)
    pool, results = started
    try:
        yield from results
    except BrokenProcessPool as err:
        raise DiffTrouble(f"a worker process comparing pairs died ({err}); "
                          "-j 1 compares in this process") from None
    finally:
        # Not waiting for pairs nobody will see (Ctrl-C, a closed pipe).
        pool.shutdown(wait=True, cancel_futures=True)
