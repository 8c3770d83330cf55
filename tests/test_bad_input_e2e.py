"""Bad input at run time, on the stand-in driver: a rule file or a prompt command that cudump
cannot use is refused in one line, before it can stall the controller or drop a process's
connection, and the program runs as it would without cudump."""

from __future__ import annotations

from pathlib import Path

import pytest

W, H = 64, 48
SLOW_REGEX = "re:" + ".*" * 12 + "Q"     # polynomial: minutes per kernel name if accepted


def batch(tmp_path: Path, *commands: str) -> Path:
    path = tmp_path / "commands.txt"
    path.write_text("\n".join(commands) + "\n")
    return path


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("error:", "cudump: error"))]


def zed(fake, frames: int = 2) -> list[str]:
    return [str(fake.programs["zed"]), str(frames), "--size", f"{W}x{H}"]


# ---------------------------------------------------------------- regular expressions


@pytest.mark.parametrize("action", ["snapshot", "break"])
def test_a_polynomial_regex_in_a_rule_file_is_refused_before_the_program_runs(
        fake, cudump_run, tmp_path, action):
    rule = tmp_path / "slow.yaml"
    rule.write_text(f"rules:\n  - kernel: '{SLOW_REGEX}'\n    action: {action}\n")
    ran = cudump_run(zed(fake), "--rule", str(rule), timeout=30)
    assert ran.returncode == 2 and ran.stdout == ""        # nothing ran
    assert "Traceback" not in ran.stderr
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith(f"cudump: error: {rule}:2: field 'kernel': regular expression")
    assert "too many repetitions" in line


def test_a_polynomial_regex_at_the_prompt_is_refused_and_the_run_goes_on(
        fake, cudump_run, bare_run, tmp_path):
    commands = batch(tmp_path, f"break {SLOW_REGEX}", "info breakpoints", "continue",
                     "continue")
    ran = cudump_run(zed(fake), "--break", "FrP0k5607tPV", "--batch", str(commands),
                     timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(zed(fake)).stdout
    assert "Traceback" not in ran.stderr
    (line,) = error_lines(ran.stderr)
    assert line.startswith("error: regular expression") and "too many repetitions" in line
    assert ran.stderr.count("Breakpoint 1, launch") == 2      # the one breakpoint there is
