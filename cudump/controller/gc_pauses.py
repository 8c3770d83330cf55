"""Short garbage-collection pauses in the controller while a program runs.

A launch the shim asks about waits while the controller plans it, and the results of the
launches the shim repeats are drained by a thread of the controller: a pause of the
controller is the program's. Now and then Python's cyclic collector walks every object
that has lived long (a full collection). With a training loop's plans kept, such a walk
was measured at 18 to 160 ms on an H200 host, a few times a run; the longest let the
result ring fill, after which the shim asked about the launches it would have repeated.

What the controller keeps for long (its modules, plans, templates, what a buffer's extent
is) holds no reference cycles: it is freed by reference counting when it is dropped. So
what exists when the program starts is frozen at once (gc.freeze), and once a full
collection is over so is what survived it: the next full collection walks only what is
newer. A cycle among frozen objects would stay until the run ends, when everything is
unfrozen and collected as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def _freeze_survivors(phase: str, info: dict[str, int]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


@contextmanager
def short_collections() -> Iterator[None]:
    """While inside, every full collection freezes the objects that survive it (and what
    exists on entering is frozen at once)."""
    gc.freeze()
    gc.callbacks.append(_freeze_survivors)
    try:
        yield
    finally:
        gc.callbacks.remove(_freeze_survivors)
        gc.unfreeze()
