"""The launcher thread (on by default, --no-hand-off to keep it off; shim/handoff.h):
cudump's kernel after a launch made with a kept plan is launched by a thread of the shim while
the program goes on, and every call the program makes next waits until it has been made.
Checked on the stand-in driver, which can make each launch of cudump's kernel take a while on
a thread other than the program's (FAKECUDA_TOOLS_DELAY_US): a call of the program that
reached the device before the kernel would change what it reads, and the results would differ
from those of a run where the launching thread makes it (--no-hand-off)."""

from __future__ import annotations

from pathlib import Path

from records import manifest, summary
from test_check_nan import INDEX, assert_producer_23_found

# Each launch of cudump's kernel takes 20 ms to be made: long enough that the program's
# next launch, made at once, would run first if nothing held it back.
SLOW = {"FAKECUDA_TOOLS_DELAY_US": "20000"}


def test_a_nan_is_found_in_what_the_launch_left_though_its_scans_are_launched_late(
        fake, cudump_run):
    """nans 40: launch 23 leaves NaN in c, and launch 24 writes c whole again after two
    host copies. The scans after launch 23 are handed to the launcher thread, which takes
    20 ms to make them; they see launch 23's NaN and hold the stream, and the producer is
    found and snapshotted as it left its buffers, as without the launcher. (The copies, which
    wait in the driver, wait for gated launches to settle anyway: the order of the program's
    calls behind a late launch is the digest test's below.)"""
    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23"], "--check-nan",
                     env_extra=SLOW)
    assert_producer_23_found(ran)
    assert summary(ran.run_dir)["handed_off"] > 30


def test_with_no_hand_off_the_launching_thread_makes_them(fake, cudump_run):
    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23"], "--check-nan",
                     "--no-hand-off", env_extra=SLOW)
    assert_producer_23_found(ran)
    assert summary(ran.run_dir)["handed_off"] == 0


def digests(run_dir: Path) -> dict[tuple, str]:
    return {(r["launch"], r["arg"], r.get("offset", 0), r["phase"]): r["digest"]
            for r in manifest(run_dir)}


def test_digests_made_by_the_launcher_are_the_launches_own(fake, cudump_run, tmp_path):
    """diverge launches four kernels over the same buffers every round, each writing what
    the next reads: the digests after each launch, made by the launcher thread 20 ms late,
    are those of a run where the launching thread makes them, buffer for buffer."""
    program = [str(fake.programs["diverge"]), "6"]
    handed = cudump_run(program, "--digest", run_dir=tmp_path / "handed", env_extra=SLOW)
    own = cudump_run(program, "--digest", "--no-hand-off", run_dir=tmp_path / "own")
    assert handed.returncode == 0 and own.returncode == 0, handed.stderr + own.stderr
    assert handed.stdout == own.stdout
    assert summary(handed.run_dir)["handed_off"] > 0
    assert summary(own.run_dir)["handed_off"] == 0
    made, expected = digests(handed.run_dir), digests(own.run_dir)
    assert len(expected) > 40
    assert made == expected


def test_a_context_destroyed_right_after_a_launch_waits_for_the_launch_handed_over(
        fake, cudump_run):
    """ctxdestroy: the program destroys its own context right after its last launch, with no
    call between. The scans after that launch, handed to the launcher thread and made 20 ms
    late, are made before the context goes (cuCtxDestroy waits for them, as every counted
    call does): the launch's digests after it are on record, none failed."""
    ran = cudump_run([str(fake.programs["ctxdestroy"]), "5"], "--digest", env_extra=SLOW)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "destroyed after 5 launches\n"
    assert summary(ran.run_dir)["handed_off"] > 0
    records = manifest(ran.run_dir)
    last = max(r["launch"] for r in records)
    after = [r for r in records if r["launch"] == last and r["phase"] == "after"]
    assert after and all("digest" in r for r in after), after


def test_the_launcher_is_tried_against_the_launching_thread_stretch_by_stretch(
        fake, cudump_run, tmp_path):
    """layers 16 300: 9,600 launches, nearly all made with kept plans. The launcher takes the
    first eight stretches of 512 launches of cudump's kernel that could be handed over (the
    program's warm-up), then the trial: the launcher the next stretch, the launching thread
    the two after it, the launcher two, the thread one (shim/handtune.h); then one way is
    kept. Every stretch, either way, scans what the program left: the sums and the scans'
    findings are those of a run with the launcher off."""
    program = [str(fake.programs["layers"]), "16", "300"]
    tried = cudump_run(program, "--check-nan", run_dir=tmp_path / "tried")
    own = cudump_run(program, "--check-nan", "--no-hand-off", run_dir=tmp_path / "own")
    assert tried.returncode == 0 and own.returncode == 0, tried.stderr + own.stderr
    assert tried.stdout == own.stdout
    counts = summary(tried.run_dir)
    assert counts["handed_off"] >= 11 * 512 and counts["handed_back"] >= 3 * 512, counts
    assert counts["launcher_trials"] == 1 and counts["launcher_won"] in (0, 1), counts
    assert counts["repeated_launches"] == summary(own.run_dir)["repeated_launches"]
    assert summary(own.run_dir)["handed_back"] == summary(own.run_dir)["launcher_trials"] == 0
