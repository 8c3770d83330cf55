"""`quit` (`q`) at the prompt ends the program as gdb's does: the run's last lines say it was
ended at the prompt, not that it was killed as though something failed, and cudump exits 0,
as gdb does after quit. summary.json keeps the program's status (137) and says
`ended_at_prompt: quit`. `kill` is unchanged: the program's status, 137."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def run_with(cudump_run, fake, tmp_path: Path, command: str):
    commands = tmp_path / "commands.txt"
    commands.write_text(f"{command}\n")
    return cudump_run([str(fake.programs["zed"]), "2", "--size", "64x48"], "--break",
                      "FrP0k5607tPV", "--batch", str(commands))


@pytest.mark.parametrize("command", ["q", "quit"])
def test_quit_ends_the_program_and_says_so(fake, cudump_run, tmp_path, command):
    ran = run_with(cudump_run, fake, tmp_path, command)
    assert ran.returncode == 0, ran.stderr
    assert "cudump: " + str(fake.programs["zed"]) + " was ended at the prompt (quit)" in \
        ran.stderr.splitlines()
    assert "SIGKILL" not in ran.stderr
    assert ran.stderr.splitlines()[-1].startswith("cudump: 1 process")
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert (summary["exit_status"], summary["ended_at_prompt"]) == (137, "quit")


def test_a_run_not_quit_has_no_such_field(fake, cudump_run, tmp_path):
    ran = run_with(cudump_run, fake, tmp_path, "kill")
    assert ran.returncode == 137, ran.stderr
    assert "was ended at the prompt" not in ran.stderr
    assert "ended_at_prompt" not in json.loads((ran.run_dir / "summary.json").read_text())
