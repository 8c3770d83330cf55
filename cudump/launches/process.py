"""What the controller knows of each target process: its functions, allocations and launches.

Decoded from the shim's messages (protocol.py). Shared by the session, the
snapshot planner and the debugger, none of which import each other for it.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cudump.kernels.demangle import demangle
from cudump.kernels.geometry import Allocation
from cudump.kernels.overrides import ArgOverride
from cudump.kernels.tensormaps import TensorMap
from cudump.launches.collectives import CollectiveLog, collective_op
from cudump.launches.heard import Heard, NoSocket
from cudump.launches.scopes import (
    NOWHERE,
    ScopeKind,
    ScopeNode,
    ScopeTable,
    Where,
    compiler_annotation,
)
from cudump.wire import protocol as p
from cudump.wire.shm import FlightRing, LaunchCounts


@dataclass
class FuncInfo:
    """A kernel function as one process knows it."""

    id: int
    handle: int
    mangled: str
    demangled: str
    params: list[tuple[int, int]] | None  # (offset, size) per parameter, from the driver
    wants: int = 0
    launches: int = 0
    # What a compiled program's own metadata says the kernel does (an XLA fusion's op_name
    # and source line, --layers): the where of its launches that no scope names.
    op: Where | None = None
    collective: str | None = None   # its collective operation (collectives.py), if one
    # How an argument is read (element type, count), by its index, where the kernel's own
    # parameters are untyped pointers and its compiler said what they hold (an XLA fusion's
    # operands and outputs): every rule's reading of it unless the rule overrides it.
    arg_overrides: dict[int, ArgOverride] = field(default_factory=dict)


@dataclass
class LaunchEvent:
    """One launch as the shim reports it (MSG_LAUNCH or MSG_BEGIN)."""

    seq: int
    occurrence: int
    func_id: int
    device: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    stream: int
    tid: int
    api: str
    flags: int
    rc: int
    graph: int = 0                                         # LAUNCH_GRAPH: graph, replay, node
    replay: int = 0
    node: int = 0
    scope: int = 0                                         # innermost open scope (scopes.py)
    step: int = 0                                          # steps completed + 1; 0: none
    source: int = 0                                        # a ScopeKind.SOURCE node
    raw_args: list[bytes] | None = None                    # MSG_BEGIN: parameter bytes
    pointers: dict[tuple[int, int], Allocation] = field(default_factory=dict)
    # MSG_BEGIN: TMA tensor maps among the parameters, by (argument, byte offset inside it)
    tensormaps: dict[tuple[int, int], TensorMap] = field(default_factory=dict)
    counted: dict[int, int] = field(default_factory=dict)   # MSG_BEGIN: counter -> n-th launch

    @property
    def captured(self) -> bool:
        return bool(self.flags & p.LaunchFlag.CAPTURED)

    @property
    def interrupted(self) -> bool:
        return bool(self.flags & p.LaunchFlag.INTERRUPTED)

    def where(self, proc: ProcessState) -> Where:
        """The launch in the user's terms (its process's scope nodes and collectives; this
        launch's own message may wait a moment for the collectives before it)."""
        in_graph = bool(self.flags & p.LaunchFlag.GRAPH)
        return proc.where(self.func_id, self.scope, self.step, self.source, seq=self.seq,
                          wait=True, graph=self.graph if in_graph else 0,
                          node=self.node if in_graph else 0)

    @functools.cached_property
    def stream_hex(self) -> str:
        # cached: every record of a launch's plan (hundreds for a multi-tensor kernel) has it
        return f"0x{self.stream:x}"


@dataclass
class ProcessState:
    pid: int
    ppid: int
    exe: str
    rank: int | None = None                  # from its environment (controller.ranks)
    funcs: dict[int, FuncInfo] = field(default_factory=dict)
    allocations: dict[int, Allocation] = field(default_factory=dict)  # base -> allocation
    stats: dict[str, Any] | None = None      # MSG_STATS, at its exit
    counted: LaunchCounts | None = None      # the shared launch counts, at the run's end
    flight: FlightRing | None = None         # its flight ring (--flight), at the run's end
    scopes: ScopeTable = field(default_factory=ScopeTable)   # MSG_SCOPE
    collectives: CollectiveLog = field(default_factory=CollectiveLog)
    heard: Heard = field(default_factory=NoSocket)   # its socket read so far (heard.py)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def where(self, func_id: int, scope: int, step: int = 0, source: int = 0,
              seq: int | None = None, wait: bool = False, graph: int = 0,
              node: int = 0) -> Where:
        """A launch's wire numbers in names; a launch no scope names (or only XLA's own
        annotations) takes its kernel's operation (FuncInfo.op), where the program's
        compiler said what it is. With its launch number `seq` (and, for a kernel node of a
        graph launch, its graph and node), the collectives its process launched before it."""
        where = self.scopes.where(scope, step, source) if scope or step or source else NOWHERE
        if not where.layer or compiler_annotation(where.layer):
            func = self.funcs.get(func_id)
            if func is not None and func.op is not None:
                op = func.op
                kept = tuple(s for s in where.scopes if not compiler_annotation(s))
                where = Where(scopes=kept + op.scopes, layer=op.layer, pass_=where.pass_,
                              step=where.step, source=where.source or op.source)
        if seq is not None:
            place = self.collectives.before(seq, wait, graph, node)
            if place is not None:
                where = replace(where, collective=place.count, collective_op=place.op)
        return where

    def add_func(self, func: FuncInfo) -> None:
        """A function the process announced (a collective's counted from now on)."""
        func.collective = collective_op(func.demangled)
        if func.collective is not None:
            self.collectives.announce()
        self.funcs[func.id] = func

    def hear_launches(self, launches: Iterable[tuple[int, int]]) -> None:
        """Launches heard of, as (launch number, function): their collectives counted."""
        funcs = self.funcs
        self.collectives.heard_of(
            (seq, func.collective if (func := funcs.get(fid)) is not None else None)
            for seq, fid in launches)

    def hear_nodes(self, nodes: Iterable[tuple[int, int, int, int]]) -> None:
        """Kernel nodes of graph launches heard of, as (launch number, graph, node,
        function): their collectives counted."""
        funcs = self.funcs
        self.collectives.heard_of_nodes(
            (seq, graph, node, func.collective if (func := funcs.get(fid)) is not None
             else None) for seq, graph, node, fid in nodes)


def pointer_allocation(fields: dict[str, Any]) -> Allocation:
    return Allocation(base=fields["base"], size=fields["size"],
                      kind=p.alloc_kind_name(fields["kind"]), pitch=fields["pitch"],
                      width_bytes=fields["width"], height=fields["height"],
                      elem_size=fields["elem"])


def wire_tensormap(fields: dict[str, Any]) -> TensorMap:
    """A proto_tensormap as the controller keeps it (its rank bounded by the arrays')."""
    rank = max(1, min(int(fields["rank"]), p.TMAP_RANK))
    alloc = None
    if fields["size"]:
        alloc = Allocation(base=fields["base"], size=fields["size"],
                           kind=p.alloc_kind_name(fields["kind"]))
    return TensorMap(arg=fields["arg"], offset=fields["offset"], address=fields["address"],
                     encoding=p.tmap_encoding_name(fields["encoding"]),
                     dtype_code=fields["dtype"], dims=tuple(fields["dims"][:rank]),
                     strides=tuple(fields["strides"][:rank - 1]),
                     interleave=fields["interleave"], alloc=alloc)


def decode_func(payload: bytes) -> FuncInfo:
    head = p.FUNC.unpack(payload)
    n = head["nparams"]
    if n > p.MAX_PARAMS:
        raise p.ProtocolError(f"{n} parameters")
    pos = p.FUNC.size
    params = None
    if n >= 0:
        params = []
        for _ in range(n):
            item = p.PARAM.unpack(payload, pos)
            params.append((item["offset"], item["size"]))
            pos += p.PARAM.size
    mangled = payload[pos:].decode("utf-8", "replace")
    return FuncInfo(id=head["id"], handle=head["handle"], mangled=mangled,
                    demangled=demangle(mangled) if mangled else f"0x{head['handle']:x}",
                    params=params)


def decode_launch(payload: bytes) -> LaunchEvent:
    """MSG_LAUNCH, or MSG_BEGIN with its parameters and pointers."""
    h = p.LAUNCH.unpack(payload)
    event = LaunchEvent(
        seq=h["seq"], occurrence=h["occurrence"], func_id=h["id"], device=h["device"],
        grid=h["grid"], block=h["block"], smem=h["smem"], stream=h["stream"], tid=h["tid"],
        api=p.api_name(h["api"]), flags=h["flags"], rc=h["rc"], graph=h["graph"],
        replay=h["replay"], node=h["node"], scope=h["scope"], step=h["step"],
        source=h["source"])
    nparams, nptrs, ntmaps = h["nparams"], h["nptrs"], h["ntmaps"]
    if nparams > p.MAX_PARAMS or nptrs > p.MAX_PARAMS or ntmaps > p.MAX_TMAPS:
        raise p.ProtocolError(f"{nparams} parameters, {nptrs} pointers, {ntmaps} tensor maps")
    pos = p.LAUNCH.size
    if nparams >= 0:
        sizes = []
        for _ in range(nparams):
            sizes.append(p.PARAM.unpack(payload, pos)["size"])
            pos += p.PARAM.size
        raw: list[bytes] = []
        for size in sizes:
            if pos + size > len(payload):
                raise p.ProtocolError("parameter bytes run past the message")
            raw.append(bytes(payload[pos:pos + size]))
            pos += size
        pos += (8 - sum(sizes) % 8) % 8
        event.raw_args = raw
    for _ in range(nptrs):
        fields = p.POINTER.unpack(payload, pos)
        pos += p.POINTER.size
        event.pointers[(fields["arg"], fields["offset"])] = pointer_allocation(fields)
    for _ in range(ntmaps):
        tmap = wire_tensormap(p.TENSORMAP.unpack(payload, pos))
        pos += p.TENSORMAP.size
        event.tensormaps[(tmap.arg, tmap.offset)] = tmap
    if (len(payload) - pos) % p.COUNTED.size:
        raise p.ProtocolError("a launch's rule counts do not fill the rest of the message")
    while pos < len(payload):
        fields = p.COUNTED.unpack(payload, pos)
        pos += p.COUNTED.size
        event.counted[fields["counter"]] = fields["n"]
    return event


def decode_scope(payload: bytes) -> ScopeNode:
    """MSG_SCOPE: one scope node (a kind this controller does not know is a protocol
    error)."""
    h = p.SCOPE.unpack(payload)
    length = h["length"]
    if length > p.MAX_SCOPE_NAME or p.SCOPE.size + length != len(payload):
        raise p.ProtocolError(f"a scope's name of {length} bytes in {len(payload)}")
    try:
        kind = ScopeKind(h["kind"])
    except ValueError:
        raise p.ProtocolError(f"scope kind {h['kind']}") from None
    name = bytes(payload[p.SCOPE.size:]).decode("utf-8", "replace")
    return ScopeNode(id=h["id"], parent=h["parent"], kind=kind, name=name)


@dataclass(frozen=True)
class DeclaredOutput:
    """MSG_OUTPUT: a tensor a module returned, as the shim sent it (wire values)."""

    launches: int
    address: int
    bytes: int
    scope: int
    step: int
    index: int
    type: str           # "float32[8,64,56,56]"


def decode_output(payload: bytes) -> DeclaredOutput:
    """MSG_OUTPUT's fields and type text."""
    h = p.OUTPUT.unpack(payload)
    length = h["length"]
    if length > p.MAX_SCOPE_NAME or p.OUTPUT.size + length != len(payload):
        raise p.ProtocolError(f"a module output's type of {length} bytes in {len(payload)}")
    text = bytes(payload[p.OUTPUT.size:]).decode("utf-8", "replace")
    return DeclaredOutput(h["launches"], h["address"], h["bytes"], h["scope"], h["step"],
                          h["index"], text)


def process_lives(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether a process is there and not a zombie (dead, waiting to be reaped)."""
    try:
        stat = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    state = stat.rpartition(")")[2].split()[:1]
    return bool(state) and state[0] not in ("Z", "X", "x")


def how_it_ended(pid: int, returncode: int) -> str:
    """`process 4242 exited with status 3`, `process 4242 was killed by SIGKILL`."""
    if returncode >= 0:
        return f"process {pid} exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"process {pid} was killed by {name}"
