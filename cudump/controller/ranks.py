"""A process's rank, from the environment its launcher gave it (torchrun, mpirun, srun).

The controller reads /proc/PID/environ of each process as it connects: the environment the
process was started with (what it sets later itself is not there, as the launchers set
these variables before starting it). A process whose environment cannot be read (it has
gone, or belongs to someone else) or names no rank has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# In the order they are believed: the global rank first, the node-local one last.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "LOCAL_RANK")


def rank_of(env: Mapping[str, str]) -> int | None:
    """The rank an environment names (the first of RANK_VARIABLES that holds a whole number
    of 0 or more), or None."""
    for name in RANK_VARIABLES:
        text = env.get(name, "").strip()
        if text.isascii() and text.isdigit():
            return int(text)
    return None


def read_environ(pid: int, proc: Path = Path("/proc")) -> dict[str, str] | None:
    """A process's starting environment, or None where it cannot be read."""
    try:
        data = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        name, eq, value = item.partition(b"=")
        if eq and name:
            env.setdefault(name.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
    return env


def environ_rank(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The rank of process `pid` from its environment, None without one."""
    env = read_environ(pid, proc)
    return rank_of(env) if env is not None else None
