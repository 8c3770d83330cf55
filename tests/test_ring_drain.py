"""When a ring's drain thread goes on and when it waits (cudump/wire/rings.py): at once while
producers fill a batch, else long enough for one to build up, never longer than when idle.
The loop runs here on a clock of the test's own, so nothing depends on timing."""

from __future__ import annotations

import threading

import pytest

from cudump.wire import rings
from cudump.wire.rings import IDLE_SECONDS, RingDrain, pause_after


@pytest.mark.parametrize("taken,goal", [(128, 128), (500, 128), (1, 1), (3, 1)])
def test_a_full_batch_goes_on_at_once(taken: int, goal: int) -> None:
    assert pause_after(taken, 0.001, goal) == 0.0


def test_slots_faster_than_the_clock_go_on_at_once() -> None:
    assert pause_after(5, 0.0, 128) == 0.0


def test_an_empty_drain_waits_the_idle_time() -> None:
    assert pause_after(0, 0.0005, 128) == IDLE_SECONDS
    assert pause_after(0, 0.0005, 1) == IDLE_SECONDS


def test_a_small_batch_waits_for_the_rest_at_the_rate_seen() -> None:
    # 32 slots in 0.1 ms: 128 take 0.4 ms at that rate.
    assert pause_after(32, 0.0001, 128) == pytest.approx(0.0004)
    # A slow producer: never longer than an idle drain.
    assert pause_after(2, 0.002, 128) == IDLE_SECONDS


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


class _Stop:
    """The drain's stop event: set once the script has run out; a wait moves the clock."""

    def __init__(self, clock: _Clock, script: list[int]) -> None:
        self.clock, self.script, self.waits = clock, script, []

    def is_set(self) -> bool:
        return not self.script

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.clock.now += seconds
        return False


class _Scripted(RingDrain[int]):
    """A drain whose drains take what the script says, each costing 50 µs."""

    def batch_goal(self) -> int:
        return 128

    def drain_once(self) -> int:
        stop: _Stop = self._stop   # type: ignore[assignment]
        stop.clock.now += 0.00005
        return stop.script.pop(0)


def _run(script: list[int], monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = _Clock()
    monkeypatch.setattr(rings, "time", clock)
    drain = object.__new__(_Scripted)      # no thread: the loop runs on this one
    drain._rings, drain._lock = [], threading.Lock()
    drain._stop = _Stop(clock, list(script))   # type: ignore[assignment]
    drain._loop()
    return drain._stop.waits               # type: ignore[attr-defined]


def test_the_loop_takes_full_batches_back_to_back(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run([200, 150, 128], monkeypatch) == []


def test_the_loop_waits_after_small_batches_and_when_idle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    waits = _run([0, 4, 300, 16], monkeypatch)
    assert waits[0] == IDLE_SECONDS                   # nothing there
    assert waits[1] == IDLE_SECONDS                   # 4 slots in 2 ms: slow, the longest wait
    assert len(waits) == 3                            # none after the full batch
    assert 0 < waits[2] < IDLE_SECONDS                # 16 slots in 50 µs: 128 in 0.4 ms
    assert waits[2] == pytest.approx(128 * 0.00005 / 16)


class _Sized:
    def __init__(self, n: int) -> None:
        self.slots = [0] * n


def test_the_goal_is_a_quarter_of_the_smallest_ring() -> None:
    drain = object.__new__(RingDrain)
    drain._rings, drain._lock, drain._goal = [], threading.Lock(), 1
    assert drain.batch_goal() == 1                      # no ring yet: anything is a batch
    drain._add(_Sized(131072))
    drain._add(_Sized(512))
    assert drain.batch_goal() == 128
    drain._add(_Sized(2))
    assert drain.batch_goal() == 1
