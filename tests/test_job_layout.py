"""A job directory's layout (cudump.rundir.job): node names, claiming a node's folder,
listing a job's nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudump.rundir.job import (
    JOB_FILE,
    JobError,
    claim_node,
    is_job,
    job_name,
    job_nodes,
    node_name,
    open_job,
)
from cudump.rundir.layout import SUMMARY_FILE


def test_node_names_come_from_the_user_the_launcher_then_the_host():
    assert node_name({"SLURMD_NODENAME": "gpu17"}, "mine") == "mine"
    assert node_name({"SLURMD_NODENAME": "gpu17", "NODE_RANK": "3"}) == "gpu17"
    assert node_name({"NODE_RANK": "3"}) == "node3"
    assert node_name({"SLURMD_NODENAME": "../etc"}) != "../etc"
    with pytest.raises(JobError, match="--node"):
        node_name({}, "../x")


def test_two_cudumps_of_one_node_never_share_a_folder(tmp_path: Path):
    job = tmp_path / "job"
    first = claim_node(job, "n0")
    second = claim_node(job, "n0")
    assert first.name == "n0" and second.name == "n0.2"
    assert json.loads((job / JOB_FILE).read_text())["job"] == "job"
    (first / SUMMARY_FILE).write_text("{}")
    assert is_job(job) and job_name(job) == "job"
    assert [n.name for n in job_nodes(job)] == ["n0"]   # n0.2 holds no run's file yet


def test_a_run_directory_is_no_job(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    (run / SUMMARY_FILE).write_text("{}")
    with pytest.raises(JobError, match="is a run directory"):
        open_job(run)
    assert not is_job(run)
