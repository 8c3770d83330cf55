"""--check-nan on a program that copies to the GPU synchronously between launches
(samples/nan_source.cu: a cudaMemcpy of the next step's input after each step).

A launch that leaves a new NaN holds its stream until the shim has copied its buffers. The
program's synchronous copy waits behind that hold inside the driver, and the driver keeps a
lock meanwhile that the shim's own copies need: before the shim waited for held launches
first (gate_settle), the program stopped there until cudump's kernel gave up, minutes later."""

from __future__ import annotations

import time

import numpy as np
import pytest
from gpurun import run, sample, under_cudump

from cudump.rundir.manifest import read_manifest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("steps,bad", [(6, 1), (6, 4), (12, 9)])
def test_the_producer_is_named_and_snapshotted_and_the_program_goes_on(workdir, tmp_path,
                                                                        steps, bad):
    cmd = [*sample("nan_source"), str(steps), str(bad)]
    bare = run(cmd, workdir)
    assert bare.returncode == 0, bare.stderr
    out = tmp_path / "run"
    start = time.monotonic()
    ran = run(under_cudump(cmd, out, extra=["--check-nan"]), workdir, timeout=120)
    took = time.monotonic() - start
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout
    assert took < 60, f"{took:.0f} s: held streams were not served"
    reports = [line for line in ran.stderr.splitlines() if line.startswith("cudump: NaN/Inf")]
    assert reports and "sim::normalize" in reports[0] and f"(occurrence {bad}," in reports[0]
    records = read_manifest(out)
    # with --check-nan alone, the records of normalize's buffers after it ran are the
    # follow-up of its report (the report itself is the record with `nonfinite`)
    taken = [r for r in records if "normalize" in r.kernel and r.phase == "after"
             and "nonfinite" not in r.extra]
    # None let go: the held stream's copies are made by the kernel that holds it (GATE_COPY).
    # (With copies on a side stream, those of the first launch of each kernel were not made
    # within the shim's bound on an H200: the GPU queued them behind the hold.)
    let_go = [r for r in records if "let the stream go" in (r.reason or "")]
    assert not let_go, [(r.launch, r.arg, r.reason) for r in let_go]
    snaps = {r.arg: r for r in taken if r.file}
    assert sorted(snaps) == [0, 1, 2], [(r.arg, r.status, r.reason) for r in records]
    normalized = np.load(out / snaps[0].file)
    sums = np.load(out / snaps[2].file)
    # the zero row: its sum is 0, and 0 / 0 left NaN along it
    assert np.count_nonzero(sums == 0) == 1
    assert np.isnan(normalized).sum() == 64
