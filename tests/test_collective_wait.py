"""A launch's place among its process's collectives waits for the collectives still in the
trace ring (cudump.launches.collectives.CollectiveLog.before), and a process whose ring never
catches up waits once, not at every launch."""

from __future__ import annotations

import threading

from cudump.launches import collectives
from cudump.launches.collectives import CollectiveLog


def test_a_launch_waits_for_the_collectives_before_it_still_in_the_ring() -> None:
    log = CollectiveLog(ring_head=lambda: 4)       # the shim has written 4 launches
    log.announce()
    log.heard_of([(1, None), (2, "all-reduce")])
    log.drained_to(2)
    log.heard_of([(11, None)])                     # a later launch's message comes first
    asked = threading.Event()
    result: list = []

    def ask() -> None:
        asked.set()
        result.append(log.before(5, wait=True))     # launches 3 and 4 not heard of yet

    thread = threading.Thread(target=ask)
    thread.start()
    asked.wait()
    log.heard_of([(3, None), (4, "all-reduce")])    # the ring's reader catches up
    log.drained_to(4)
    thread.join()
    place = result[0]
    assert place is not None and (place.count, place.op) == (2, "all-reduce")
    assert not log.lagging


def test_a_ring_that_never_catches_up_is_waited_for_once(monkeypatch) -> None:
    monkeypatch.setattr(collectives, "WAIT_SECONDS", 0.01)
    log = CollectiveLog(ring_head=lambda: 8)
    log.announce()
    log.heard_of([(2, "all-reduce")])
    log.drained_to(2)
    place = log.before(9, wait=True)                # launches 3-8 never come
    assert place is not None and place.count == 1
    assert log.lagging
    monkeypatch.setattr(collectives, "WAIT_SECONDS", 3600.0)
    assert log.before(12, wait=True).count == 1     # no second wait
