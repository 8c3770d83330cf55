"""What a launch stopped at a breakpoint offers the prompt.

The debugger (controller/remote_stop.py) implements StoppedLaunch over the shim's stop loop;
the prompt's commands (cudump/prompt/) use nothing else, so they can be tested
against an in-memory stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from cudump.errors import CudumpError
from cudump.kernels.args import ArgValue
from cudump.kernels.geometry import Allocation
from cudump.kernels.signature import Signature
from cudump.kernels.tensormaps import TensorMap
from cudump.launches.scopes import NOWHERE, Where

Phase = Literal["before", "after"]
ResumeMode = Literal["continue", "step", "detach", "kill"]


class TargetError(CudumpError):
    """A request to the stopped process failed (bad address, copy error, process gone)."""


@dataclass(frozen=True)
class Frame:
    """One frame of the launching thread's host call stack."""

    index: int
    address: int
    module: str | None        # path of the shared object or executable
    symbol: str | None        # demangled where it could be, else as the loader gives it
    offset: int | None        # from the symbol (or from the module when there is no symbol)


@dataclass(frozen=True)
class GraphNode:
    """One kernel node of a graph whose launch is held."""

    node: int                 # index in run order
    kernel: str               # demangled
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    child: bool               # inside a child graph


@dataclass
class StopInfo:
    """Where and why the target stopped."""

    pid: int
    tid: int
    kernel: str               # demangled
    mangled: str
    launch: int               # per-process launch sequence number
    occurrence: int           # n-th launch of this kernel in this process
    device: int               # CUDA device ordinal
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    stream: str               # hex, "0x0" for the legacy default stream
    api: str                  # the driver entry point used: "cuLaunchKernel", ...
    phase: Phase              # "before": the kernel has not run; "after": it has finished
    reason: str               # "breakpoint 1", "temporary breakpoint 2", "interrupt", "step"
    breakpoint: int | None
    signature: Signature
    args: list[ArgValue]
    # Allocation behind each pointer-sized word of the parameters the shim
    # resolved: (argument index, byte offset inside it) -> allocation.
    pointers: dict[tuple[int, int], Allocation] = field(default_factory=dict)
    # TMA tensor maps among the parameters: (argument index, byte offset) -> map.
    tensormaps: dict[tuple[int, int], TensorMap] = field(default_factory=dict)
    # A kernel node of a graph launch: which graph, replay and node (None otherwise).
    graph: int | None = None
    replay: int | None = None
    node: int | None = None
    # Where the launch was made in the program's terms: its scopes, step and source line.
    where: Where = NOWHERE

    def allocation_of(self, index: int, offset: int = 0) -> Allocation | None:
        return self.pointers.get((index, offset))


class StoppedLaunch(Protocol):
    """A launch held on its thread; every method is served by that thread in the target.

    Reads are synchronous device-to-host copies made in the launch's context
    while the device is quiescent for it. They raise TargetError with a
    message fit for the user.
    """

    info: StopInfo

    @property
    def max_read(self) -> int:
        """The most bytes one read may return (the staging area's size)."""
        ...

    def read(self, address: int, nbytes: int) -> bytes: ...

    def read2d(self, address: int, width_bytes: int, height: int, pitch: int) -> bytes:
        """`height` rows of `width_bytes` bytes, `pitch` bytes apart, padding dropped."""
        ...

    def write(self, address: int, data: bytes) -> None:
        """Puts `data` (at most max_read bytes) into device memory at `address`: a
        synchronous copy on the launch's stream, as reads are."""
        ...

    def allocation(self, address: int) -> Allocation | None:
        """The allocation containing an address (tracked by the shim, or from the driver)."""
        ...

    def allocations(self) -> list[Allocation]:
        """The process's live device allocations, by base address."""
        ...

    def backtrace(self) -> list[Frame]: ...

    def graph_nodes(self) -> list[GraphNode]:
        """At a graph launch: its kernel nodes, in run order (TargetError otherwise)."""
        ...


@dataclass(frozen=True)
class KernelSeen:
    """A kernel function one process has launched or registered."""

    pid: int
    kernel: str               # demangled
    mangled: str
    launches: int
