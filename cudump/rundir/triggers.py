"""A job's triggers: JOB/triggers/NODE.json, written by a node whose run failed or found
NaN/Inf, so that every other node's flight recorder is written while the job still runs.

One file per node, its first trigger only: written whole under a temporary name, then
linked to its name (link(2) never replaces a file, so a second trigger of the node leaves
the first). Each node's controller polls the folder (a thread; no lock across the shared
file system, no clock compared between nodes) and acts on a file of another node that
was not there when it started.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cudump.rundir import files as runfiles
from cudump.rundir import reading
from cudump.rundir.job import TRIGGERS_DIR, valid_node_name

POLL_SECONDS = 0.2
_MAX_BYTES = 64 << 10       # a trigger is a few hundred bytes: anything bigger is not one


@dataclass(frozen=True)
class Trigger:
    """What made a node's run call the job's recorders: `what` (`NaN/Inf`, `CUDA error`,
    `exit status N`), its words (`detail`), and where it was seen."""

    node: str
    what: str
    detail: str
    when: float                 # seconds since the epoch, on the node's clock (for people)
    rank: int | None = None
    pid: int | None = None
    launch: int | None = None
    kernel: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Trigger | None:
        """A trigger from a file's object; None for one that is not a trigger."""
        if not isinstance(data, dict):
            return None
        text = {k: data.get(k) for k in ("node", "what", "detail")}
        numbers = {k: data.get(k) for k in ("rank", "pid", "launch")}
        when, kernel = data.get("when"), data.get("kernel")
        if (not all(isinstance(v, str) for v in text.values())
                or not all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                           for v in numbers.values())
                or not isinstance(when, int | float) or isinstance(when, bool)
                or not (kernel is None or isinstance(kernel, str))):
            return None
        return cls(**text, when=float(when), **numbers, kernel=kernel)  # type: ignore[arg-type]

    def text(self) -> str:
        """`node n1 found NaN/Inf (rank 1, launch 2 of vecAdd(...))`."""
        where = [f"rank {self.rank}"] if self.rank is not None else []
        if self.launch is not None:
            where.append(f"launch {self.launch}" + (f" of {self.kernel}" if self.kernel else ""))
        said = f" ({', '.join(where)})" if where else ""
        return f"node {self.node}: {self.detail}{said}"


def trigger_path(job: Path, node: str) -> Path:
    return job / TRIGGERS_DIR / f"{node}.json"


def write_trigger(job: Path, trigger: Trigger) -> Path | None:
    """The node's trigger file, where it has none yet (None: it had one)."""
    folder = runfiles.make_dirs(job / TRIGGERS_DIR)
    path = trigger_path(job, trigger.node)
    if os.path.lexists(path):
        return None
    tmp = folder / f".{trigger.node}.{secrets.token_hex(6)}.part"
    text = (json.dumps(trigger.to_json()) + "\n").encode("utf-8")
    with runfiles.create_file(tmp) as f:
        f.write(text)
    try:
        os.link(tmp, path)          # whole, and never over another's
    except FileExistsError:
        return None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_trigger(path: Path) -> Trigger | None:
    """A trigger file, or None where it is not one (unreadable, too big, not a trigger)."""
    try:
        with reading.open_regular(path) as f:
            raw = f.read(_MAX_BYTES + 1)
        data = json.loads(raw) if len(raw) <= _MAX_BYTES else None
    except (OSError, ValueError, reading.RunFileError):
        return None
    return Trigger.from_json(data)


def trigger_names(job: Path) -> set[str]:
    """The nodes with a trigger file in the job."""
    try:
        entries = os.listdir(job / TRIGGERS_DIR)
    except OSError:
        return set()
    return {e[:-5] for e in entries if e.endswith(".json") and valid_node_name(e[:-5])}


def read_triggers(job: Path) -> list[Trigger]:
    """The job's triggers, by node."""
    found = (read_trigger(trigger_path(job, n)) for n in sorted(trigger_names(job)))
    return [t for t in found if t is not None]


class TriggerWatch:
    """Polls JOB/triggers/ on a thread of its own: each trigger of another node that
    appears after the start is handed to `seen` (once). `tick` runs at each poll first
    (the controller looks for a CUDA error of its own there)."""

    def __init__(self, job: Path, node: str, seen: Callable[[Trigger], None],
                 tick: Callable[[], None] | None = None,
                 interval: float = POLL_SECONDS) -> None:
        self.job, self.node, self.seen, self.tick = job, node, seen, tick
        self.interval = interval
        self._known = trigger_names(job) | {node}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cudump-triggers",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if self.tick is not None:
                self.tick()
            for name in sorted(trigger_names(self.job) - self._known):
                trigger = read_trigger(trigger_path(self.job, name))
                if trigger is None:
                    continue            # being replaced, or not a trigger: looked at again
                self._known.add(name)
                self.seen(trigger)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def now() -> float:
    return time.time()
