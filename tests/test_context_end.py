"""A program that ends its contexts and goes on in new ones (shim/ctxlife.h): cudump's kernel,
its scratch and the mapping of the memory it writes its results into were made in the old
context and went with it. On an H200, cudump's kernel launched from the module of a reset
primary context failed (CUDA_ERROR_INVALID_HANDLE) or crashed the program in cuLaunchKernel;
and with one entry per context handle, never dropped, the 33rd context got no kernel at all.
The stand-in driver refuses a function of a context that ended and drops the registrations
made in it, as the real one does.

ctxcycle: each round runs vecAdd once in a context of its own (create: cuCtxCreate, then
cuCtxDestroy) or in the primary context, reset after the round (reset: by
cuDevicePrimaryCtxReset, which the shim wraps; unseen: by a call it does not, as
cudaDeviceReset's on the real driver); the last round leaves NaN."""

from __future__ import annotations

import pytest
from records import manifest, nan_lines

from cudump.rundir.flight import read_flight

ROUNDS = {"reset": 4, "unseen": 4, "create": 40}  # create: more contexts than kept at once
# Launches a round: `two` runs each round in two contexts.
PER_ROUND = {"two": 2}


DIGEST_CASES = {
    **{how: (how, rounds, {}) for how, rounds in ROUNDS.items()},
    # the primary context reset unseen while another lives on: the areas cudump's kernel
    # writes into were registered in the primary context, and their registration went with
    # it; the other context's kernel wrote there and faulted the context
    "two": ("two", 4, {}),
    # the driver gives the next context the handle of the one destroyed (as on an H200)
    "create-reused": ("create", 40, {"FAKECUDA_REUSE_CONTEXTS": "1"}),
}


@pytest.mark.parametrize("case", sorted(DIGEST_CASES))
def test_every_digest_is_made_in_each_new_context(fake, cudump_run, bare_run, case):
    how, rounds, env = DIGEST_CASES[case]
    program = [str(fake.programs["ctxcycle"]), how, str(rounds)]
    bare = bare_run(program, env_extra=env)
    assert bare.returncode == 0, bare.stderr
    ran = cudump_run(program, "--digest", env_extra=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare.stdout
    records = manifest(ran.run_dir)
    # a, b and c before and after each of the rounds' launches
    launches = rounds * PER_ROUND.get(how, 1)
    assert len(records) == 6 * launches
    failed = [(r["launch"], r.get("reason")) for r in records if not r.get("digest")]
    assert failed == []
    # c after each launch: a + b, different in every round, so its digest too (in `two`, the
    # two launches of a round leave the same c, but for the last round's NaN)
    after_c = {r["launch"]: r["digest"] for r in records if r["arg"] == 2 and r["phase"] == "after"}
    assert sorted(after_c) == list(range(1, launches + 1))
    assert len(set(after_c.values())) == rounds + (how == "two")


@pytest.mark.parametrize("how", sorted(ROUNDS))
def test_the_nan_of_the_last_context_is_found(fake, cudump_run, how):
    rounds = ROUNDS[how]
    ran = cudump_run([str(fake.programs["ctxcycle"]), how, str(rounds)], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert f"round {rounds} ok" in ran.stdout
    assert "failed" not in ran.stderr, ran.stderr
    (report,) = nan_lines(ran.stderr)
    assert f"launch {rounds} of vecAdd(float const*, float const*, float*, int)" in report
    assert "arg 2 non-finite where there were none, the first at index 7" in report
    producers = [r for r in manifest(ran.run_dir) if "nonfinite" in r]
    assert [(p["launch"], p["arg"], p["nonfinite"]) for p in producers] == [(rounds, 2, 1)]


def test_the_flight_recorder_marks_launches_in_the_new_contexts(fake, cudump_run):
    """The flight ring's registration went with the context that made it, and no call the
    shim wraps need say so (cudaDeviceReset makes none): the driver refuses the marker, and
    the shim registers the ring again and writes it. Before, every launch after the first
    reset stayed `unknown`."""
    ran = cudump_run([str(fake.programs["ctxcycle"]), "unseen", "4"], "--flight")
    assert ran.returncode == 0, ran.stderr
    assert [(x.launch, x.status) for x in read_flight(ran.run_dir).launches] == [
        (k, "completed") for k in range(1, 5)]
