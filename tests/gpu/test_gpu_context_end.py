"""A program that ends its contexts and goes on in new ones (samples/ctx_cycle.cu), under
--digest and --check-nan, with the launcher thread and without. Before cudump followed
contexts (shim/ctxlife.h), the primary context's reset left the shim launching its kernel from
a module that went with the old context: every later digest failed with
CUDA_ERROR_INVALID_HANDLE, and under --digest the program died of SIGSEGV inside
cuLaunchKernel; in contexts made and destroyed one after another, every digest after the
first context failed."""

from __future__ import annotations

import pytest
from gpurun import run, sample, under_cudump

from cudump.rundir.manifest import read_manifest

pytestmark = pytest.mark.gpu

ROUNDS = {"reset": 4, "create": 40, "two": 4}
# Launches a round: `two` runs each round in two contexts, the primary one reset between
# rounds while the other lives on (the areas cudump's kernel writes into were registered in
# the primary one: their registration goes with it, and the other context's kernel must not
# write there until they are registered again).
PER_ROUND = {"two": 2}


@pytest.mark.parametrize("launcher", [[], ["--no-hand-off"]], ids=["launcher", "own-thread"])
@pytest.mark.parametrize("how", sorted(ROUNDS))
def test_digests_in_every_context(workdir, tmp_path, how, launcher):
    cmd = [*sample("ctx_cycle"), how, str(ROUNDS[how])]
    bare = run(cmd, workdir)
    assert bare.returncode == 0, bare.stderr
    out = tmp_path / "run"
    ran = run(under_cudump(cmd, out, extra=["--digest", *launcher]), workdir, timeout=240)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout
    records = read_manifest(out)
    launches = ROUNDS[how] * PER_ROUND.get(how, 1)
    assert len(records) == 2 * launches             # g before and after each launch
    assert [(r.launch, r.reason) for r in records if not r.extra.get("digest")] == []
    after = {r.launch: r.extra["digest"] for r in records if r.phase == "after"}
    # each round writes other values (in `two`, its two launches the same, but for the NaN)
    assert len(set(after.values())) == ROUNDS[how] + (how == "two")


@pytest.mark.parametrize("how", sorted(ROUNDS))
def test_the_nan_of_the_last_context_is_found(workdir, tmp_path, how):
    rounds = ROUNDS[how]
    launches = rounds * PER_ROUND.get(how, 1)
    cmd = [*sample("ctx_cycle"), how, str(rounds)]
    out = tmp_path / "run"
    ran = run(under_cudump(cmd, out, extra=["--check-nan"]), workdir, timeout=240)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f"round {rounds} ok" in ran.stdout
    assert "failed" not in ran.stderr, ran.stderr[-3000:]
    reports = [line for line in ran.stderr.splitlines() if line.startswith("cudump: NaN/Inf")]
    assert len(reports) == 1 and f"launch {launches} of fill(float*, int, int)" in reports[0]
    assert "the first at index 7" in reports[0]
