"""How much of the host's memory the write-behind area of a process may take."""

from __future__ import annotations

from pathlib import Path

from cudump.controller.options import RunOptions

MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")    # cgroup v2: a container's own limit, where it has one


def meminfo_available(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable of /proc/meminfo in bytes, or None where it cannot be read."""
    try:
        for line in meminfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable":
                number, _, unit = value.strip().partition(" ")
                return int(number) * (1024 if unit.strip() == "kB" else 1)
    except (OSError, ValueError):
        return None
    return None


def cgroup_room(cgroup: Path = CGROUP) -> int | None:
    """What the cgroup may still take (memory.max - memory.current), or None without a
    limit: MemAvailable does not know it, and a container past it is killed."""
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        return None


def available_bytes(meminfo: Path = MEMINFO, cgroup: Path = CGROUP) -> int | None:
    """The memory available now: the lesser of the host's and the cgroup's room."""
    known = [n for n in (meminfo_available(meminfo), cgroup_room(cgroup)) if n is not None]
    return min(known) if known else None


def behind_mib(options: RunOptions, available: int | None) -> int:
    """MiB of write-behind area for a process: none unless its plain copies may be deferred,
    else what --write-behind asks for, never more than a quarter of the memory available now
    (processes that came before have taken theirs)."""
    if not options.writes_behind:
        return 0
    wanted = options.write_behind_bytes
    if available is not None:
        wanted = min(wanted, available // 4)
    return max(0, wanted) >> 20
