"""--error-exitcode N, as compute-sanitizer's: a run in which cudump finds something (a buffer
turned NaN/Inf, a launch the flight recorder names, an --inject output that still differs)
exits N; otherwise the program's own status. summary.json keeps the program's status."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import Cudump
from records import summary


def said(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "(--error-exitcode)" in ln]


def test_a_nan_found_exits_n(fake, cudump_run, tmp_path):
    prog = [str(fake.programs["nans"]), "40", "37", "23"]
    plain = cudump_run(prog, "--check-nan", run_dir=tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr          # the program's own status
    ran = cudump_run(prog, "--check-nan", "--error-exitcode", "7", run_dir=tmp_path / "n")
    assert ran.returncode == 7, ran.stderr
    # Counted as the summary line counts them.
    assert said(ran.stderr) == ["cudump: exit status 7 (--error-exitcode): 1 NaN/Inf report; "
                                "2 host writes that left NaN/Inf"]
    assert ", 1 NaN/Inf report, 2 host writes that left NaN/Inf" in ran.stderr.splitlines()[-1]
    assert summary(ran.run_dir)["exit_status"] == 0


def test_no_nan_keeps_the_programs_status(fake, cudump_run):
    ran = cudump_run([str(fake.programs["nans"]), "10", "5"], "--check-nan",
                     "--error-exitcode", "7")
    assert ran.returncode == 0, ran.stderr
    assert not said(ran.stderr)


def test_a_flight_culprit_exits_n(fake, cudump_run, tmp_path):
    ran = cudump_run([str(fake.programs["flight"]), "fault"], "--flight", "--error-exitcode",
                     "9", run_dir=tmp_path / "fault")
    assert ran.returncode == 9, ran.stderr
    assert said(ran.stderr) == ["cudump: exit status 9 (--error-exitcode): the flight "
                                "recorder named 1 launch"]
    assert summary(ran.run_dir)["exit_status"] == 1
    clean = cudump_run([str(fake.programs["flight"]), "ok"], "--flight", "--error-exitcode",
                       "9", run_dir=tmp_path / "ok")
    assert clean.returncode == 0 and not said(clean.stderr), clean.stderr


def rule(path: Path, kernel: str, occurrence: int) -> Path:
    path.write_text(f"rules:\n  - kernel: {kernel}\n    skip: {occurrence - 1}\n    count: 1\n"
                    "    when: both\n    format: npy\n")
    return path


def test_an_injected_output_that_differs_exits_n(cudump: Cudump, diverge: str,
                                                 tmp_path: Path) -> None:
    """B (DIVERGE_AT=3) on A's inputs of launch 10, the root cause, still differs; on A's
    inputs of launch 11, a consequence, it leaves A's outputs."""
    a = tmp_path / "a"
    taken = cudump("--out", str(a), "--rule", str(rule(tmp_path / "r.yaml", "vecAdd", 5)),
                   "--rule", str(rule(tmp_path / "s.yaml", "scale", 3)), "--", diverge, "4")
    assert taken.returncode == 0, taken.stderr
    bad = {"DIVERGE_AT": "3"}
    differs = cudump("--out", str(tmp_path / "b10"), "--inject", f"{a}:10", "--error-exitcode",
                     "3", "--", diverge, "4", env=bad)
    assert differs.returncode == 3, differs.stderr
    assert said(differs.stderr) == ["cudump: exit status 3 (--error-exitcode): 1 injected "
                                    "output differing from the source run"]
    equal = cudump("--out", str(tmp_path / "b11"), "--inject", f"{a}:11", "--error-exitcode",
                   "3", "--", diverge, "4", env=bad)
    assert equal.returncode == 0 and not said(equal.stderr), equal.stderr


@pytest.mark.parametrize("value", ["0", "256", "x", "-1"])
def test_a_bad_value_is_one_line(fake, cudump, value):
    done = cudump("--error-exitcode", value, "--", str(fake.programs["nans"]), "10", "5")
    assert done.returncode == 2
    assert done.stderr.startswith(f"cudump: error: argument --error-exitcode: bad "
                                  f"--error-exitcode '{value}': an exit status from 1 to 255")
    assert len(done.stderr.splitlines()) == 1
