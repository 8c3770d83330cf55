"""What the flight recorder says of a run that did not end cleanly: which launch was the last
to complete, which were still in flight, and which one is the likely culprit.

The shim marks a launch done from the GPU, by a stream memory write after it; a launch
whose marker never came is in flight, unless a later launch on the same stream completed
(streams run in order: then it completed too, its marker lost to a slot written over or
never made). On an error that ends the context (an illegal address, a failed launch), the
first launch in flight is the likely culprit: every stream stopped with it, and the launch
that faulted is the oldest one that never completed. Its pointer arguments, with the
allocation each falls in or `outside every allocation`, are what finds a bad pointer.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudump.rundir.flight import FlightLaunch, FlightProcess

PREFIX = "cudump: flight: "
MORE_SHOWN = 5          # other launches in flight named in the report

CUDA_ERRORS = {
    1: "INVALID_VALUE", 2: "OUT_OF_MEMORY", 3: "NOT_INITIALIZED", 4: "DEINITIALIZED",
    100: "NO_DEVICE", 101: "INVALID_DEVICE", 200: "INVALID_IMAGE", 201: "INVALID_CONTEXT",
    209: "NO_BINARY_FOR_GPU", 218: "INVALID_PTX", 222: "UNSUPPORTED_PTX_VERSION",
    400: "INVALID_HANDLE", 401: "ILLEGAL_STATE", 500: "NOT_FOUND", 600: "NOT_READY",
    700: "ILLEGAL_ADDRESS", 701: "LAUNCH_OUT_OF_RESOURCES", 702: "LAUNCH_TIMEOUT",
    703: "LAUNCH_INCOMPATIBLE_TEXTURING", 709: "CONTEXT_IS_DESTROYED", 710: "ASSERT",
    712: "HOST_MEMORY_ALREADY_REGISTERED", 713: "HOST_MEMORY_NOT_REGISTERED",
    714: "HARDWARE_STACK_ERROR", 715: "ILLEGAL_INSTRUCTION", 716: "MISALIGNED_ADDRESS",
    717: "INVALID_ADDRESS_SPACE", 718: "INVALID_PC", 719: "LAUNCH_FAILED",
    720: "COOPERATIVE_LAUNCH_TOO_LARGE", 800: "NOT_PERMITTED", 801: "NOT_SUPPORTED",
    900: "STREAM_CAPTURE_UNSUPPORTED", 901: "STREAM_CAPTURE_INVALIDATED",
    906: "STREAM_CAPTURE_IMPLICIT", 908: "STREAM_CAPTURE_WRONG_THREAD", 909: "TIMEOUT",
    910: "GRAPH_EXEC_UPDATE_FAILURE", 999: "UNKNOWN",
}
# Errors a kernel causes, after which the context is lost: every later call returns them.
STICKY = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719})


def error_name(code: int) -> str:
    name = CUDA_ERRORS.get(code)
    return f"CUDA_ERROR_{name}" if name else f"CUDA error {code}"


def _stream_key(launch: FlightLaunch) -> tuple[str, int]:
    """A stream: the per-thread default stream is one per thread."""
    per_thread = launch.stream == "0x0" and launch.api.endswith("_ptsz")
    return launch.stream, launch.thread if per_thread else 0


def settle(launches: list[FlightLaunch]) -> None:
    """A launch in flight (or without a marker) before a completed launch on its stream
    completed too: streams run in order."""
    done_after: set[tuple[str, int]] = set()
    for launch in sorted(launches, key=lambda x: x.launch, reverse=True):
        key = _stream_key(launch)
        if launch.status == "completed":
            done_after.add(key)
        elif launch.status in ("in flight", "unknown") and key in done_after:
            launch.status = "completed"


@dataclass(frozen=True)
class Outcome:
    """One process's flight record, read."""

    last_completed: FlightLaunch | None
    in_flight: list[FlightLaunch]       # in flight or never returned from the launch call
    failed: list[FlightLaunch]          # whose launch call returned an error
    unknown: int                        # made without a completion marker
    culprit: FlightLaunch | None        # the oldest in flight

    @property
    def named(self) -> FlightLaunch | None:
        """The launch the report is about: the culprit, else the first that failed."""
        return self.culprit or (self.failed[0] if self.failed else None)


def outcome(launches: list[FlightLaunch]) -> Outcome:
    ordered = sorted(launches, key=lambda x: x.launch)
    completed = [x for x in ordered if x.status == "completed"]
    flying = [x for x in ordered if x.status in ("in flight", "launching")]
    return Outcome(last_completed=completed[-1] if completed else None, in_flight=flying,
                   failed=[x for x in ordered if x.status == "failed"],
                   unknown=sum(1 for x in ordered if x.status == "unknown"),
                   culprit=flying[0] if flying else None)


def _where(launch: FlightLaunch) -> str:
    return f"stream {launch.stream}, thread {launch.thread}"


def arg_lines(launch: FlightLaunch) -> list[str]:
    """`  arg0  int* = 0xdead0000  -> outside every allocation`, aligned in columns."""
    if not launch.args:
        if launch.graph is not None:
            return []
        return [PREFIX + ("  (no arguments)" if launch.params_size == 0
                          else "  (arguments not recorded: the kernel's layout is unknown)")]
    name_w = max(len(f"arg{a.index}") for a in launch.args)
    type_w = max(len(a.type or "") for a in launch.args)
    lines = []
    for arg in launch.args:
        line = f"  {f'arg{arg.index}':<{name_w}}  {arg.type or '':<{type_w}} = {arg.value}"
        if arg.allocation is not None:
            line += f"  -> {arg.allocation}"
        lines.append(PREFIX + line.rstrip())
    if launch.params_size > len(launch.params) // 2:
        lines.append(PREFIX + f"  (the first {len(launch.params) // 2} of {launch.params_size} "
                              f"parameter bytes kept: {len(launch.args)} arguments)")
    return lines


def report_lines(proc: FlightProcess, launches: list[FlightLaunch],
                 label: str = "") -> list[str]:
    """The report of one process: what was in flight when the program ended as it did."""
    if not launches:
        return [f"{PREFIX}{label}no launch was recorded"]
    found = outcome(launches)
    last = found.last_completed
    tail = (f"the last to complete was {last.name}" if last is not None
            else "no recorded launch is known to have completed")
    if found.unknown:
        tail += (f" ({found.unknown} launch{'es' if found.unknown != 1 else ''} made without "
                 "a completion marker, whether they completed is unknown)")
    culprit = found.culprit
    if culprit is None:
        lines = [f"{PREFIX}{label}no launch was in flight when the program {proc.ended}; {tail}"]
        if found.failed:
            bad = found.failed[0]
            lines.append(f"{PREFIX}{bad.name} ({_where(bad)}) returned "
                         f"{bad.error or error_name(bad.rc or 0)}; its arguments:")
            lines += arg_lines(bad)
        return lines
    how = "was in flight" if culprit.status == "in flight" else \
        "was being launched (its launch call never returned)"
    lines = [f"{PREFIX}{label}{culprit.name} ({_where(culprit)}) {how} when the program "
             f"{proc.ended}; {tail}"]
    if proc.first_error in STICKY:
        lines.append(f"{PREFIX}the likely culprit: the first launch on stream {culprit.stream} "
                     "that did not complete" + ("; its arguments:" if culprit.graph is None
                                                else " (a graph launch: one of its kernels)"))
    elif culprit.graph is None:
        lines.append(f"{PREFIX}its arguments:")
    lines += arg_lines(culprit)
    others = found.in_flight[1:]
    if others:
        named = ", ".join(f"{x.name} ({_where(x)})" for x in others[:MORE_SHOWN])
        more = f" and {len(others) - MORE_SHOWN} more" if len(others) > MORE_SHOWN else ""
        lines.append(f"{PREFIX}also in flight: {named}{more}")
    return lines
