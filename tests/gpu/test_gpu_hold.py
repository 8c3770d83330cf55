"""cudump's kernel as the shim ships it (shim/tools_ptx.h), launched here by itself: a scan
that finds a new NaN holds its stream until the gate opens, or opens the gate itself after
TOOL_HOLD_NS (but not while the gate says the shim is serving it); a scan that finds nothing,
or NaN that was there before, holds nothing. While it holds, it makes the copies its mailbox
asks for (GATE_COPY), rows of device memory into mapped host memory, as the shim's serve
asks for a NaN producer's buffers."""

from __future__ import annotations

import ctypes
import importlib.util
import re
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from cudump.wire.protocol import Gate

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu

TOOL_JOBS = int(re.search(r"TOOL_JOBS = (\d+)", (ROOT / "shim" / "tooljob.h").read_text()).group(1))
JOB = struct.Struct("<11Q2I")       # shim/tooljob.h: struct tool_job (twin, twin_tag: 0 here)
TAIL = struct.Struct("<2I3Q")       # njobs, hold_jobs, hold, hold_acc, hold_mail
MAIL = struct.Struct("<7Q")         # protocol.h: struct proto_gate_mail
MAIL_AT = 256                       # the mailbox, in the host page after the results
STAGING = 64 << 20                  # mapped host memory the mailbox's copies go to
SCAN_F32 = 1
RESULT = 32                         # struct proto_tool_result


def tools_ptx(name: str = "tools_ptx") -> bytes:
    """cudump's kernel as the shim embeds it (shim/build.py from shim/gpu/tools.ptx):
    `tools_ptx`, for every GPU, or `tools_ptx_sm90`, for Hopper and later, as the shim passes
    it to cuModuleLoadData."""
    spec = importlib.util.spec_from_file_location("shim_build", ROOT / "shim" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    ptx = build.PTX.read_text(encoding="ascii")
    return (build.ptx_for_hopper(ptx) if name == "tools_ptx_sm90" else ptx).encode()


def tool_holds() -> int:
    """TOOL_HOLDS, the flag in a job's mode for the held launch's own jobs."""
    return 1 << int(re.search(r"TOOL_HOLDS = 1u << (\d+)",
                              (ROOT / "shim" / "tooljob.h").read_text()).group(1))


def hold_ns() -> int:
    return int(re.search(r"#define TOOL_HOLD_NS (\d+)ull",
                         (ROOT / "shim" / "tooljob.h").read_text()).group(1))


HOLD_WORDS = 2048                   # the hold's two words in scratch: jobs counted, marked


class Kernel:
    """A context with cudump's kernel, a stream, and pinned memory the device writes."""

    def __init__(self) -> None:
        from cuda.bindings import driver as cu
        self.cu = cu
        self.ok(cu.cuInit(0))
        dev = self.ok(cu.cuDeviceGet(0))
        self.ctx = self.ok(cu.cuDevicePrimaryCtxRetain(dev))
        self.ok(cu.cuCtxSetCurrent(self.ctx))
        # The build the shim loads on this GPU (shim/tools.c): launched plainly here, the
        # Hopper build's wait for the kernel before it returns at once.
        major = self.ok(cu.cuDeviceGetAttribute(
            cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
        module = self.ok(cu.cuModuleLoadData(tools_ptx("tools_ptx_sm90" if major >= 9
                                                       else "tools_ptx")))
        self.fn = self.ok(cu.cuModuleGetFunction(module, b"cudump_tools"))
        self.stream = self.ok(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
        self.host = self.ok(cu.cuMemHostAlloc(4096, cu.CU_MEMHOSTALLOC_DEVICEMAP))
        self.host_dev = int(self.ok(cu.cuMemHostGetDevicePointer(self.host, 0)))
        ctypes.memset(self.host, 0, 4096)
        self.scratch = self.ok(cu.cuMemAlloc(4096))
        self.ok(cu.cuMemsetD8(self.scratch, 0, 4096))
        self.buffer = self.ok(cu.cuMemAlloc(4096))
        self.buffer2 = self.ok(cu.cuMemAlloc(4096))
        self.staging = self.ok(cu.cuMemHostAlloc(STAGING, cu.CU_MEMHOSTALLOC_DEVICEMAP))
        self.staging_dev = int(self.ok(cu.cuMemHostGetDevicePointer(self.staging, 0)))
        self.big = self.ok(cu.cuMemAlloc(STAGING))

    def ok(self, result):
        rc, *values = result
        assert rc == self.cu.CUresult.CUDA_SUCCESS, rc
        return values[0] if len(values) == 1 else values or None

    def word(self, offset: int, fmt: str = "<I") -> int:
        return struct.unpack_from(fmt, (ctypes.c_char * 4096).from_address(self.host), offset)[0]

    def set_word(self, offset: int, value: int) -> None:
        ctypes.c_uint32.from_address(self.host + offset).value = value

    def scan(self, values: np.ndarray, *, before_found: int | None, gate: int = Gate.ARMED,
             ahead: np.ndarray | None = None):
        """Scans `values` after a launch, gated and holding, and `ahead` (if given) in the
        same launch of the kernel as a scan made ahead for the next launch (neither marks
        nor counts for the hold); returns an event recorded after."""
        cu = self.cu
        GATE, BEFORE, RESULT_AT, AHEAD_AT = 0, 64, 128, 192
        ctypes.memset(self.host + 64, 0, 4096 - 64)
        self.set_word(GATE, gate)
        if before_found is not None:
            ctypes.c_uint64.from_address(self.host + BEFORE).value = before_found
        words = int(self.scratch) + HOLD_WORDS
        jobs = [JOB.pack(*self.put(self.buffer, values), self.host_dev + RESULT_AT,
                         int(self.scratch), 7, words + 8,
                         0 if before_found is None else self.host_dev + BEFORE, 0, 0,
                         SCAN_F32 | tool_holds(), 2)]
        if ahead is not None:
            jobs.insert(0, JOB.pack(*self.put(self.buffer2, ahead), self.host_dev + AHEAD_AT,
                                    int(self.scratch) + 64, 8, 0, 0, 0, 0, SCAN_F32, 2))
        params = (b"".join(jobs) + bytes(JOB.size * (TOOL_JOBS - len(jobs)))
                  + TAIL.pack(len(jobs), 1, self.host_dev + GATE, words,
                              self.host_dev + MAIL_AT))
        arg = ctypes.create_string_buffer(params, len(params))
        pointers = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
        self.ok(cu.cuLaunchKernel(self.fn, 2 * len(jobs), 1, 1, 256, 1, 1, 0, self.stream,
                                  ctypes.addressof(pointers), 0))
        event = self.ok(cu.cuEventCreate(0))
        self.ok(cu.cuEventRecord(event, self.stream))
        self.keep = arg
        return event

    def put(self, buffer, values: np.ndarray) -> tuple[int, int, int, int]:
        """Copies values into buffer; returns the job's src, width, height, pitch."""
        data = np.ascontiguousarray(values, dtype=np.float32)
        self.ok(self.cu.cuMemcpyHtoD(buffer, data.ctypes.data, data.nbytes))
        return int(buffer), data.nbytes, 1, data.nbytes

    def ask_copy(self, seq: int, src: int, width: int, height: int, pitch: int) -> None:
        """Asks the holding kernel, as the shim does (gate.c), for rows of device memory
        into staging: the mailbox's fields, then its number, then GATE_COPY."""
        ctypes.memmove(self.host + MAIL_AT + 16,
                       MAIL.pack(0, 0, src, self.staging_dev, width, height, pitch)[16:], 40)
        ctypes.c_uint64.from_address(self.host + MAIL_AT).value = seq
        self.set_word(0, Gate.COPY)

    def copied(self, seq: int, seconds: float) -> bool:
        """Whether the kernel says copy `seq` is made (the mailbox's `done`), within seconds."""
        end = time.monotonic() + seconds
        while self.word(MAIL_AT + 8, "<Q") != seq:
            if time.monotonic() > end:
                return False
            time.sleep(0.0005)
        return True

    def staged(self, nbytes: int) -> np.ndarray:
        return np.frombuffer((ctypes.c_char * nbytes).from_address(self.staging),
                             np.uint8).copy()

    def hold_words(self) -> list[int]:
        words = np.zeros(2, np.uint64)
        self.ok(self.cu.cuMemcpyDtoH(words.ctypes.data, int(self.scratch) + HOLD_WORDS, 16))
        return words.tolist()

    def ready(self, event) -> bool:
        rc = self.cu.cuEventQuery(event)[0]
        assert rc in (self.cu.CUresult.CUDA_SUCCESS, self.cu.CUresult.CUDA_ERROR_NOT_READY), rc
        return rc == self.cu.CUresult.CUDA_SUCCESS

    def wait(self, event, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.ready(event):
                return True
            time.sleep(0.01)
        return self.ready(event)


@pytest.fixture(scope="module")
def kernel() -> Kernel:
    return Kernel()


def nan_at(index: int) -> np.ndarray:
    values = np.ones(1000, np.float32)
    values[index] = np.nan
    return values


def test_a_new_nan_holds_the_stream_until_the_gate_opens(kernel):
    event = kernel.scan(nan_at(321), before_found=0)
    assert not kernel.wait(event, 0.5)                 # held
    assert kernel.word(0) == Gate.HELD
    assert kernel.word(128 + 16, "<Q") == 7            # the result is in, before the hold
    assert kernel.word(128, "<Q") == 1 and ~kernel.word(128 + 8, "<Q") & (2**64 - 1) == 321
    kernel.set_word(0, Gate.SERVED)
    assert kernel.wait(event, 2.0)
    assert kernel.word(0) == Gate.SERVED
    assert kernel.hold_words() == [0, 0]


def test_nothing_found_or_found_before_holds_nothing(kernel):
    event = kernel.scan(np.ones(1000, np.float32), before_found=0)
    assert kernel.wait(event, 2.0)
    assert kernel.word(0) == Gate.ARMED and kernel.word(128, "<Q") == 0
    event = kernel.scan(nan_at(5), before_found=1)
    assert kernel.wait(event, 2.0)
    assert kernel.word(0) == Gate.ARMED and kernel.word(128, "<Q") == 1


def test_the_hold_words_are_zeroed_after_each_launch(kernel):
    """A launch that found nothing leaves the scratch words as it found them: the next
    launch in that slot holds only for its own findings."""
    event = kernel.scan(np.ones(1000, np.float32), before_found=0)
    assert kernel.wait(event, 2.0)
    assert kernel.hold_words() == [0, 0]


def test_a_hold_being_served_outlasts_the_wait_for_service(kernel):
    """Once the shim marks the gate GATE_SERVING, the kernel keeps the stream held past
    TOOL_HOLD_NS, until the shim opens it."""
    event = kernel.scan(nan_at(9), before_found=0)
    assert not kernel.wait(event, 0.3)
    kernel.set_word(0, Gate.SERVING)
    assert not kernel.wait(event, hold_ns() / 1e9 + 1)
    assert kernel.word(0) == Gate.SERVING
    kernel.set_word(0, Gate.SERVED)
    assert kernel.wait(event, 2.0)


def test_a_hold_nobody_opens_ends_by_itself(kernel):
    start = time.monotonic()
    event = kernel.scan(nan_at(0), before_found=None)
    assert kernel.wait(event, hold_ns() / 1e9 + 5)
    waited = time.monotonic() - start
    assert kernel.word(0) == Gate.RELEASED
    assert hold_ns() / 1e9 - 0.5 <= waited <= hold_ns() / 1e9 + 5
    # The word of hold scratch is zeroed again: the next hold works the same way.
    event = kernel.scan(nan_at(1), before_found=0)
    assert not kernel.wait(event, 0.3)
    kernel.set_word(0, Gate.SERVED)
    assert kernel.wait(event, 2.0)


def test_a_scan_made_ahead_neither_holds_nor_counts(kernel):
    """A launch of the kernel with the held launch's scan and one made ahead for the next
    launch: NaN found ahead holds nothing; the held scan's NaN holds until the gate opens,
    both results are in by then, and the hold's words are zeroed after."""
    event = kernel.scan(np.ones(1000, np.float32), before_found=0, ahead=nan_at(17))
    assert kernel.wait(event, 2.0)
    assert kernel.word(0) == Gate.ARMED
    assert kernel.word(192 + 16, "<Q") == 8 and kernel.word(192, "<Q") == 1
    assert ~kernel.word(192 + 8, "<Q") & (2**64 - 1) == 17
    assert kernel.hold_words() == [0, 0]
    event = kernel.scan(nan_at(40), before_found=0, ahead=nan_at(3))
    assert not kernel.wait(event, 0.5)                 # held by the launch's own scan
    assert kernel.word(0) == Gate.HELD
    assert kernel.word(128 + 16, "<Q") == 7 and kernel.word(192 + 16, "<Q") == 8
    kernel.set_word(0, Gate.SERVED)
    assert kernel.wait(event, 2.0)
    assert kernel.hold_words() == [0, 0]


def test_a_held_stream_makes_the_copies_its_mailbox_asks_for(kernel):
    """Held and being served, the kernel makes each copy the mailbox asks for: 16 bytes at
    a time, 4, or bytes (an odd address), one row or rows at a pitch; then says so in
    `done` and holds on until the gate opens."""
    cu = kernel.cu
    data = np.random.default_rng(7).integers(0, 256, 1 << 20, dtype=np.uint8)
    kernel.ok(cu.cuMemcpyHtoD(kernel.big, data.ctypes.data, data.nbytes))
    event = kernel.scan(nan_at(77), before_found=0)
    assert not kernel.wait(event, 0.3)
    kernel.set_word(0, Gate.SERVING)
    cases = [(0, 4096, 1, 4096), (4, 1000, 1, 1000), (3, 1001, 1, 1001),
             (32, 512, 40, 4096), (8, 100, 30, 1028), (1, 77, 9, 513), (0, 1 << 20, 1, 1 << 20)]
    for seq, (at, width, height, pitch) in enumerate(cases, 1):
        kernel.ask_copy(seq, int(kernel.big) + at, width, height, pitch)
        assert kernel.copied(seq, 10.0), (at, width, height, pitch)
        want = np.concatenate([data[at + r * pitch:at + r * pitch + width]
                               for r in range(height)])
        assert np.array_equal(kernel.staged(width * height), want), (at, width, height, pitch)
        assert kernel.word(0) == Gate.COPY
        kernel.set_word(0, Gate.SERVING)
    assert not kernel.wait(event, 0.2)                 # still held
    kernel.set_word(0, Gate.SERVED)
    assert kernel.wait(event, 2.0)


def test_a_big_copy_through_the_mailbox_and_its_rate(kernel, capsys):
    """64 MiB, as the serve of a big buffer asks for it: made within the shim's bound
    (gate.c's MAIL_WAIT_MS and a millisecond per 256 KiB), its rate printed."""
    cu = kernel.cu
    kernel.ok(cu.cuMemsetD32(kernel.big, 0x5A5A1234, STAGING // 4))
    event = kernel.scan(nan_at(5), before_found=0)
    assert not kernel.wait(event, 0.3)
    kernel.set_word(0, Gate.SERVING)
    start = time.monotonic()
    kernel.ask_copy(100, int(kernel.big), STAGING, 1, STAGING)
    assert kernel.copied(100, 2.0 + STAGING / (256 << 10) / 1000)
    seconds = time.monotonic() - start
    got = np.frombuffer((ctypes.c_char * STAGING).from_address(kernel.staging), np.uint32)
    assert (got == 0x5A5A1234).all()
    kernel.set_word(0, Gate.SERVED)
    assert kernel.wait(event, 2.0)
    with capsys.disabled():
        print(f"\nmailbox copy: 64 MiB in {seconds * 1e3:.1f} ms "
              f"({STAGING / seconds / 1e9:.1f} GB/s, one block)")


def test_a_copy_the_shim_stopped_waiting_for_lets_the_stream_go(kernel):
    """The shim gives a copy up by opening the gate (GATE_RELEASED): the kernel stops at its
    next chunk, or finishes, and leaves; nothing holds the stream after."""
    event = kernel.scan(nan_at(6), before_found=0)
    assert not kernel.wait(event, 0.3)
    kernel.set_word(0, Gate.SERVING)
    kernel.ask_copy(200, int(kernel.big), STAGING, 1, STAGING)
    kernel.set_word(0, Gate.RELEASED)
    assert kernel.wait(event, 5.0)
    assert kernel.word(0) == Gate.RELEASED
