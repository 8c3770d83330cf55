"""The wire protocol between libcudump.so and the controller: the one definition on the Python side.

It mirrors shim/protocol.h field for field; tests/test_protocol.py compiles
that header and checks every constant, size and offset here against it.
Messages are a 16-byte header (size, kind, flags, tag) and a payload; every
struct is little endian with explicit padding.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Any

VERSION = 22
MAGIC = 0x50445543

MAX_MESSAGE = 1 << 20
MAX_REPLY = 64 << 10
MAX_COPIES = 512
MAX_FRAMES = 64
MAX_PARAMS = 256
CONTROL_SIZE = 4096
STAGING_ALIGN = 256
BEHIND_ALIGN = 2 << 20      # the write-behind area starts at a multiple of this
BEHIND_SEGMENT = 1 << 30    # and is prepared and pinned this much at a time
TOKEN_SIZE = 32
RING_SLOT_SIZE = 136
TOOL_RESULT = 32          # staging bytes a CopyFlag.TOOL result takes
MAX_REPEAT = 512          # copies in a plan the shim may repeat (PlanFlag.REPEAT)
REPEAT_WAYS = 256         # repeated plans the shim keeps per function, at most
MAX_KEYS = 512            # byte ranges a repeated plan is kept by
RESULT_SLOT_SIZE = 16592
IMAGE_CHUNK = 512 << 10    # image bytes in one Kind.IMAGE message
TOOL_MODE_SHIFT = 8
TOOL_SUM_SHIFT = 16         # a digest's sum of |x|: its element format (a scan mode)
MAX_COUNTERS = 64          # rules whose matching launches the shim counts
MAX_SELECTORS = 8          # counted rules one function's launches count for
MAX_FUNCS = 65536          # functions (ids 1 to this) the launch counts count
COUNTS_ALIGN = 4096        # the launch counts start at a multiple of this
NO_LIMIT = (1 << 64) - 1   # proto_selector.count of a rule without `count`
MAX_TMAPS = 64             # tensor maps one Kind.BEGIN describes
TMAP_BYTES = 128           # bytes of a CUtensorMap
TMAP_STEP = 8              # the parameter bytes are searched for maps every this many
TMAP_RANK = 5              # dimensions a tensor map has at most
FLIGHT_PARAM_BYTES = 256   # parameter bytes a flight ring slot keeps
FLIGHT_SLOT_SIZE = 384     # bytes of one flight ring slot
MAX_FLIGHT = 16384         # slots of the flight ring, at most
HOST_SLOT_SIZE = 128       # bytes of one host-write ring slot
MAX_SCOPE_NAME = 512       # bytes of a scope's name, at most (the shim cuts longer ones)


class Kind(IntEnum):
    HELLO = 1
    FUNC = 2
    ASK = 3
    LAUNCH = 4
    GRAPH = 5
    MEMORY = 6
    STATS = 7
    BEGIN = 8
    END = 9
    STOPPED = 10
    RESULT = 11
    PIECE = 12
    REPEAT = 13
    IMAGE = 14
    NOTICE = 15
    SCOPE = 16
    WATCH = 17
    OUTPUT = 18
    WELCOME = 32
    WANTS = 33
    PLAN = 34
    ACK = 35
    READ = 40
    QUERY = 41
    BACKTRACE = 42
    RESUME = 43
    COUNTS = 44
    GRAPH_NODES = 45
    WRITE = 46


class Want(IntFlag):
    TRACE = 1
    SNAPSHOT = 2
    STOP = 4
    CAPTURE = 8     # send the function's module image before its first MSG_BEGIN
    COUNTED = 16    # SNAPSHOT only for launches a selector of the WANTS reply takes


class Option(IntFlag):
    TRACE_GRAPHS = 1
    CAPTURE = 2     # keep module images for Want.CAPTURE
    NO_AHEAD = 4    # no scans ahead (shim/ahead.h)
    HAND_OFF = 8    # cudump's kernel after a launch made by the launcher thread (shim/handoff.h)
    WATCH_NAN = 16  # stay-on NaN/Inf detection in windows of launches (shim/window.c)


class WatchThen(IntEnum):     # after a window's finding (--watch-nan-then)
    EXACT = 0
    STOP = 1
    GO_ON = 2


class NoticeKind(IntEnum):
    DEVICE_GRAPH = 1    # a graph instantiated for device launch
    WATCH_EXACT = 2     # --watch-nan's batched scan could not run: exact scans instead
    GRAPH_SET = 3       # a node set in an executable graph alone: run unchanged from then on
    GRAPH_LEFT_OUT = 4  # a graph replay's plan had no room for its last kernel nodes' copies


class LaunchFlag(IntFlag):
    CAPTURED = 1
    INTERRUPTED = 2
    GRAPH = 4
    STOP_ONLY = 8
    UNSAFE_GRAPH = 16


class PlanFlag(IntFlag):
    HALT = 1
    REPEAT = 2      # the shim repeats the plan on its own; results come through the ring
    DEFER = 4       # the shim may let the launch go before the copies reach staging
    GATE = 8        # with REPEAT: the GPU holds the stream when a scan finds something new


class FlightFlag(IntFlag):
    """proto_flight_slot.flags (protocol.h says how the flight ring works)."""
    RETURNED = 1    # the launch call returned: `rc` holds its result
    MARKED = 2      # a completion marker was enqueued after it: `done` says
    CAPTURED = 4    # made on a capturing stream: recorded into a graph, no marker
    GRAPH = 8       # a graph launch: `graph` says which


class ResultFlag(IntFlag):
    TAKEN = 1       # reported by Kind.REPEAT instead of the ring
    ASKED = 2       # asked about (Kind.BEGIN), then made with the repeatable plan it got


class Gate(IntEnum):
    """proto_result_slot.gate (protocol.h says how the stream is held)."""
    NONE = 0
    HELD = 1        # the stream waits for the shim: the ring's reader waits too
    ARMED = 2
    SERVED = 3
    RELEASED = 4
    SERVING = 5     # the shim is copying its buffers: still held
    COPY = 6        # the holding kernel is asked to make a copy (the slot's mailbox): held


class Phase(IntEnum):
    BEFORE = 0
    AFTER = 1


class CopyFlag(IntFlag):
    PIECE = 1
    TOOL = 2        # run cudump's kernel over the buffer (mode << TOOL_MODE_SHIFT)


class ToolMode(IntEnum):
    DIGEST = 0
    SCAN_F32 = 1
    SCAN_F64 = 2
    SCAN_F16 = 3
    SCAN_BF16 = 4
    MODES = 5


class ResumeMode(IntEnum):
    CONTINUE = 0
    STEP = 1
    DETACH = 2
    KILL = 3


class MemoryOp(IntEnum):
    ALLOC = 0
    FREE = 1
    MAP = 2
    UNMAP = 3


IMAGE_FORMATS = ("unknown", "cubin", "fatbin", "ptx")   # proto_image.format
TMAP_ENCODINGS = ("tiled", "im2col", "im2col_wide")      # proto_tensormap.encoding
ALLOC_KINDS = ("linear", "pitched", "managed", "async", "vmm", "host", "range")
# proto_host_write.api: the driver call that wrote device memory from the host
HOST_APIS = ("cuMemcpyHtoD", "cuMemcpyHtoDAsync", "cuMemcpy2D", "cuMemcpy2DUnaligned",
             "cuMemcpy2DAsync", "cuMemcpy3D", "cuMemcpy3DAsync", "cuMemsetD8", "cuMemsetD16",
             "cuMemsetD32", "cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async",
             "cuMemsetD2D8", "cuMemsetD2D16", "cuMemsetD2D32", "cuMemsetD2D8Async",
             "cuMemsetD2D16Async", "cuMemsetD2D32Async")
APIS = ("cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchCooperativeKernel",
        "cuLaunchCooperativeKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
        "cuGraphLaunch", "cuGraphLaunch_ptsz")


class ProtocolError(Exception):
    """A message that breaks the protocol; the connection is dropped."""


@dataclass(frozen=True)
class Layout:
    """One C struct of protocol.h: field names and struct codes, in order."""

    name: str
    fields: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_struct", struct.Struct("<" + "".join(c for _, c in self.fields)))
        # Without array fields a struct packs one value per field: the common case, made
        # quick (a plan packs one copy record per buffer).
        scalar = all(not (c[0].isdigit() and c[-1] != "s") for _, c in self.fields)
        defaults = tuple((name, b"" if c.endswith("s") else 0) for name, c in self.fields)
        object.__setattr__(self, "_defaults", defaults if scalar else None)

    @property
    def size(self) -> int:
        return self._struct.size  # type: ignore[attr-defined,no-any-return]

    def offsets(self) -> dict[str, int]:
        """Each field's byte offset. "<" packs without padding, so a field starts where the
        ones before it end: one pass (the result slot has about 2,000 fields, and sizing each
        prefix anew took a third of a second of every run's start)."""
        out: dict[str, int] = {}
        at = 0
        for name, code in self.fields:
            out[name] = at
            at += struct.calcsize("<" + code)
        return out

    def pack_in_order(self, *values: Any) -> bytes:
        """Every field, in the struct's order (a struct without array fields): the quick
        way for a plan's hundreds of copy records."""
        return self._struct.pack(*values)  # type: ignore[attr-defined,no-any-return]

    def pack(self, **values: Any) -> bytes:
        defaults = self._defaults  # type: ignore[attr-defined]
        if defaults is not None:
            return self._struct.pack(  # type: ignore[attr-defined,no-any-return]
                *[values.get(name, default) for name, default in defaults])
        flat: list[Any] = []
        for name, code in self.fields:
            value = values.get(name, b"" if code.endswith("s") else 0)
            if code[0].isdigit() and code[-1] != "s":
                flat.extend(value if value else [0] * int(code[:-1]))
            else:
                flat.append(value)
        return self._struct.pack(*flat)  # type: ignore[attr-defined,no-any-return]

    def unpack(self, data: bytes | memoryview, offset: int = 0) -> dict[str, Any]:
        if len(data) - offset < self.size:
            raise ProtocolError(f"{self.name}: {len(data) - offset} bytes, need {self.size}")
        flat = self._struct.unpack_from(data, offset)  # type: ignore[attr-defined]
        out: dict[str, Any] = {}
        i = 0
        for name, code in self.fields:
            if code[0].isdigit() and code[-1] != "s":
                n = int(code[:-1])
                out[name] = tuple(flat[i:i + n])
                i += n
            else:
                out[name] = flat[i]
                i += 1
        return out


def _layout(name: str, *fields: tuple[str, str]) -> Layout:
    return Layout(name, tuple(fields))


HEADER = _layout("proto_header", ("size", "I"), ("kind", "H"), ("flags", "H"), ("tag", "Q"))
HELLO = _layout("proto_hello", ("magic", "I"), ("version", "I"), ("pid", "i"), ("ppid", "i"),
                ("token", f"{TOKEN_SIZE}s"))
WELCOME = _layout("proto_welcome", ("version", "I"), ("options", "I"), ("staging_size", "Q"),
                  ("watch_window", "I"), ("watch_then", "I"))
CONTROL = _layout("proto_control", ("magic", "I"), ("version", "I"), ("generation", "I"),
                  ("hold", "I"), ("interrupt", "I"), ("ring_slots", "I"),
                  ("results_slots", "I"), ("scratch_mib", "I"), ("flight_slots", "I"),
                  ("first_error", "i"), ("host_slots", "I"), ("behind_mib", "I"),
                  ("pad0", "16s"),
                  ("ring_head", "Q"), ("pad1", "56s"), ("ring_tail", "Q"), ("pad2", "56s"),
                  ("ring_dropped", "Q"), ("pad3", "56s"), ("results_head", "Q"),
                  ("pad4", "56s"), ("results_tail", "Q"), ("pad5", "56s"),
                  *[(f"rule_counts[{i}]", "Q") for i in range(MAX_COUNTERS)],
                  ("flight_head", "Q"), ("pad6", "56s"), ("host_head", "Q"),
                  ("pad7", "56s"), ("host_tail", "Q"), ("pad8", "56s"),
                  ("host_dropped", "Q"), ("pad9", "56s"), ("ahead_used", "Q"),
                  ("ahead_void", "Q"), ("handed_off", "Q"), ("handed_back", "Q"),
                  ("handoff_trials", "Q"), ("handoff_won", "Q"), ("tools_waiting", "Q"),
                  ("tool_launches", "Q"), ("behind_done", "Q"),
                  ("behind_ready", "Q"), ("graph_watched", "Q"),
                  ("graph_instrumented", "Q"), ("pad11", "32s"), ("behind_sent", "Q"),
                  ("pad12", "56s"))
PARAM = _layout("proto_param", ("offset", "I"), ("size", "I"))
FUNC = _layout("proto_func", ("id", "I"), ("nparams", "i"), ("handle", "Q"))
ASK = _layout("proto_ask", ("id", "I"), ("reserved", "I"))
SELECTOR = _layout("proto_selector", ("counter", "I"), ("every", "I"), ("skip", "Q"),
                   ("count", "Q"))
WANTS = _layout("proto_wants", ("wants", "I"), ("generation", "I"), ("nselectors", "I"),
                ("reserved", "I"),
                *[(f"sel[{i}].{name}", code) for i in range(MAX_SELECTORS)
                  for name, code in SELECTOR.fields])
COUNTED = _layout("proto_counted", ("counter", "I"), ("reserved", "I"), ("n", "Q"))


@dataclass(frozen=True)
class Selector:
    """A counted rule, as proto_selector gives it to the shim."""

    counter: int
    every: int
    skip: int
    count: int      # NO_LIMIT: no limit


def wants_payload(wants: int, generation: int, selectors: Sequence[Selector] = ()) -> bytes:
    """MSG_WANTS: what is wanted of a function, and its counted rules."""
    fields: dict[str, Any] = {"wants": wants, "generation": generation,
                              "nselectors": len(selectors)}
    for i, s in enumerate(selectors[:MAX_SELECTORS]):
        fields.update({f"sel[{i}].counter": s.counter, f"sel[{i}].every": s.every,
                       f"sel[{i}].skip": s.skip, f"sel[{i}].count": s.count})
    return WANTS.pack(**fields)
LAUNCH = _layout("proto_launch", ("seq", "Q"), ("occurrence", "Q"), ("stream", "Q"),
                 ("tid", "Q"), ("id", "I"), ("device", "i"), ("grid", "3I"), ("block", "3I"),
                 ("smem", "I"), ("api", "I"), ("flags", "I"), ("rc", "i"), ("nparams", "i"),
                 ("nptrs", "I"), ("graph", "Q"), ("replay", "I"), ("node", "I"),
                 ("ntmaps", "I"), ("scope", "I"), ("step", "I"), ("source", "I"))
# The event fills a ring slot exactly (no padding after it).
RING_SLOT = _layout("proto_ring_slot", ("ready", "Q"), ("reserved", "Q"),
                    *[(f"event.{name}", code) for name, code in LAUNCH.fields])
FLIGHT_SLOT = _layout("proto_flight_slot", ("ready", "Q"), ("done", "Q"), ("seq", "Q"),
                      ("stream", "Q"), ("tid", "Q"), ("graph", "Q"), ("id", "I"), ("api", "I"),
                      ("grid", "3I"), ("block", "3I"), ("smem", "I"), ("flags", "I"),
                      ("rc", "i"), ("nbytes", "I"), ("kept", "I"), ("scope", "I"),
                      ("step", "I"), ("source", "I"), ("pad", "16s"),
                      ("params", f"{FLIGHT_PARAM_BYTES}s"))
HOST_WRITE = _layout("proto_host_write", ("ready", "Q"), ("launches", "Q"), ("dst", "Q"),
                     ("width", "Q"), ("height", "Q"), ("pitch", "Q"), ("depth", "Q"),
                     ("slice", "Q"), ("stream", "Q"), ("tid", "Q"), ("value", "I"),
                     ("elem", "I"), ("api", "I"), ("reserved", "I"), ("pad", "32s"))
POINTER = _layout("proto_pointer", ("arg", "I"), ("offset", "I"), ("base", "Q"), ("size", "Q"),
                  ("pitch", "Q"), ("width", "Q"), ("height", "Q"), ("elem", "I"),
                  ("kind", "I"))
TENSORMAP = _layout("proto_tensormap", ("arg", "I"), ("offset", "I"), ("address", "Q"),
                    ("encoding", "I"), ("dtype", "I"), ("rank", "I"), ("interleave", "I"),
                    ("dims", f"{TMAP_RANK}Q"), ("strides", f"{TMAP_RANK - 1}Q"),
                    ("base", "Q"), ("size", "Q"), ("kind", "I"), ("reserved", "I"))
MEMORY = _layout("proto_memory", ("op", "I"), ("kind", "I"), ("base", "Q"), ("size", "Q"),
                 ("pitch", "Q"), ("width", "Q"), ("height", "Q"), ("elem", "I"),
                 ("device", "i"))
GRAPH = _layout("proto_graph", ("seq", "Q"), ("exec", "Q"), ("stream", "Q"), ("api", "I"),
                ("device", "i"))
SCOPE = _layout("proto_scope", ("id", "I"), ("parent", "I"), ("kind", "I"), ("length", "I"))
OUTPUT = _layout("proto_output", ("launches", "Q"), ("address", "Q"), ("bytes", "Q"),
                 ("scope", "I"), ("step", "I"), ("index", "I"), ("length", "I"))
WATCH = _layout("proto_watch", ("first", "Q"), ("last", "Q"), ("nfound", "I"), ("window", "I"),
                ("exact", "I"), ("graph", "I"), ("replays", "I"), ("reserved", "I"))
WATCH_FOUND = _layout("proto_watch_found", ("address", "Q"), ("width", "Q"), ("height", "Q"),
                      ("pitch", "Q"), ("count", "Q"), ("first_index", "Q"),
                      ("first_touch", "Q"), ("last_touch", "Q"), ("touches", "I"),
                      ("first_node", "I"), ("host", "I"), ("func", "I"), ("mode", "I"),
                      ("node", "I"))
NOTICE = _layout("proto_notice", ("kind", "I"), ("detail", "I"), ("graph", "Q"))
GRAPH_NODE = _layout("proto_graph_node", ("node", "I"), ("id", "I"), ("grid", "3I"),
                     ("block", "3I"), ("smem", "I"), ("child", "I"))
COUNT = _layout("proto_count", ("id", "I"), ("reserved", "I"), ("launches", "Q"),
                ("graph_launches", "Q"))
FUNC_COUNT = _layout("proto_func_count", ("launches", "Q"), ("graph_launches", "Q"))
# After the staging area, in shared memory: MSG_STATS's counts as they stand (shared.py).
COUNTS = _layout("proto_counts", ("captured", "Q"), ("graph_launches", "Q"),
                 ("funcs", f"{2 * MAX_FUNCS}Q"))
STATS = _layout("proto_stats", ("seq", "Q"), ("captured", "Q"), ("graph_launches", "Q"),
                ("nfuncs", "I"), ("reserved", "I"))
COPY = _layout("proto_copy", ("phase", "I"), ("flags", "I"), ("src", "Q"), ("width", "Q"),
               ("height", "Q"), ("pitch", "Q"), ("offset", "Q"))
PLAN = _layout("proto_plan", ("flags", "I"), ("ncopies", "I"), ("id", "I"), ("nkeys", "I"))
KEY = _layout("proto_key", ("offset", "I"), ("size", "I"))
TOOL_OUT = _layout("proto_tool_result", ("words", "2Q"), ("done", "Q"), ("rc", "i"),
                   ("reserved", "I"))
GATE_MAIL = _layout("proto_gate_mail", ("seq", "Q"), ("done", "Q"), ("src", "Q"), ("dst", "Q"),
                    ("width", "Q"), ("height", "Q"), ("pitch", "Q"))
RESULT_SLOT = _layout("proto_result_slot", ("ready", "Q"), ("plan", "I"), ("ncopies", "I"),
                      ("launch_rc", "i"), ("flags", "I"), ("gate", "I"), ("reserved", "I"),
                      *[(f"event.{name}", code) for name, code in LAUNCH.fields],
                      *[(f"results[{i}].{name}", code) for i in range(MAX_REPEAT)
                        for name, code in TOOL_OUT.fields],
                      *[(f"mail.{name}", code) for name, code in GATE_MAIL.fields])
IMAGE = _layout("proto_image", ("module", "Q"), ("size", "Q"), ("offset", "Q"), ("id", "I"),
                ("format", "I"))
PIECE = _layout("proto_piece", ("index", "I"), ("rc", "i"))
END = _layout("proto_end", ("launch_rc", "i"), ("sync_rc", "i"), ("ncopies", "I"),
              ("reserved", "I"), ("behind", "Q"))
STOPPED = _layout("proto_stopped", ("phase", "I"), ("sync_rc", "i"), ("launch_rc", "i"),
                  ("reserved", "I"))
READ = _layout("proto_read", ("src", "Q"), ("width", "Q"), ("height", "Q"), ("pitch", "Q"),
               ("offset", "Q"))
QUERY = _layout("proto_query", ("address", "Q"))
WRITE = _layout("proto_write", ("dst", "Q"), ("size", "Q"), ("offset", "Q"))
RESUME = _layout("proto_resume", ("mode", "I"), ("reserved", "I"))
RESULT = _layout("proto_result", ("rc", "i"), ("reserved", "I"), ("nbytes", "Q"))

LAYOUTS = (HEADER, HELLO, WELCOME, CONTROL, PARAM, FUNC, ASK, SELECTOR, WANTS, COUNTED, LAUNCH,
           RING_SLOT, FLIGHT_SLOT, HOST_WRITE, POINTER, TENSORMAP, MEMORY, GRAPH, NOTICE, SCOPE,
           OUTPUT, WATCH, WATCH_FOUND,
           GRAPH_NODE, COUNT, FUNC_COUNT, COUNTS, STATS, COPY, PLAN, KEY, TOOL_OUT, GATE_MAIL,
           RESULT_SLOT,
           IMAGE, PIECE, END, STOPPED, READ, QUERY, WRITE, RESUME, RESULT)

# Byte offsets of the control page's fields, for the controller's stores.
CONTROL_OFFSETS = CONTROL.offsets()


def behind_places(payload: bytes, ncopies: int) -> list[int]:
    """Where each copy of an END with `behind` lies in the write-behind area: the uint64s
    after its codes."""
    at = END.size + 4 * ncopies
    if len(payload) < at + 8 * ncopies:
        raise ProtocolError("end message without the places of its copies")
    return list(struct.unpack_from(f"<{ncopies}Q", payload, at))


# ---------------------------------------------------------------- framing


def encode(kind: Kind, payload: bytes = b"", tag: int = 0) -> bytes:
    size = HEADER.size + len(payload)
    if size > MAX_MESSAGE:
        raise ProtocolError(f"message of {size} bytes exceeds {MAX_MESSAGE}")
    return HEADER.pack(size=size, kind=int(kind), flags=0, tag=tag) + payload


@dataclass
class Message:
    kind: int
    tag: int
    payload: bytes


def api_name(code: int) -> str:
    return APIS[code] if 0 <= code < len(APIS) else f"api{code}"


def host_api_name(code: int) -> str:
    return HOST_APIS[code] if 0 <= code < len(HOST_APIS) else f"api{code}"


def tmap_encoding_name(code: int) -> str:
    return TMAP_ENCODINGS[code] if 0 <= code < len(TMAP_ENCODINGS) else f"encoding{code}"


def alloc_kind_name(code: int) -> str:
    return ALLOC_KINDS[code] if 0 <= code < len(ALLOC_KINDS) else f"kind{code}"
