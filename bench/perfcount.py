"""Counting a program's own threads with the CPU's hardware counters (perf_event_open, through
ctypes), and their CPU time where the machine does not allow the counters.

A wall-clock time moves with the host's clock speed and with whatever else the host runs; a
thread's instruction count does not, and its cycle count moves only with what the CPU waits
for. So the benchmark of the stay-on NaN/Inf detection (bench/stay_on.py) sets the launching
thread's instructions and cycles under cudump against bare's, beside the wall-clock ratio.

The counters are opened for threads of this process only, and for user space and the kernel
where the machine allows it (perf_event_paranoid 1 or below), else for user space only (2);
where no hardware counter opens at all (a paranoid setting of 3 or more, or a virtual machine
without a PMU) the reason is kept and each thread's CPU time is read instead, from
/proc/self/task/TID/schedstat (nanoseconds on a CPU) or, lacking that, from its stat's utime
and stime (clock ticks).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass, field
from pathlib import Path

# linux/perf_event.h
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_TASK_CLOCK = 1
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FLAG_FD_CLOEXEC = 1 << 3
# perf_event_attr's flag bits used here
ATTR_EXCLUDE_KERNEL = 1 << 5
ATTR_EXCLUDE_HV = 1 << 6
ATTR_SIZE = 128         # PERF_ATTR_SIZE_VER7: every kernel since 5.x takes it
SYSCALL_NUMBERS = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331}


@dataclass(frozen=True)
class Event:
    """One counter: its name in the output, and perf_event_attr's type and config."""

    name: str
    type: int
    config: int


INSTRUCTIONS = Event("instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS)
CYCLES = Event("cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES)
TASK_CLOCK = Event("task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK)
HARDWARE = (INSTRUCTIONS, CYCLES)


class CounterError(OSError):
    """A counter would not open: its message says why, in the machine's terms."""


def attr_bytes(event: Event, exclude_kernel: bool) -> bytes:
    """perf_event_attr for counting `event` on one thread, enabled at once, reading its value
    with the times it was enabled and running (to scale a multiplexed count)."""
    flags = ATTR_EXCLUDE_HV | (ATTR_EXCLUDE_KERNEL if exclude_kernel else 0)
    head = struct.pack("=IIQQQQQ", event.type, ATTR_SIZE, event.config, 0, 0,
                       PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING, flags)
    return head + bytes(ATTR_SIZE - len(head))


def _why(code: int, event: Event) -> str:
    """What an errno from perf_event_open means for `event`, said for the benchmark's reader."""
    paranoid = paranoid_level()
    if code in (errno.EACCES, errno.EPERM):
        return (f"{event.name}: not permitted (perf_event_paranoid is {paranoid}; 2 or below "
                "lets a program count its own threads)")
    if code in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        return (f"{event.name}: this machine has no such counter (no PMU: a virtual machine "
                "that does not pass its CPU's counters through?)")
    if code == errno.ENOSYS:
        return f"{event.name}: this kernel has no perf_event_open"
    return f"{event.name}: perf_event_open failed: {os.strerror(code)}"


def paranoid_level() -> str:
    try:
        return Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    except OSError:
        return "unknown"


_libc = ctypes.CDLL(None, use_errno=True)


def perf_event_open(event: Event, tid: int, exclude_kernel: bool) -> int:
    """A file descriptor counting `event` on thread `tid` (any CPU); CounterError if not."""
    number = SYSCALL_NUMBERS.get(platform.machine())
    if number is None:
        raise CounterError(errno.ENOSYS, f"{event.name}: perf_event_open's number on "
                           f"{platform.machine()} is not known here")
    attr = ctypes.create_string_buffer(attr_bytes(event, exclude_kernel), ATTR_SIZE)
    fd = _libc.syscall(ctypes.c_long(number), attr, ctypes.c_int(tid), ctypes.c_int(-1),
                       ctypes.c_int(-1), ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        code = ctypes.get_errno()
        raise CounterError(code, _why(code, event))
    return fd


def read_scaled(fd: int) -> float:
    """A counter's value, scaled up where it shared the PMU with others (multiplexed)."""
    value, enabled, running = struct.unpack("=QQQ", os.read(fd, 24))
    if running == 0:
        return 0.0
    return value * (enabled / running) if running < enabled else float(value)


def thread_cpu_ns(tid: int) -> int:
    """Nanoseconds thread `tid` of this process has run on a CPU: schedstat's first field,
    else (no schedstat in this kernel) stat's utime and stime in clock ticks. 0 where the
    thread has ended."""
    task = Path(f"/proc/self/task/{tid}")
    try:
        return int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        # The fields after the command (which may hold spaces) start after its last ')'.
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])      # utime, stime (fields 14, 15)
    except (OSError, ValueError, IndexError):
        return 0
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def threads() -> list[int]:
    """The ids of this process's threads now."""
    return sorted(int(name) for name in os.listdir("/proc/self/task") if name.isdigit())


@dataclass(frozen=True)
class Sample:
    """What the counters said at one moment, thread by thread: each counted thread's counts
    by event name, and each thread's CPU time in nanoseconds."""

    launching_tid: int
    counts: dict[int, dict[str, float]]
    cpu_ns: dict[int, int]

    def minus(self, earlier: Sample) -> Delta:
        """What happened between `earlier` and this sample. A thread first seen in this
        sample counts whole (it started, or its counter opened, in between); a thread that
        ended in between takes its counts with it, so the sums over threads are a floor."""
        def since(now: dict[int, float] | dict[int, int], then: dict) -> dict[int, float]:
            return {tid: value - then.get(tid, 0) for tid, value in now.items()}

        names = {name for counts in self.counts.values() for name in counts}
        per_event = {name: since({tid: c[name] for tid, c in self.counts.items() if name in c},
                                 {tid: c[name] for tid, c in earlier.counts.items()
                                  if name in c})
                     for name in names}
        cpu = since(self.cpu_ns, earlier.cpu_ns)
        tid = self.launching_tid
        return Delta({name: d[tid] for name, d in per_event.items() if tid in d},
                     {name: sum(d.values()) for name, d in per_event.items()},
                     int(cpu.get(tid, 0)), int(sum(cpu.values())))


@dataclass(frozen=True)
class Delta:
    """Counts over a stretch: per event name, the launching thread's and the sum over the
    process's threads; and both CPU times in nanoseconds. No event names where the machine
    has no hardware counters."""

    launching: dict[str, float]
    all_threads: dict[str, float]
    launching_cpu_ns: int
    all_cpu_ns: int


@dataclass
class Counters:
    """Counters on the launching thread and on every other thread of this process.

    open() tries the events for user space and the kernel, then for user space only; where
    neither opens, `unavailable` says why and samples hold CPU times alone. refresh() opens
    counters on threads started since (the shim's launcher thread starts at its first use):
    a thread's counts start when its counter opens."""

    launching_tid: int
    events: tuple[Event, ...] = HARDWARE
    scope: str = ""                     # "user+kernel" or "user only", where they opened
    unavailable: str = ""               # why no hardware counter opened ("" if they did)
    _fds: dict[int, dict[str, int]] = field(default_factory=dict)
    _exclude_kernel: bool = False

    @classmethod
    def open(cls, launching_tid: int, events: tuple[Event, ...] = HARDWARE) -> Counters:
        counters = cls(launching_tid, events)
        reasons = []
        for exclude_kernel, scope in ((False, "user+kernel"), (True, "user only")):
            try:
                counters._fds[launching_tid] = counters._open_all(launching_tid, exclude_kernel)
            except CounterError as err:
                reasons.append(err.strerror)
                continue
            counters._exclude_kernel, counters.scope = exclude_kernel, scope
            counters.refresh()
            return counters
        # The same reason twice says nothing more.
        counters.unavailable = "; ".join(dict.fromkeys(reasons))
        return counters

    def _open_all(self, tid: int, exclude_kernel: bool) -> dict[str, int]:
        opened: dict[str, int] = {}
        try:
            for event in self.events:
                opened[event.name] = perf_event_open(event, tid, exclude_kernel)
        except CounterError:
            for fd in opened.values():
                os.close(fd)
            raise
        return opened

    @property
    def hardware(self) -> bool:
        return not self.unavailable

    def describe(self) -> str:
        """One line for the program's output: what the counts are."""
        if self.hardware:
            return (f"perf_event {','.join(e.name for e in self.events)} ({self.scope}), "
                    f"perf_event_paranoid {paranoid_level()}")
        return f"cpu-time (no hardware counters: {self.unavailable})"

    def refresh(self) -> None:
        """Counters on threads of this process that have none yet (those that will not
        open, as a thread that just ended, are left uncounted)."""
        if not self.hardware:
            return
        for tid in threads():
            if tid not in self._fds:
                try:
                    self._fds[tid] = self._open_all(tid, self._exclude_kernel)
                except CounterError:
                    continue

    def sample(self) -> Sample:
        counts = {tid: {name: read_scaled(fd) for name, fd in fds.items()}
                  for tid, fds in self._fds.items()}
        return Sample(self.launching_tid, counts,
                      {tid: thread_cpu_ns(tid) for tid in {*threads(), self.launching_tid}})

    def close(self) -> None:
        for fds in self._fds.values():
            for fd in fds.values():
                os.close(fd)
        self._fds.clear()
