"""Launch counts of processes that end without saying goodbye (no MSG_STATS at exit):
killed by a signal, ended by _exit(), killed at the prompt. The shim keeps its counts in the
shared memory the controller maps too, so the summary has them without --trace, and they
are those a --trace run counts."""

from __future__ import annotations

import signal

import pytest
from records import summary

VECADD = "vecAdd(float const*, float const*, float*, int)"


@pytest.mark.parametrize("trace", [False, True])
def test_children_that_end_with__exit_are_counted(fake, cudump_run, trace):
    """procs forks two children that each launch vecAdd 4 times and end with _exit()."""
    ran = cudump_run([str(fake.programs["procs"]), "4"], *(["--trace"] if trace else []))
    assert ran.returncode == 0, ran.stderr
    totals = summary(ran.run_dir)
    assert (totals["processes"], totals["launches"], totals["kernels"]) == (2, 8, {VECADD: 8})
    assert "2 processes, 8 launches (0 graph launches, 0 captured), 1 kernel" in ran.stderr


@pytest.mark.parametrize("trace", [False, True])
def test_a_program_killed_by_a_signal_is_counted(fake, cudump_run, trace):
    """Eight threads launch vecAdd 30 times each, then the process dies by SIGKILL."""
    ran = cudump_run([str(fake.programs["threads"]), "30", "sig", str(int(signal.SIGKILL))],
                     *(["--trace"] if trace else []))
    assert ran.returncode == 128 + signal.SIGKILL, ran.stderr
    totals = summary(ran.run_dir)
    assert (totals["launches"], totals["kernels"]) == (8 * 30, {VECADD: 8 * 30})


@pytest.mark.parametrize("trace", [False, True])
def test_a_program_killed_at_the_prompt_is_counted(fake, cudump_run, tmp_path, trace):
    """Stopped at scale (launch 3 of cudart_like), `kill`: the two vecAdd launches before it
    ran, the held one did not."""
    commands = tmp_path / "kill.txt"
    commands.write_text("kill\n")
    ran = cudump_run([str(fake.programs["cudart_like"])], "--break", "scale", "--batch",
                     str(commands), *(["--trace"] if trace else []))
    assert ran.returncode == 128 + signal.SIGKILL, ran.stderr
    totals = summary(ran.run_dir)
    assert (totals["launches"], totals["kernels"]) == (2, {VECADD: 2})


def test_graph_and_captured_launches_of_a_killed_program_are_counted(fake, cudump_run,
                                                                     tmp_path):
    """capture records three launches into a graph and replays it; killed while the second
    replay is held, it has made one graph launch and captured three. (The kernel-node runs
    of graph launches are folded into the counts only when a graph goes or the process
    exits, so they are not counted here.)"""
    commands = tmp_path / "kill.txt"
    commands.write_text("continue\ncontinue\ncontinue\nkill\n")
    ran = cudump_run([str(fake.programs["capture"]), "--copy"], "--break", "scale", "--batch",
                     str(commands))
    assert ran.returncode == 128 + signal.SIGKILL, ran.stderr
    assert "graph launch 5 (graph 1, replay 2, node 2) of scale" in ran.stderr
    totals = summary(ran.run_dir)
    assert (totals["graph_launches"], totals["captured_launches"]) == (1, 3)
