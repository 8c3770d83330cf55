"""The flight recorder (--flight) on a GPU: the stream memory writes that mark launches done
reach the ring, a kernel that writes through a bad pointer is named with its bad argument,
and a program that ends cleanly (a PyTorch one with a CUDA graph captured on a side stream
included) keeps its output and gets no report."""

from __future__ import annotations

import re
import signal

import pytest
from gpurun import RunDir, run, sample, under_cudump

from cudump.rundir.flight import read_flight

pytestmark = pytest.mark.gpu

SCALE = "scale(float*, int, float)"
POKE = "poke(int*, int)"


def flight_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("cudump: flight: ")]


def test_a_bad_pointer_is_named_with_its_argument(workdir, tmp_path):
    bare = run(sample("bad_pointer"), workdir)
    assert bare.returncode == 2, bare.stdout + bare.stderr
    out = tmp_path / "run"
    ran = run(under_cudump(sample("bad_pointer"), out, extra=["--flight"]), workdir)
    assert (ran.returncode, ran.stdout) == (bare.returncode, bare.stdout), ran.stderr[-3000:]
    lines = flight_lines(ran.stderr)
    assert lines, ran.stderr[-3000:]
    head = re.fullmatch(
        rf"cudump: flight: launch 4 of {re.escape(POKE)} \(stream (0x[0-9a-f]+), thread \d+\) "
        rf"was in flight when the program failed with CUDA_ERROR_ILLEGAL_ADDRESS; the last to "
        rf"complete was launch 3 of {re.escape(SCALE)}", lines[0])
    assert head, lines
    assert lines[1] == (f"cudump: flight: the likely culprit: the first launch on stream "
                        f"{head.group(1)} that did not complete; its arguments:")
    assert lines[2] == "cudump: flight:   arg0  int* = 0xdead0000  -> outside every allocation"
    assert lines[3] == "cudump: flight:   arg1  int  = 7"
    log = read_flight(out)
    assert [(x.launch, x.kernel, x.status) for x in log.launches] == [
        (1, SCALE, "completed"), (2, SCALE, "completed"), (3, SCALE, "completed"),
        (4, POKE, "in flight")]
    assert [x.launch for x in log.launches if x.culprit] == [4]
    scale_ptr = log.launches[0].args[0]
    assert scale_ptr.allocation is not None and scale_ptr.allocation.startswith("linear 0x")
    assert log.processes[0].error == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert RunDir(out).summary()["flight"] == "flight.jsonl"


def test_an_abort_after_a_synchronised_launch(workdir, tmp_path):
    """abort_after: mark<<<1, 32>>>, cudaDeviceSynchronize, abort(): nothing in flight."""
    out = tmp_path / "run"
    ran = run(under_cudump(sample("abort_after"), out, extra=["--flight"]), workdir)
    assert ran.returncode == 128 + signal.SIGABRT, ran.stderr[-3000:]
    assert flight_lines(ran.stderr)[0] == (
        "cudump: flight: no launch was in flight when the program was killed by SIGABRT; the "
        "last to complete was launch 1 of mark(float*)")


def test_launches_on_the_per_thread_default_stream_complete(workdir, tmp_path):
    """The marker of a launch on stream 0 of a _ptsz variant goes to the per-thread stream."""
    bare = run(sample("runtime_app_ptds"), workdir)
    out = tmp_path / "run"
    ran = run(under_cudump(sample("runtime_app_ptds"), out, extra=["--flight"]), workdir)
    assert (ran.returncode, ran.stdout) == (0, bare.stdout), ran.stderr[-3000:]
    assert not flight_lines(ran.stderr)
    log = read_flight(out)
    assert log.launches and all(x.api.endswith("_ptsz") for x in log.launches)
    assert {x.status for x in log.launches} == {"completed"}


def test_a_torch_program_that_exits_normally_is_untouched(workdir, tmp_path):
    """torch_ops.py: elementwise ops, a cuBLAS matmul, a CUDA graph captured (global mode, on
    a side stream) and replayed ten times. The capture must succeed without markers, the
    output is the bare run's, and nothing is printed."""
    bare = run(sample("torch_ops.py"), workdir)
    assert bare.returncode == 0, bare.stderr[-3000:]
    out = tmp_path / "run"
    ran = run(under_cudump(sample("torch_ops.py"), out, extra=["--flight"]), workdir)
    assert (ran.returncode, ran.stdout) == (0, bare.stdout), ran.stderr[-3000:]
    assert not flight_lines(ran.stderr)
    log = read_flight(out)
    statuses = {x.status for x in log.launches}
    assert statuses <= {"completed", "captured", "in flight"}, statuses
    assert "captured" in statuses
    graphs = [x for x in log.launches if x.graph is not None]
    assert graphs and all(x.status == "completed" for x in graphs)
    assert RunDir(out).summary()["flight"] == "flight.jsonl"
