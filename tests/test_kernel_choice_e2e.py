"""Kernels and launches chosen on the command line as Nsight Compute chooses them
(-k/--kernel-name, --launch-skip, --launch-count), through the stand-in driver."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cudump.rundir.runs import Run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from records import manifest  # noqa: E402

VEC_ADD = "vecAdd(float const*, float const*, float*, int)"


def _launches(run_dir: Path) -> list[tuple[int, str]]:
    return sorted({(s.record.launch, s.record.kernel) for s in Run.open(run_dir).snapshots})


def test_kernel_name_launch_skip_and_count_choose_digested_launches(fake, cudump_run) -> None:
    # diverge: each round launches fill, vecAdd, scale, vecAdd: vecAdd is launch 2, 4, 6, ...
    ran = cudump_run([str(fake.programs["diverge"]), "4"], "--digest", "-k", "vecAdd",
                     "--launch-skip", "1", "--launch-count", "2")
    assert ran.returncode == 0, ran.stderr
    assert _launches(ran.run_dir) == [(4, VEC_ADD), (6, VEC_ADD)]


def test_launch_skip_chooses_the_launches_check_nan_scans(fake, cudump_run,
                                                          tmp_path: Path) -> None:
    # nans: launches 3 and 10 of vecAdd leave NaN.
    argv = [str(fake.programs["nans"]), "20", "7", "3", "10"]
    producers: list[list[int]] = []
    for options in ([], ["-k", "regex:^vecAdd", "--launch-skip", "5", "--launch-count", "10"],
                    ["--launch-count", "3"]):
        ran = cudump_run(argv, "--check-nan", *options,
                         run_dir=tmp_path / f"run{len(producers)}")
        assert ran.returncode == 0, ran.stderr
        producers.append([r["occurrence"] for r in manifest(ran.run_dir) if "nonfinite" in r])
    assert producers == [[3, 10], [10], [3]]


def test_launch_skip_and_count_choose_captured_launches(fake, cudump_run) -> None:
    ran = cudump_run([str(fake.programs["diverge"]), "4"], "--capture-launch", "scale",
                     "--launch-skip", "2", "--launch-count", "1")
    assert ran.returncode == 0, ran.stderr
    assert _launches(ran.run_dir) == [(11, "scale")]


@pytest.mark.parametrize(("options", "message"), [
    (["-k", "vecAdd"], "-k/--kernel-name chooses the kernels of --digest and --check-nan"),
    (["--launch-count", "2"], "--launch-skip and --launch-count choose the launches of"),
    (["--digest", "-k", "a", "-k", "b"], "-k/--kernel-name given more than once"),
    (["--digest", "--launch-count", "0"], "bad --launch-count '0': a whole number from 1"),
    (["--digest", "--launch-skip", "-1"], "bad --launch-skip '-1': a whole number from 0"),
    (["--digest", "-k", "re:(a+)+"], "--kernel-name re:(a+)+: regular expression"),
])
def test_choosing_options_are_checked_before_the_program_runs(cudump, tmp_path, options,
                                                              message) -> None:
    done = cudump(*options, "--out", str(tmp_path / "run"), "--", "true")
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "run").exists()


def test_help_names_the_choosing_options(cudump) -> None:
    text = cudump("--help").stdout
    for option in ("-k PATTERN, --kernel-name PATTERN", "--launch-skip N", "--launch-count N"):
        assert option in text
