"""The controller's garbage collection while a program runs (cudump/controller/gc_pauses.py)."""

import gc
import weakref

from cudump.controller.gc_pauses import short_collections


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_what_exists_and_what_survives_a_full_collection_is_frozen_until_the_run_ends():
    assert gc.get_freeze_count() == 0
    kept = [_Node() for _ in range(100)]
    with short_collections():
        at_start = gc.get_freeze_count()
        assert at_start >= len(kept)            # what exists on entering
        later = [_Node() for _ in range(1000)]
        gc.collect(1)
        assert gc.get_freeze_count() < at_start + len(later)   # a young collection: not yet
        gc.collect()
        assert gc.get_freeze_count() >= at_start + len(later)  # survivors of a full one
        # Cycles made later are still found by the next collection.
        young = _cycle()
        gc.collect()
        assert young() is None
    assert gc.get_freeze_count() == 0
    assert _freeze_survivors_gone()
    assert len(kept) + len(later) == 1100


def _freeze_survivors_gone() -> bool:
    return all(getattr(cb, "__module__", "") != "cudump.controller.gc_pauses"
               for cb in gc.callbacks)


def test_the_freezing_ends_when_the_run_does_even_on_an_error():
    try:
        with short_collections():
            raise RuntimeError("the run failed")
    except RuntimeError:
        pass
    assert _freeze_survivors_gone()
    gc.collect()
    assert gc.get_freeze_count() == 0
