"""An in-memory target for the prompt's tests: bytearray device memory, a fake Debugger.

Also holds a few checks of the fakes themselves, so that the file is a test module.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from cudump.kernels.args import decode_args
from cudump.kernels.geometry import Allocation
from cudump.kernels.signature import parse_signature
from cudump.launches.stop import Frame, KernelSeen, ResumeMode, StopInfo, TargetError
from cudump.policy.breakpoints import Breakpoints
from cudump.rundir.manifest import SnapshotRecord

KERNEL = "void scale(float const*, float*, uchar4*, int, float)"
MANGLED = "_Z5scalePKfPfP6uchar4if"
A = 0x7F0000000000          # arg0: 16 floats, linear
B = 0x7F0000001000          # arg1: 16 floats, linear
C = 0x7F0000100000          # arg2: pitched, 8 uchar4 per row (32 B) at pitch 64, 3 rows
PITCH, WIDTH_BYTES, HEIGHT = 64, 32, 3


class FakeMemory:
    """Device memory: allocations backed by bytearrays."""

    def __init__(self) -> None:
        self.allocs: dict[int, Allocation] = {}
        self.data: dict[int, bytearray] = {}

    def add(self, alloc: Allocation, content: bytes | None = None) -> None:
        self.allocs[alloc.base] = alloc
        self.data[alloc.base] = bytearray(content if content is not None else alloc.size)
        assert len(self.data[alloc.base]) == alloc.size

    def find(self, address: int) -> Allocation | None:
        for alloc in self.allocs.values():
            if alloc.base <= address < alloc.end:
                return alloc
        return None

    def view(self, address: int, nbytes: int) -> memoryview:
        alloc = self.find(address)
        if alloc is None or address + nbytes > alloc.end:
            raise TargetError(f"cannot read {nbytes} bytes at 0x{address:x}: "
                              "not in device memory")
        off = address - alloc.base
        return memoryview(self.data[alloc.base])[off:off + nbytes]

    def write(self, address: int, content: bytes) -> None:
        self.view(address, len(content))[:] = content


@dataclass
class FakeStop:
    """A StoppedLaunch over FakeMemory."""

    info: StopInfo
    memory: FakeMemory
    frames: list[Frame] = field(default_factory=list)
    max_read_bytes: int = 1 << 20
    reads: list[tuple[int, int]] = field(default_factory=list)
    writes: list[tuple[int, bytes]] = field(default_factory=list)

    @property
    def max_read(self) -> int:
        return self.max_read_bytes

    def read(self, address: int, nbytes: int) -> bytes:
        assert 0 < nbytes <= self.max_read_bytes, nbytes
        self.reads.append((address, nbytes))
        return bytes(self.memory.view(address, nbytes))

    def read2d(self, address: int, width_bytes: int, height: int, pitch: int) -> bytes:
        assert 0 < width_bytes * height <= self.max_read_bytes
        self.reads.append((address, width_bytes * height))
        return b"".join(bytes(self.memory.view(address + r * pitch, width_bytes))
                        for r in range(height))

    def write(self, address: int, data: bytes) -> None:
        assert 0 < len(data) <= self.max_read_bytes
        self.writes.append((address, bytes(data)))
        self.memory.write(address, data)

    def allocation(self, address: int) -> Allocation | None:
        return self.memory.find(address)

    def allocations(self) -> list[Allocation]:
        return sorted(self.memory.allocs.values(), key=lambda a: a.base)

    def backtrace(self) -> list[Frame]:
        return list(self.frames)


def floats(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def make_memory() -> FakeMemory:
    memory = FakeMemory()
    memory.add(Allocation(A, 64, "linear"), floats([i * 0.5 for i in range(16)]))
    memory.add(Allocation(B, 64, "linear"), floats([0.0] * 16))
    pixels = bytearray(PITCH * HEIGHT)
    for row in range(HEIGHT):
        for col in range(8):
            off = row * PITCH + col * 4
            pixels[off:off + 4] = bytes([row, col, row * 10 + col, 255])
        pixels[row * PITCH + WIDTH_BYTES:(row + 1) * PITCH] = b"\xee" * (PITCH - WIDTH_BYTES)
    memory.add(Allocation(C, PITCH * HEIGHT, "pitched", pitch=PITCH, width_bytes=WIDTH_BYTES,
                          height=HEIGHT, elem_size=4), bytes(pixels))
    return memory


def make_info(*, reason: str = "breakpoint 1", breakpoint: int | None = 1,
              launch: int = 2, occurrence: int = 1) -> StopInfo:
    sig = parse_signature(KERNEL)
    raw = [A.to_bytes(8, "little"), B.to_bytes(8, "little"), C.to_bytes(8, "little"),
           (16).to_bytes(4, "little"), struct.pack("<f", 0.5)]
    args = decode_args(sig, raw)
    allocs = {(0, 0): Allocation(A, 64, "linear"), (1, 0): Allocation(B, 64, "linear"),
              (2, 0): Allocation(C, PITCH * HEIGHT, "pitched", pitch=PITCH,
                                 width_bytes=WIDTH_BYTES, height=HEIGHT, elem_size=4)}
    return StopInfo(pid=4242, tid=4243, kernel=KERNEL, mangled=MANGLED, launch=launch,
                    occurrence=occurrence, device=0, grid=(4, 1, 1), block=(128, 1, 1), smem=0,
                    stream="0x0", api="cuLaunchKernel", phase="before", reason=reason,
                    breakpoint=breakpoint, signature=sig, args=args, pointers=allocs)


def make_stop(memory: FakeMemory | None = None, **kw: object) -> FakeStop:
    frames = [Frame(0, 0x7F1234500010, "/usr/lib/libcuda.so.1", "cuLaunchKernel", 0x10),
              Frame(1, 0x401136, "/home/u/app", "run_scale(float*, int)", 0x26),
              Frame(2, 0x7F12345FF000, "/lib/libfoo.so", None, 0x1F000)]
    return FakeStop(make_info(**kw), memory or make_memory(), frames)  # type: ignore[arg-type]


def kernel_step(stop: FakeStop) -> None:
    """What the kernel does: arg1[i] = arg0[i] * arg4; inverts the red of row 1 of arg2."""
    mem = stop.memory
    src = np.frombuffer(bytes(mem.view(A, 64)), dtype=np.float32)
    mem.write(B, (src * np.float32(0.5)).astype(np.float32).tobytes())
    for col in range(8):
        off = C + PITCH + col * 4
        red = mem.view(off, 1)[0]
        mem.write(off, bytes([255 - red]))


class FakeDebugger:
    """A Debugger whose stops come from a queue; step runs `kernel` on the memory."""

    def __init__(self, run_dir: Path, stops: list[FakeStop] | None = None) -> None:
        self._breakpoints = Breakpoints()
        self._run_dir = run_dir
        self.stops: deque[FakeStop] = deque(stops or [])
        self.seen = [KernelSeen(4242, KERNEL, MANGLED, 2),
                     KernelSeen(4242, "void fill<int>(int*, int, int)", "_Z4fillIiEvPiii", 1)]
        self.changes = 0
        self.resumes: list[tuple[int, str]] = []
        self.interrupts = 0
        self.interrupted = False           # a Ctrl-C taken before the prompt, not yet a stop
        self.ends = 0
        self.records: list[SnapshotRecord] = []
        self.kernel = kernel_step
        self.step_returns_none = False
        self._finished = False
        self.waits = 0
        self.on_wait: list[object] = []    # per wait_for_stop call: an exception to raise
        self.gone: str | None = None       # how the stop's process ended, once it has

    @property
    def breakpoints(self) -> Breakpoints:
        return self._breakpoints

    @property
    def run_dir(self) -> Path:
        return self._run_dir

    def kernels(self) -> list[KernelSeen]:
        return list(self.seen)

    def changed(self) -> None:
        self.changes += 1

    def wait_for_stop(self, timeout: float | None = None) -> FakeStop | None:
        self.waits += 1
        if self.on_wait:
            event = self.on_wait.pop(0)
            if isinstance(event, BaseException):
                raise event
        if self.stops:
            return self.stops.popleft()
        if not self.on_wait:
            self._finished = True
        return None

    @property
    def finished(self) -> bool:
        return self._finished

    def resume(self, stop: FakeStop, mode: ResumeMode) -> FakeStop | None:  # type: ignore[override]
        self.resumes.append((stop.info.launch, mode))
        if mode != "step":
            if mode in ("detach", "kill"):
                self.stops.clear()
            return None
        if self.step_returns_none:
            return None
        self.kernel(stop)
        info = replace(stop.info, phase="after", reason="step")
        return FakeStop(info, stop.memory, stop.frames, stop.max_read_bytes)

    def ended(self, stop: FakeStop) -> str | None:  # type: ignore[override]
        return self.gone

    def interrupt(self) -> None:
        self.interrupts += 1

    def end(self) -> None:
        self.ends += 1

    def record_dump(self, record: SnapshotRecord) -> None:
        self.records.append(record)


# ------------------------------------------------------------------ checks of the fakes


def test_fake_memory_reads_rows_without_padding() -> None:
    stop = make_stop()
    data = stop.read2d(C, WIDTH_BYTES, HEIGHT, PITCH)
    assert len(data) == WIDTH_BYTES * HEIGHT and b"\xee" not in data


def test_fake_memory_refuses_reads_outside_allocations() -> None:
    with pytest.raises(TargetError):
        make_stop().read(A + 60, 8)
