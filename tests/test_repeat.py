"""Plans the shim repeats on its own (PLAN_REPEAT): launches with the same parameter bytes
as one the controller planned get the same digests and scans without asking, and their
results come back through the result ring. Checked on the stand-in driver against what
the controller-planned path gives."""

from __future__ import annotations

import numpy as np
import pytest
from records import batched_launches, manifest, raw_lines, summary

from cudump.wire.digest import digest, digest_hex


def key(r: dict) -> tuple:
    return (r["launch"], r["arg"], r.get("offset", 0), r["phase"])


SNAPSHOT_ALL = """rules:
  - kernel: "*"
    args: pointers
    format: npy
"""


def test_repeated_launches_digest_what_snapshots_copy(fake, cudump_run, tmp_path):
    """diverge launches vecAdd with the same arguments every round: from the second round on
    the shim digests them itself. Every digest equals the numpy digest of a snapshot of the
    same launch's buffer, and none is missing."""
    program = [str(fake.programs["diverge"]), "6"]
    rule = tmp_path / "all.yaml"
    rule.write_text(SNAPSHOT_ALL)
    snap = cudump_run(program, "--rule", str(rule), run_dir=tmp_path / "snap")
    dig = cudump_run(program, "--digest", run_dir=tmp_path / "dig")
    assert snap.returncode == 0 and dig.returncode == 0, dig.stderr
    snaps = {key(r): r for r in manifest(snap.run_dir)}
    digests = {key(r): r for r in manifest(dig.run_dir)}
    assert snaps.keys() == digests.keys()
    assert all(r["status"] == "ok" for r in digests.values())
    for k, r in digests.items():
        array = np.load(snap.run_dir / snaps[k]["file"])
        assert r["digest"] == digest_hex(digest(array.tobytes(), r["row_bytes"])), k
        assert (r["occurrence"], r["kernel"]) == (snaps[k]["occurrence"], snaps[k]["kernel"])
        assert r["grid"] == snaps[k]["grid"] and r["stream"] == snaps[k]["stream"]
    # four launches a round over the same buffers each round (fill and scale also take the
    # round's number, which a plan without overrides does not depend on): rounds 2-6 repeat
    assert summary(dig.run_dir)["repeated_launches"] == 20
    # one launch record per launch made with a kept plan (the first, asked about, too: it is
    # made with the plan it got), in batches named after one template line per plan
    raw = raw_lines(dig.run_dir)
    assert sum(len(launches) for launches in batched_launches(dig.run_dir)) == 24
    assert sum("digest_template" in line for line in raw) == 4
    first_batch = next(i for i, line in enumerate(raw) if "digest_batch" in line)
    assert all("digest_template" in line for line in raw[:first_batch])
    assert summary(dig.run_dir)["digests"] == len(digests)


def test_a_launch_asked_about_is_made_with_the_plan_it_got(fake, cudump_run):
    """The first launch of a kernel is asked about; the plan it gets is kept, and the launch
    is made with it at once, as the launches after it are: its digests come back through the
    result ring (a launch of a batch made with the plan's template) instead of the
    controller's own records, and only the launches after it count as repeated."""
    ran = cudump_run([str(fake.programs["nans"]), "3", "5"], "--digest")
    assert ran.returncode == 0, ran.stderr
    raw = raw_lines(ran.run_dir)
    assert sum(batched_launches(ran.run_dir), []) == [1, 2, 3]
    assert all("digest_batch" in line or "digest_template" in line for line in raw)
    assert summary(ran.run_dir)["repeated_launches"] == 2
    assert {r["launch"] for r in manifest(ran.run_dir)} == {1, 2, 3}


def test_a_nan_producer_among_repeated_launches_is_snapshotted(fake, cudump_run):
    """nans launches vecAdd 40 times with the same arguments; launch 23 makes a NaN. It is
    a repeated launch: the shim sees the scan and reports it at once (MSG_REPEAT), and the
    controller has its buffers copied as the launch left them."""
    ran = cudump_run([str(fake.programs["nans"]), "40", "37", "23"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert summary(ran.run_dir)["repeated_launches"] == 39
    records = manifest(ran.run_dir)
    (found,) = [r for r in records if "nonfinite" in r]
    assert (found["launch"], found["arg"], found["first_nonfinite"]) == (23, 2, 37)
    files = sorted((r["arg"], r["launch"]) for r in records if r.get("file"))
    assert files == [(0, 23), (1, 23), (2, 23)]


def test_a_rule_that_skips_launches_is_asked_every_time(fake, cudump_run, tmp_path):
    rule = tmp_path / "every.yaml"
    rule.write_text('rules:\n  - kernel: "vecAdd*"\n    every: 2\n    format: digest\n')
    ran = cudump_run([str(fake.programs["nans"]), "10", "5"], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert sorted({r["occurrence"] for r in records}) == [1, 3, 5, 7, 9]
    assert len(records) == 5 * 3 * 2
    assert summary(ran.run_dir)["repeated_launches"] == 0


def test_a_plan_of_many_buffers_is_repeated(fake, cudump_run):
    """sum24 takes 24 buffers in one by-value struct (as a multi-tensor optimizer kernel
    does): 48 digests a launch, before and after. The first launch is planned by the
    controller, the next two by the shim; every digest is that of the bytes the launch
    saw or left."""
    ran = cudump_run([str(fake.programs["structs"]), "wide", "3"], "--digest")
    assert ran.returncode == 0, ran.stderr
    assert summary(ran.run_dir)["repeated_launches"] == 2
    records = manifest(ran.run_dir)
    assert len(records) == 3 * 48
    i = np.arange(256, dtype=np.float32)
    total = (276 + 23 * i).astype(np.float32)
    for r in records:
        j = r.get("offset", 0) // 8
        if j:
            expected = (j + i).astype(np.float32)
        else:
            expected = np.zeros(256, np.float32) if (r["launch"], r["phase"]) == (1, "before") \
                else total
        assert r["status"] == "ok" and r["bytes"] == 1024, r
        assert r["digest"] == digest_hex(digest(expected.tobytes(), 1024)), (r["launch"], j)
    assert sorted({(r["launch"], r["phase"]) for r in records}) == [
        (n, phase) for n in (1, 2, 3) for phase in ("after", "before")]


def test_a_null_pointer_argument_is_no_buffer(fake, cudump_run, tmp_path):
    """vecAdd(a, NULL, c, 0): the null input is an argument left out, not a buffer that
    failed, so neither --digest nor a rule with args: pointers records it, and the plan is
    repeated from the second launch on."""
    program = [str(fake.programs["structs"]), "null", "4"]
    ran = cudump_run(program, "--digest", run_dir=tmp_path / "dig")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert all(r["status"] == "ok" for r in records)
    assert sorted({(r["arg"], r["phase"]) for r in records}) == [
        (0, "after"), (0, "before"), (2, "after"), (2, "before")]
    assert len(records) == 4 * 4
    assert summary(ran.run_dir)["repeated_launches"] == 3
    rule = tmp_path / "all.yaml"
    rule.write_text(SNAPSHOT_ALL)
    ran = cudump_run(program, "--rule", str(rule), run_dir=tmp_path / "snap")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert {r["arg"] for r in records} == {0, 2} and all(r["status"] == "ok" for r in records)
    assert "warning" not in ran.stderr


def test_a_host_pointer_argument_is_passed_over_and_said_once(fake, cudump_run, tmp_path):
    """vecAdd(a, <host address>, c, 0), as cuBLAS passes alpha and beta: args: pointers
    passes over the typed pointer that is in no tracked allocation, says so once (not at
    every launch), and the plan of the rest is repeated; a rule naming the argument still
    gets an error record for it."""
    program = [str(fake.programs["structs"]), "host", "4"]
    rule = tmp_path / "outputs.yaml"
    rule.write_text('rules:\n  - kernel: "*"\n    args: pointers\n    when: after\n'
                    '    format: digest\n')
    ran = cudump_run(program, "--rule", str(rule), run_dir=tmp_path / "dig")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert sorted({r["arg"] for r in records}) == [0, 2] and len(records) == 2 * 4
    assert all(r["status"] == "ok" for r in records)
    [warning] = [line for line in ran.stderr.splitlines() if "warning" in line]
    assert "vecAdd(float const*, float const*, float*, int) arg 1 (float const*)" in warning
    assert "in no tracked allocation" in warning and "args: [1]" in warning
    assert summary(ran.run_dir)["repeated_launches"] == 3
    named = tmp_path / "named.yaml"
    named.write_text('rules:\n  - kernel: "*"\n    args: [1]\n    when: after\n'
                     '    format: digest\n')
    ran = cudump_run(program, "--rule", str(named), run_dir=tmp_path / "named")
    records = manifest(ran.run_dir)
    assert len(records) == 4 and all(r["status"] == "error" for r in records)
    assert all("not in any tracked allocation" in r["reason"] for r in records)


@pytest.mark.parametrize("mode, repeated", [("grow", 5), ("churn", 0)])
def test_new_allocations_keep_plans_and_frees_end_them(fake, cudump_run, tmp_path, mode,
                                                       repeated):
    """vecAdd over the same buffers six times, a new allocation made between launches: a
    plan kept by its pointer words holds while allocations are only added (a caching
    allocator growing), and is planned again after one goes away, since an extent ends
    where an allocation ends."""
    program = [str(fake.programs["structs"]), mode, "6"]
    ran = cudump_run(program, "--digest", run_dir=tmp_path / mode)
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert len(records) == 6 * 6 and all(r["status"] == "ok" for r in records)
    assert summary(ran.run_dir)["repeated_launches"] == repeated
    after = [r["digest"] for r in records if r["arg"] == 2 and r["phase"] == "after"]
    assert len(set(after)) == 1


@pytest.mark.parametrize("sets", [5, 100])
def test_one_kernel_over_more_buffer_sets_than_a_few_plans_is_repeated(fake, cudump_run, sets):
    """sets launches vecAdd over each of SETS sets of buffers, round after round, as a model
    runs one GEMM kernel over every layer's weights in each forward. Only the first round is
    asked about, however many sets there are: a function's plans grow in number rather than
    replace each other in turn (which, with more sets than plans, missed at every launch)."""
    ran = cudump_run([str(fake.programs["sets"]), str(sets), "3"], "--digest")
    assert ran.returncode == 0, ran.stderr
    done = summary(ran.run_dir)
    assert (done["planned_launches"], done["repeated_launches"]) == (sets, 2 * sets)
    assert done["digests"] == 3 * sets * 6
    # which kernels were planned one by one, and how often: where a slow run's round trips go
    assert done["planned_kernels"] == {"vecAdd(float const*, float const*, float*, int)": sets}
