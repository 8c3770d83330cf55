"""A job directory: the runs of one job's nodes, side by side on shared storage.

Each node of a job of many nodes runs its own cudump (`cudump --job JOB ...`, under srun,
`torchrun --nnodes` or mpirun); each writes an ordinary run directory of its own under
`JOB/nodes/NODE/`, so every node writes only files of its own and no lock is ever held
across the shared file system:

    JOB/
      cudump-job.json            the job's name and format (written once, by whichever node
                                 makes it first; an equal file from a later node is left be)
      nodes/NODE/                one run directory per node (manifest.jsonl, trace.jsonl, ...)
      blobs/                     snapshot bytes stored once under their content hash
      triggers/                  one file per node that failed or found NaN/Inf: every
                                 node's recorder is written when one appears
      index/TABLE/job=J/node=N/rank=R/
                                 the columnar index (Parquet), one dataset per rank

A node claims its folder with mkdir(2), atomic on every file system a job shares (NFS,
Lustre, GPFS): a second cudump of the same node name gets `NODE.2`, `NODE.3`, ... and
never writes into another's folder.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cudump.rundir import reading
from cudump.rundir.layout import RUN_FILES

JOB_FILE = "cudump-job.json"
NODES_DIR = "nodes"
BLOBS_DIR = "blobs"
TRIGGERS_DIR = "triggers"
INDEX_DIR = "index"
LONE_NODE = "local"          # the node a run of its own is, read as a job of one node
JOB_FORMAT = 1

# Where a node's name comes from, in the order believed: what the user said, then the
# launchers' own names for the node, then the host's name.
NODE_VARIABLES = ("CUDUMP_NODE", "SLURMD_NODENAME", "SLURM_NODEID", "GROUP_RANK", "NODE_RANK",
                  "OMPI_COMM_WORLD_NODE_RANK")
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CLAIM_TRIES = 1000


class JobError(Exception):
    """A job directory that cannot be used, or a node name that cannot be one."""


@dataclass(frozen=True)
class JobNode:
    name: str        # the node's folder name under nodes/
    run: Path        # its run directory


def valid_node_name(name: str) -> bool:
    """A node name makes one path component: letters, digits, '.', '_', '-', not hidden."""
    return bool(_NODE_NAME.fullmatch(name)) and name not in (".", "..")


def node_name(env: Mapping[str, str], given: str | None = None) -> str:
    """This node's name: `given` (--node), else the first of NODE_VARIABLES set, else the
    host name. A launcher's number becomes `node<N>`."""
    if given is not None:
        if not valid_node_name(given):
            raise JobError(f"--node {given!r}: a node name is letters, digits, '.', '_' and "
                           "'-' (at most 64), not starting with '.' or '-'")
        return given
    for variable in NODE_VARIABLES:
        value = env.get(variable, "").strip()
        if not value:
            continue
        name = f"node{value}" if value.isdigit() else value
        if valid_node_name(name):
            return name
    host = socket.gethostname().split(".")[0]
    return host if valid_node_name(host) else "node"


def is_job(path: Path) -> bool:
    """A directory holding a job's file or its nodes folder."""
    return reading.is_folder(path) and (reading.present(path / JOB_FILE)
                                        or reading.is_folder(path / NODES_DIR))


def job_name(job: Path) -> str:
    """The job's name as its file says, else the folder's own name."""
    try:
        data = json.loads((job / JOB_FILE).read_text())
    except (OSError, ValueError):
        return job.resolve().name
    name = data.get("job") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else job.resolve().name


def job_nodes(job: Path) -> list[JobNode]:
    """The job's node runs, by name: every folder of nodes/ holding a run's file."""
    nodes = job / NODES_DIR
    if not reading.is_folder(nodes):
        return []
    found = []
    for entry in sorted(nodes.iterdir(), key=lambda p: p.name):
        if entry.is_symlink() or not entry.is_dir() or not valid_node_name(entry.name):
            continue
        if any(reading.present(entry / name) for name in RUN_FILES):
            found.append(JobNode(entry.name, entry))
    return found


def node_runs(path: Path) -> list[JobNode]:
    """A job directory's node runs, or a run directory as a job of one node (LONE_NODE):
    what every reader of a job reads. JobError where `path` is neither."""
    if is_job(path):
        return job_nodes(path)
    if reading.is_folder(path) and any(reading.present(path / name) for name in RUN_FILES):
        return [JobNode(LONE_NODE, path)]
    raise JobError(f"{reading.shown(path)}: not a job or run directory")


def open_job(job: Path) -> None:
    """Make the job directory (and its file) where it is not yet; a job directory that
    exists is joined as it is. Refuses a path that is a run directory or a file."""
    if job.exists() and not job.is_dir():
        raise JobError(f"--job {job}: not a directory")
    if job.is_dir() and any(reading.present(job / name) for name in RUN_FILES):
        raise JobError(f"--job {job}: is a run directory, not a job's (give a new or a job "
                       "directory)")
    try:
        (job / NODES_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise JobError(f"--job {job}: cannot make it ({e.strerror})") from None
    record = json.dumps({"job": job.resolve().name, "format": JOB_FORMAT}) + "\n"
    try:
        fd = os.open(job / JOB_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return
    except OSError as e:
        raise JobError(f"--job {job}: cannot write {JOB_FILE} ({e.strerror})") from None
    with os.fdopen(fd, "w") as out:
        out.write(record)


def claim_node(job: Path, name: str) -> Path:
    """A new run directory for node `name` in `job`: nodes/NAME, else NAME.2, NAME.3, ...,
    each claimed by mkdir so two cudumps never share one."""
    open_job(job)
    nodes = job / NODES_DIR
    for k in range(1, _CLAIM_TRIES + 1):
        candidate = nodes / (name if k == 1 else f"{name}.{k}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as e:
            raise JobError(f"--job {job}: cannot make {candidate} ({e.strerror})") from None
        return candidate
    raise JobError(f"--job {job}: {_CLAIM_TRIES} runs of node {name} already; use --node")
