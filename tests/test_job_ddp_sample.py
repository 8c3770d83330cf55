"""samples/torch_ddp_job.py (the GPU test's DDP job, tests/gpu/test_gpu_job_ddp.py) reads its
place in the job from the launcher's variables: checked here without torch or a GPU, since
the GPU test can only be run elsewhere."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "torch_ddp_job.py"
GOOD = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29511"}


def _sample():
    spec = importlib.util.spec_from_file_location("torch_ddp_job", SAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module         # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_sample_reads_its_rank_from_the_launchers_variables() -> None:
    sample = _sample()
    assert sample.job_env(GOOD) == sample.JobEnv(1, 2, 0, "127.0.0.1", 29511)
    args = sample.parse_args([])
    assert (args.steps, args.bad_step, args.bad_rank) == (6, 3, 1)


@pytest.mark.parametrize(("change", "said"), [
    ({"RANK": None}, "RANK is not set"),
    ({"RANK": "2"}, "RANK=2: should be from 0 to 1"),
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two': not a whole number"),
    ({"MASTER_ADDR": ""}, "MASTER_ADDR is not set"),
    ({"MASTER_PORT": "0"}, "MASTER_PORT=0: should be from 1 to 65535"),
])
def test_a_missing_or_bad_variable_is_named(change: dict[str, str | None], said: str) -> None:
    sample = _sample()
    env = {k: v for k, v in (GOOD | change).items() if v is not None}
    with pytest.raises(sample.JobEnvError, match=said.replace("(", r"\(")):
        sample.job_env(env)


def test_without_a_launcher_it_says_so_in_one_line_before_importing_torch() -> None:
    env = {k: v for k, v in os.environ.items() if k not in GOOD}
    done = subprocess.run([sys.executable, str(SAMPLE)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "torch_ddp_job.py: WORLD_SIZE is not set (the launcher sets RANK, WORLD_SIZE, "
        "LOCAL_RANK, MASTER_ADDR, MASTER_PORT)"]
