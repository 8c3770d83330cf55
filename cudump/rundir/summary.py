"""The end-of-run summary: printed as one line and written to summary.json."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cudump.rundir import files as runfiles
from cudump.rundir.injections import InjectionRecord
from cudump.rundir.layout import SUMMARY_FILE


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


@dataclass
class RunSummary:
    processes: int = 0
    pids: list[int] = field(default_factory=list)
    launches: int = 0              # kernel launches that ran (not recorded into a graph)
    captured_launches: int = 0     # launches recorded during stream capture
    graph_launches: int = 0
    kernels: Counter[str] = field(default_factory=Counter)  # demangled name -> launches
    graph_kernel_launches: int = 0  # kernel-node runs of graph launches (in `kernels` too)
    graph_kernels: Counter[str] = field(default_factory=Counter)  # of which from graphs
    allocations: int = 0           # device allocations made
    peak_bytes: int = 0            # most device memory live at once (all processes)
    snapshots: int = 0
    snapshot_errors: int = 0
    snapshot_bytes: int = 0
    digests: int = 0               # buffers digested on the GPU (format: digest)
    nan_producers: int = 0         # buffers a launch left NaN/Inf in (--check-nan)
    first_nan_rank: int | None = None  # the rank whose launch did so first (where known)
    ranks: dict[int, int] = field(default_factory=dict)   # pid -> rank, where known
    repeated_launches: int = 0     # launches the shim planned itself (a repeated plan)
    planned_launches: int = 0      # launches the controller was asked about (a round trip)
    replay_captures: int = 0       # launches captured for replay (captures.jsonl)
    trace_dropped: int = 0         # trace events the ring had no room for
    injections: list[InjectionRecord] = field(default_factory=list)   # --inject
    exit_status: int = 0

    def line(self, run_dir: Path | None = None) -> str:
        """The summary line; with `run_dir`, it ends naming the run directory."""
        procs = f"{self.processes} process" + ("" if self.processes == 1 else "es")
        graphs = plural(self.graph_launches, "graph launch", "graph launches")
        if self.graph_kernel_launches:
            graphs += f" running {plural(self.graph_kernel_launches, 'kernel')}"
        text = (
            f"cudump: {procs}, {plural(self.launches, 'launch', 'launches')} "
            f"({graphs}, {self.captured_launches} captured), "
            f"{plural(len(self.kernels), 'kernel')}, "
            f"{plural(self.allocations, 'allocation')} (peak {human_bytes(self.peak_bytes)})"
        )
        if self.snapshots or self.snapshot_errors:
            text += (
                f", {plural(self.snapshots, 'snapshot')} ({human_bytes(self.snapshot_bytes)}"
                + (f", {self.snapshot_errors} failed" if self.snapshot_errors else "")
                + ")"
            )
        if self.digests:
            text += f", {plural(self.digests, 'digest')}"
        if self.replay_captures:
            text += (f", {plural(self.replay_captures, 'launch', 'launches')} captured for "
                     "replay")
        if self.nan_producers:
            text += f", {plural(self.nan_producers, 'buffer')} turned NaN/Inf"
            if self.first_nan_rank is not None:
                text += f" (first on rank {self.first_nan_rank})"
        if self.injections:
            made = sum(1 for r in self.injections if r.status in ("written", "failed"))
            asked = plural(len(self.injections), "launch", "launches")
            text += f", inputs injected at {made} of {asked}"
        if self.trace_dropped:
            text += (f", {plural(self.trace_dropped, 'trace event')} dropped (the controller "
                     "fell behind)")
        if run_dir is not None:
            text += f"; run: {run_dir}"
        return text

    def write(self, run_dir: Path) -> None:
        data = asdict(self)
        # Written only where processes have ranks (the file stays as it was without).
        if self.first_nan_rank is None:
            del data["first_nan_rank"]
        if not self.injections:
            del data["injections"]     # written only by runs with --inject
        if self.ranks:
            data["ranks"] = {str(pid): rank for pid, rank in sorted(self.ranks.items())}
        else:
            del data["ranks"]
        data["kernels"] = dict(sorted(self.kernels.items(), key=lambda kv: (-kv[1], kv[0])))
        data["graph_kernels"] = dict(sorted(self.graph_kernels.items(),
                                            key=lambda kv: (-kv[1], kv[0])))
        text = (json.dumps(data, indent=2) + "\n").encode("utf-8")
        # Whole, and never through a symlink planted under its name (runfiles).
        runfiles.write_whole(run_dir / SUMMARY_FILE, lambda f: f.write(text))
