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


def own_cgroup(root: Path = CGROUP, table: Path = Path("/proc/self/cgroup")) -> Path:
    """This process's cgroup (v2) directory: where its memory is charged."""
    try:
        for line in table.read_text().splitlines():
            hierarchy, _, path = line.partition("::")
            if hierarchy == "0":
                return root / path.strip().lstrip("/")
    except OSError:
        pass
    return root


def cgroup_room(cgroup: Path, root: Path = CGROUP) -> int | None:
    """What the cgroup may still take (memory.max - memory.current), the least over it and
    the cgroups above it, or None without a limit: MemAvailable does not know it, and a
    cgroup past it has its processes killed."""
    rooms: list[int] = []
    here = cgroup
    while True:
        try:
            limit = (here / "memory.max").read_text().strip()
            if limit != "max":
                rooms.append(max(0, int(limit) - int((here / "memory.current").read_text())))
        except (OSError, ValueError):
            pass
        if here == root or here.parent == here or root not in here.parents:
            break
        here = here.parent
    return min(rooms) if rooms else None


def available_bytes(meminfo: Path = MEMINFO, cgroup: Path | None = None) -> int | None:
    """The memory available now: the lesser of the host's and the cgroup's room."""
    rooms = (meminfo_available(meminfo), cgroup_room(own_cgroup() if cgroup is None else cgroup))
    known = [n for n in rooms if n is not None]
    return min(known) if known else None


def behind_mib(options: RunOptions, available: int | None, reserved: int = 0) -> int:
    """MiB of write-behind area for a process: none unless its plain copies may be deferred,
    else what --write-behind asks for, never more than a quarter of the memory available now
    less what the areas made before and not allocated yet will take."""
    if not options.writes_behind:
        return 0
    wanted = options.write_behind_bytes
    if available is not None:
        wanted = min(wanted, max(0, available - reserved) // 4)
    return max(0, wanted) >> 20
