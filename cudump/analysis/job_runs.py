"""A job directory (`cudump --job`) read as its node runs, for the offline commands: each
takes a job where it takes a run.

- `node_runs(JOB, NAME)`: the job's node runs (JOB/nodes/NODE, rundir.job), or the one
  --node NAME names;
- `open_run(PATH, NAME)`: a run directory as Run.open reads it, or a job's node runs as
  one Run: the records of every node, each Snapshot knowing its node and its own run
  directory (so its files, and its job's blobs, are found), processes numbered on across
  the nodes in the nodes' order. Comparing two jobs (diff) is then comparing two runs:
  where the records have ranks, they align per (rank, kernel, occurrence), so the ranks of
  one node meet the same ranks wherever they ran in the other job; without ranks,
  processes pair in order (the nodes' by name, then each node's in the order they came).
"""

from __future__ import annotations

from pathlib import Path

from cudump.errors import SnapshotError, UsageError
from cudump.rundir import reading
from cudump.rundir.job import JobNode, is_job, job_nodes
from cudump.rundir.layout import MANIFEST_FILE
from cudump.rundir.runs import Run, Snapshot


def node_runs(job: Path, node: str | None = None) -> list[JobNode]:
    """The job's node runs (those named `node`: --node NAME); SnapshotError for a job
    without any, UsageError for a --node the job has not."""
    nodes = job_nodes(job)
    if not nodes:
        raise SnapshotError(f"{reading.shown(job)} is a job directory with no node's run "
                            "yet (nodes/NODE/)")
    if node is None:
        return nodes
    chosen = [n for n in nodes if n.name == node]
    if not chosen:
        names = ", ".join(n.name for n in nodes[:20]) + (", ..." if len(nodes) > 20 else "")
        raise UsageError(f"--node {node}: {reading.shown(job)} has no such node (it has "
                         f"{names})")
    return chosen


def one_run(path: Path, node: str | None, command: str) -> Path:
    """The run directory a command reading one run reads: PATH itself, or the node of job
    PATH that --node names (a job of one node: that node)."""
    if not is_job(path):
        if node is not None:
            raise UsageError(f"--node {node}: {reading.shown(path)} is a run, not a job "
                             "directory")
        return path
    nodes = node_runs(path, node)
    if len(nodes) > 1:
        raise UsageError(f"{reading.shown(path)} is a job of {len(nodes)} nodes: `cudump "
                         f"{command}` reads one of them; give --node NAME")
    return nodes[0].run


def open_run(path: Path, node: str | None = None) -> Run:
    """A run, or a job's node runs as one Run (SnapshotError where none of them holds
    snapshots)."""
    if not is_job(path):
        if node is not None:
            raise UsageError(f"--node {node}: {reading.shown(path)} is a run, not a job "
                             "directory")
        return Run.open(path)
    snapshots: list[Snapshot] = []
    processes = 0
    kept = [n for n in node_runs(path, node) if reading.present(n.run / MANIFEST_FILE)]
    if not kept:
        raise SnapshotError(f"{reading.shown(path)}: no node of the job holds snapshots (no "
                            f"{MANIFEST_FILE}); `cudump stats {reading.shown(path)}` shows "
                            "its kernels")
    for job_node in kept:
        run = Run.open(job_node.run)
        for snap in run.snapshots:
            snap.job_node = job_node.name
            snap.process += processes
        processes += len(run.processes)
        snapshots.extend(run.snapshots)
    return Run(path, snapshots)


def has_snapshots(path: Path, node: str | None = None) -> bool:
    """Whether the run, or some node run of the job, holds a manifest."""
    if not is_job(path):
        return reading.present(path / MANIFEST_FILE)
    return any(reading.present(n.run / MANIFEST_FILE) for n in node_runs(path, node))
