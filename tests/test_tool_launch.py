"""How cudump's kernel is launched (shim/toollaunch.h): on Hopper and later, from the PTX
build that waits for the kernel before it (griddepcontrol.wait), with programmatic stream
serialization; elsewhere, or where the driver refuses the attribute, plainly, from the build
for every GPU. Checked on the stand-in driver, which reports compute capability 9 unless
FAKECUDA_CC_MAJOR says otherwise, refuses the attribute below 9 or with FAKECUDA_NO_PDL=1,
refuses a launch so made of a build of cudump's kernel that does not wait, and counts the
launches so made (FAKECUDA_STATS)."""

from __future__ import annotations

from pathlib import Path

import pytest
from records import summary
from test_check_nan import INDEX, assert_producer_23_found


def stats(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


@pytest.mark.parametrize("hand_off", [True, False], ids=["launcher", "own-thread"])
def test_on_hopper_cudumps_kernel_waits_for_the_kernel_before_it(fake, cudump_run, tmp_path,
                                                                  hand_off):
    """nans 40 under --check-nan: every launch of cudump's kernel is made with programmatic
    stream serialization, by the launcher thread or the launching thread, from the build that
    waits (the stand-in refuses any other); the producer is found as it always is."""
    counted = tmp_path / "stats"
    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23"], "--check-nan",
                     *(() if hand_off else ("--no-hand-off",)),
                     env_extra={"FAKECUDA_STATS": str(counted)})
    assert_producer_23_found(ran)
    assert "fakecuda:" not in ran.stderr
    made = stats(counted)["tool_waiting"]
    assert made >= 40
    assert summary(ran.run_dir)["tools_waiting"] == made


@pytest.mark.parametrize("env", [{"FAKECUDA_CC_MAJOR": "8"}, {"FAKECUDA_NO_PDL": "1"}],
                         ids=["ampere", "attribute-refused"])
def test_elsewhere_it_is_launched_plainly(fake, cudump_run, tmp_path, env):
    """Before Hopper the build for every GPU is loaded and launched plainly; where the driver
    refuses the attribute, each launch is made again plainly. Either way the same producer."""
    counted = tmp_path / "stats"
    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23"], "--check-nan",
                     env_extra={"FAKECUDA_STATS": str(counted), **env})
    assert_producer_23_found(ran)
    assert stats(counted)["tool_waiting"] == 0
    assert summary(ran.run_dir)["tools_waiting"] == 0
    assert summary(ran.run_dir)["repeated_launches"] >= 30


def test_after_a_launch_that_may_overlap_its_own_predecessor_it_is_launched_plainly(
        fake, cudump_run, bare_run, tmp_path):
    """programmatic 50: square is launched with programmatic stream serialization itself, so
    what ran before it may still run when it starts; cudump's kernel after it is launched
    plainly (the stand-in ends the program if not), after each plain vecAdd so that it waits
    on the GPU."""
    counted = tmp_path / "stats"
    program = [str(fake.programs["programmatic"]), "50"]
    ran = cudump_run(program, "--check-nan", env_extra={"FAKECUDA_STATS": str(counted)})
    bare = bare_run(program)
    assert ran.returncode == 0 and "fakecuda:" not in ran.stderr, ran.stderr
    assert ran.stdout == bare.stdout
    made = stats(counted)["tool_waiting"]
    assert 40 <= made <= 50
    assert summary(ran.run_dir)["repeated_launches"] >= 95


def test_behind_the_flight_recorders_mark_it_is_launched_plainly(fake, cudump_run, tmp_path):
    """--flight marks each launch done with a write on its stream, right after it: cudump's
    kernel then follows that write, not the program's kernel, and is launched plainly."""
    counted = tmp_path / "stats"
    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23"], "--check-nan",
                     "--flight", env_extra={"FAKECUDA_STATS": str(counted)})
    assert_producer_23_found(ran)
    assert stats(counted)["tool_waiting"] == 0


def test_with_other_threads_on_the_same_stream_it_waits_only_when_none_is_in_a_call(
        fake, cudump_run, bare_run, tmp_path):
    """threads 200 shared: eight threads launch on the one legacy stream at once. Another
    thread's work may land on the stream between a launch and cudump's kernel after it, so
    cudump's kernel waits on the GPU only where no other call of the program's was in
    progress at the launch, nor began before cudump's kernel was launched (the stand-in ends
    the program if it follows anything but the launch). Left unchecked, it did in every run."""
    counted = tmp_path / "stats"
    program = [str(fake.programs["threads"]), "200", "shared"]
    ran = cudump_run(program, "--check-nan", env_extra={"FAKECUDA_STATS": str(counted)})
    assert ran.returncode == 0 and "fakecuda:" not in ran.stderr, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    assert summary(ran.run_dir)["repeated_launches"] > 1000
    assert summary(ran.run_dir)["tools_waiting"] == stats(counted)["tool_waiting"]


def test_a_call_of_another_thread_never_slips_in_while_cudumps_kernel_is_being_launched(
        fake, cudump_run, bare_run, tmp_path):
    """As above, with each launch of cudump's kernel taking 2 ms in the driver
    (FAKECUDA_TOOLS_DELAY_US) before it reaches the stream: the time for another thread's
    call, begun after the shim looked at the count of calls, to reach the stream first. The
    shim holds such a call back until its launch is on the stream (calls_fence). Without
    that, one run in two ended with the stand-in's abort; three runs here."""
    program = [str(fake.programs["threads"]), "200", "shared"]
    bare = bare_run(program)
    for n in range(3):
        counted = tmp_path / f"stats{n}"
        ran = cudump_run(program, "--check-nan", run_dir=tmp_path / f"run{n}",
                         env_extra={"FAKECUDA_STATS": str(counted),
                                    "FAKECUDA_TOOLS_DELAY_US": "2000"})
        assert ran.returncode == 0 and "fakecuda:" not in ran.stderr, ran.stderr
        assert ran.stdout == bare.stdout
        assert summary(ran.run_dir)["tools_waiting"] == stats(counted)["tool_waiting"]


@pytest.mark.parametrize(("hand_off", "cc"), [(True, "9"), (False, "8")],
                         ids=["launcher-waiting", "own-thread-plain"])
def test_summary_counts_every_launch_of_cudumps_kernel_the_driver_took(fake, cudump_run,
                                                                        tmp_path, hand_off, cc):
    """summary.json's tool_launches is what the stand-in counted of cudump's kernel, made by
    the launcher thread or the launching thread, waiting or plain (bench/stay_on.py sets it
    against the program's launches); a run with no rules launches none."""
    counted = tmp_path / "stats"
    program = [str(fake.programs["nans"]), "40", str(INDEX), "23"]
    ran = cudump_run(program, "--check-nan", *(() if hand_off else ("--no-hand-off",)),
                     env_extra={"FAKECUDA_STATS": str(counted), "FAKECUDA_CC_MAJOR": cc})
    assert_producer_23_found(ran)
    made = stats(counted)["tool_launches"]
    assert made >= 40
    assert summary(ran.run_dir)["tool_launches"] == made

    none = cudump_run(program, run_dir=tmp_path / "idle")
    assert none.returncode == 0, none.stderr
    assert summary(none.run_dir)["tool_launches"] == 0


def test_kernel_nodes_of_cudumps_kernel_inside_graphs_are_not_host_launches(fake, cudump_run,
                                                                             tmp_path):
    """graph_scans under --check-nan: cudump's kernel runs as kernel nodes of the program's
    graphs, which the driver runs without a launch from the host: tool_launches counts only
    those the host made, as the stand-in does."""
    counted = tmp_path / "stats"
    ran = cudump_run([str(fake.programs["graph_scans"]), "--nan"], "--check-nan",
                     env_extra={"FAKECUDA_STATS": str(counted)})
    assert ran.returncode == 0, ran.stderr
    ran_nodes = summary(ran.run_dir)
    assert ran_nodes["graph_kernel_launches"] > 0 and ran_nodes["nan_reports"] == 2
    driver = stats(counted)
    assert driver["tool_bytes"] > 0          # cudump's kernel ran, as the graphs' nodes
    assert ran_nodes["tool_launches"] == driver["tool_launches"] == 0
