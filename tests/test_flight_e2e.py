"""The flight recorder (--flight) end to end on the stand-in driver: tests/fakecuda/progs/flight.c
launches vecAdd three times on a stream, then (fault, abort) poke(int*, int) through the bad
pointer 0xdead0000, which the stand-in answers as a GPU does: the context is lost, nothing
after it runs, and the next synchronisation returns CUDA_ERROR_ILLEGAL_ADDRESS."""

from __future__ import annotations

import re
import signal

import pytest
from records import summary

from cudump.rundir.flight import read_flight

VECADD = "vecAdd(float const*, float const*, float*, int)"
POKE = "poke(int*, int)"
FLIGHT_LINE = re.compile(r"^cudump: flight: .*$", re.MULTILINE)


def flight_lines(stderr: str) -> list[str]:
    return FLIGHT_LINE.findall(stderr)


def statuses(run_dir) -> list[tuple[int, str, str]]:
    return [(x.launch, x.kernel, x.status) for x in read_flight(run_dir).launches]


def test_a_bad_pointer_names_the_launch_and_its_argument(fake, cudump_run, bare_run):
    prog = [str(fake.programs["flight"]), "fault"]
    bare = bare_run(prog)
    ran = cudump_run(prog, "--flight")
    assert (ran.returncode, ran.stdout) == (bare.returncode, bare.stdout) == (
        1, "launch after the fault 0\nsync 700\n"), ran.stderr
    lines = flight_lines(ran.stderr)
    head = re.fullmatch(
        rf"cudump: flight: launch 4 of {re.escape(POKE)} \(stream (0x[0-9a-f]+), thread (\d+)\) "
        rf"was in flight when the program failed with CUDA_ERROR_ILLEGAL_ADDRESS; the last to "
        rf"complete was launch 3 of {re.escape(VECADD)}", lines[0])
    assert head, lines
    stream = head.group(1)
    assert lines[1] == (f"cudump: flight: the likely culprit: the first launch on stream "
                        f"{stream} that did not complete; its arguments:")
    assert lines[2:4] == ["cudump: flight:   arg0  int* = 0xdead0000  -> outside every allocation",
                          "cudump: flight:   arg1  int  = 7"]
    assert lines[4].startswith(f"cudump: flight: also in flight: launch 5 of {VECADD} "
                               f"(stream {stream}, thread {head.group(2)})")
    assert lines[5] == f"cudump: flight: the last launches of each process are in " \
                       f"{ran.run_dir / 'flight.jsonl'}"
    # The report comes before the summary line, which stays the last.
    assert ran.stderr.strip().splitlines()[-1].startswith("cudump: 1 process, 5 launches")
    assert statuses(ran.run_dir) == [(1, VECADD, "completed"), (2, VECADD, "completed"),
                                     (3, VECADD, "completed"), (4, POKE, "in flight"),
                                     (5, VECADD, "in flight")]
    log = read_flight(ran.run_dir)
    (proc,) = log.processes
    assert (proc.slots, proc.recorded, proc.kept, proc.first_error, proc.error) == (
        256, 5, 5, 700, "CUDA_ERROR_ILLEGAL_ADDRESS")
    named = [x for x in log.launches if x.culprit]
    assert [x.launch for x in named] == [4]
    assert named[0].args[0].address == 0xDEAD0000
    good = log.launches[0].args
    assert [a.type for a in good] == ["float const*", "float const*", "float*", "int"]
    assert all(a.allocation and a.allocation.startswith("linear 0x") for a in good[:3])
    assert summary(ran.run_dir)["flight"] == "flight.jsonl"


def test_an_abort_after_the_launch(fake, cudump_run):
    ran = cudump_run([str(fake.programs["flight"]), "abort"], "--flight")
    assert ran.returncode == 128 + signal.SIGABRT, ran.stderr
    lines = flight_lines(ran.stderr)
    assert re.fullmatch(
        rf"cudump: flight: launch 4 of {re.escape(POKE)} \(stream 0x[0-9a-f]+, thread \d+\) was "
        rf"in flight when the program was killed by SIGABRT; the last to complete was launch 3 "
        rf"of {re.escape(VECADD)}", lines[0]), lines
    assert lines[1:4] == ["cudump: flight: its arguments:",
                          "cudump: flight:   arg0  int* = 0xdead0000  -> outside every allocation",
                          "cudump: flight:   arg1  int  = 7"]


def test_a_clean_run_prints_nothing_more(fake, cudump_run, tmp_path):
    prog = [str(fake.programs["flight"]), "ok"]
    plain = cudump_run(prog, run_dir=tmp_path / "plain")
    flown = cudump_run(prog, "--flight", run_dir=tmp_path / "flown")
    assert (flown.returncode, flown.stdout) == (plain.returncode, plain.stdout) == (0, "sync 0\n")
    assert flown.stderr.replace("flown", "plain") == plain.stderr
    assert statuses(flown.run_dir) == [(n, VECADD, "completed") for n in (1, 2, 3)]
    assert summary(flown.run_dir)["flight"] == "flight.jsonl"
    assert "flight" not in summary(plain.run_dir)
    assert not (plain.run_dir / "flight.jsonl").exists()


def test_a_capturing_stream_gets_no_marker(fake, cudump_run):
    """The launch recorded into the graph is kept as captured, without a completion marker
    (a stream write there would break the capture: the stand-in refuses it and the program's
    cuStreamEndCapture would fail); the graph launch is one slot, marked done."""
    ran = cudump_run([str(fake.programs["flight"]), "capture"], "--flight")
    assert (ran.returncode, ran.stdout) == (0, "sync 0\n"), ran.stderr
    assert not flight_lines(ran.stderr)
    log = read_flight(ran.run_dir)
    assert [(x.launch, x.kernel, x.status, x.graph) for x in log.launches[3:]] == [
        (4, "scale", "captured", None), (5, "graph launch", "completed", 1),
        (6, VECADD, "completed", None)]
    assert log.launches[3].args[0].type == "<8 bytes>"     # scale has no signature


def test_the_ring_keeps_the_last_launches(fake, cudump_run):
    ran = cudump_run([str(fake.programs["flight"]), "fault", "20"], "--flight", "8")
    assert ran.returncode == 1, ran.stderr
    log = read_flight(ran.run_dir)
    assert (log.processes[0].slots, log.processes[0].recorded, log.processes[0].kept) == (8, 22, 8)
    assert [x.launch for x in log.launches] == list(range(15, 23))
    assert flight_lines(ran.stderr)[0].startswith(f"cudump: flight: launch 21 of {POKE} ")
    assert f"the last to complete was launch 20 of {VECADD}" in flight_lines(ran.stderr)[0]


def test_wanted_launches_are_recorded_as_well(fake, cudump_run):
    """Under --trace every launch takes the pipeline's path: it is recorded the same way."""
    ran = cudump_run([str(fake.programs["flight"]), "fault"], "--flight", "--trace")
    assert ran.returncode == 1, ran.stderr
    assert flight_lines(ran.stderr)[0].startswith(f"cudump: flight: launch 4 of {POKE} ")
    assert [s for _, _, s in statuses(ran.run_dir)] == ["completed"] * 3 + ["in flight"] * 2


def test_without_stream_writes_completion_is_unknown(fake, cudump_run, bare_run):
    """A driver that refuses the marker's stream write: the program never sees it, and the
    recorder says what it knows."""
    prog = [str(fake.programs["flight"]), "fault"]
    ran = cudump_run(prog, "--flight", env_extra={"FAKECUDA_NO_MEMOPS": "1"})
    assert (ran.returncode, ran.stdout) == (1, bare_run(prog).stdout), ran.stderr
    assert [s for _, _, s in statuses(ran.run_dir)] == ["unknown"] * 5
    assert flight_lines(ran.stderr)[0] == (
        "cudump: flight: no launch was in flight when the program failed with "
        "CUDA_ERROR_ILLEGAL_ADDRESS; no recorded launch is known to have completed (5 launches "
        "made without a completion marker, whether they completed is unknown)")


def test_show_flight_reads_the_run_back(fake, cudump_run, cudump):
    ran = cudump_run([str(fake.programs["flight"]), "fault"], "--flight")
    shown = cudump("show", str(ran.run_dir), "--flight")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout.splitlines()
    assert out[:5] == flight_lines(ran.stderr)[:5]
    assert re.match(r"^\s+4  in flight \(named\)\s+0x[0-9a-f]+\s+\d+  poke\(int\*, int\)$",
                    out[9]), out
    pid = read_flight(ran.run_dir).processes[0].pid
    assert out[-1] == f"5 of the 5 launches of process {pid} kept (--flight 256)"
    plain = cudump_run([str(fake.programs["flight"]), "ok"], run_dir=ran.run_dir.parent / "p")
    refused = cudump("show", str(plain.run_dir), "--flight")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (f"cudump: error: {plain.run_dir} has no flight.jsonl: the "
                                      "run was not made with --flight")


@pytest.mark.parametrize("value", ["0", "16385"])
def test_a_bad_flight_size_is_one_line(fake, cudump, value):
    done = cudump("--flight", value, str(fake.programs["flight"]), "ok")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"cudump: error: argument --flight: bad --flight '{value}': the launches each process "
        "keeps, from 1 to 16384 (see 'cudump --help')"]


def test_flight_without_a_number_before_the_program(fake, cudump, tmp_path):
    """`cudump --flight PROGRAM`: the program is not taken for the number."""
    done = cudump("--flight", "--out", str(tmp_path / "run"), str(fake.programs["flight"]), "ok")
    assert (done.returncode, done.stdout) == (0, "sync 0\n"), done.stderr
    assert read_flight(tmp_path / "run").processes[0].slots == 256


def test_launches_from_many_threads_at_once(fake, cudump_run, bare_run):
    """Eight threads launch vecAdd 40 times each, each on its own stream, then the process
    dies by SIGKILL: every launch took a slot of its own, and the last 64 are kept whole.
    A launch's number and its slot are taken one after the other, so a thread can be
    overtaken between the two: the kept launches are the last 64 give or take one for each
    of the other threads."""
    prog = [str(fake.programs["threads"]), "40", "sig", str(int(signal.SIGKILL))]
    ran = cudump_run(prog, "--flight", "64")
    assert (ran.returncode, ran.stdout) == (128 + signal.SIGKILL, bare_run(prog).stdout)
    log = read_flight(ran.run_dir)
    (proc,) = log.processes
    assert (proc.recorded, proc.kept, proc.ended) == (320, 64, "was killed by SIGKILL")
    kept = [x.launch for x in log.launches]
    assert len(set(kept)) == 64 and max(kept) == 320 and min(kept) >= 257 - 7, kept
    assert {x.status for x in log.launches} == {"completed"}
    assert {x.kernel for x in log.launches} == {VECADD}
    lines = flight_lines(ran.stderr)
    assert lines[0] == ("cudump: flight: no launch was in flight when the program was killed "
                        f"by SIGKILL; the last to complete was launch 320 of {VECADD}")
