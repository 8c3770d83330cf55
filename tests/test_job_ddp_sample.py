"""samples/torch_ddp_job.py (the GPU test's DDP job, tests/gpu/test_gpu_job_ddp.py) reads its
place in the job from the launcher's variables, and the wordings that GPU test looks for are
those cudump prints: checked here without torch or a GPU, since the GPU test can only be run
elsewhere."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cudump.analysis.job_order import NodeReport
from cudump.launches.scopes import Where
from cudump.rundir.index_rows import ReportRow

TESTS = Path(__file__).resolve().parent
SAMPLE = TESTS.parent / "samples" / "torch_ddp_job.py"
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, "
       "float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, "
       "2ul> >(int, at::native::AUnaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)")
GOOD = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29511"}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module         # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _gpu_test():
    if str(TESTS / "gpu") not in sys.path:
        sys.path.insert(0, str(TESTS / "gpu"))      # its gpurun, as tests/gpu/conftest.py
    return _load("gpu_job_ddp_wordings", TESTS / "gpu" / "test_gpu_job_ddp.py")


def _sample():
    return _load("torch_ddp_job", SAMPLE)


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


@pytest.mark.parametrize("source", [None, "torch_ddp_job.py:112"])
def test_the_gpu_tests_wordings_are_cudumps(source: str | None) -> None:
    """The first non-finite line of `cudump stats JOB` and node 1's first report, as cudump
    words them for rank 1's multiply at step 3 after all-reduce 7, match what the GPU test
    looks for."""
    gpu = _gpu_test()
    row = ReportRow(rank=1, pid=4242, launch=40, kernel=MUL, arg=2, nonfinite=530,
                    elements=2048, origin="produced", step=3, collective=7,
                    collective_op="all-reduce", within=5, layer=None, pass_=None,
                    source=source)
    line = f"first non-finite: {NodeReport('node1', row).text()}"
    said = re.fullmatch(gpu.FIRST_NONFINITE.format(launch=40), line)
    assert said and said.groups() == ("7", "8"), line
    # The report line as policy/snapshot/nanreport.py puts it together.
    where = Where(step=3, source=source, collective=7, collective_op="all-reduce")
    report = (f"cudump: NaN/Inf: launch 40 of {MUL} {where.text()} (occurrence 1, process "
              "4242, rank 1) produced 530 of 2048 non-finite elements in arg 2, the first at "
              "index 3; its inputs were finite")
    first = gpu.FIRST_REPORT.fullmatch(report)
    assert first and first.group(1, 3, 4) == ("40", "7", "8"), report


def test_the_gpu_tests_timeline_tracks_are_cudumps(cudump, fake, tmp_path: Path) -> None:
    """Two stand-in nodes named as the GPU test names them, one rank each: the job's
    timeline names their process tracks as the GPU test reads them."""
    gpu = _gpu_test()
    job = tmp_path / "job"
    for k in range(2):
        done = cudump("--job", str(job), "--node", f"node{k}", "--trace",
                      str(fake.programs["ranks"]), "3", "5", env={"RANK": str(k)})
        assert done.returncode == 0, done.stderr
    timeline = tmp_path / "t.json"
    done = cudump("show", str(job), "--timeline", str(timeline))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {timeline}: 2 processes, "), done.stdout
    events = json.loads(timeline.read_text())["traceEvents"]
    names = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
    assert sorted(gpu.TRACK.fullmatch(n).groups() for n in names) == [("node0", "0"),
                                                                     ("node1", "1")]
