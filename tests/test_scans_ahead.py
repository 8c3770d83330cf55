"""Scans ahead (on unless --no-scans-ahead, shim/ahead.h): a launch made with a kept plan has
its scans (or digests) before it made by the launch of cudump's kernel after the launch
before it, when that launch came next last time and nothing came between the two. Checked on
the stand-in driver: the results are those of the launch's own scans, and a host write, a
memset or any other call between two launches voids them."""

from __future__ import annotations

import re
from pathlib import Path

from records import manifest, nan_lines, summary

ADD = "vecAdd(float const*, float const*, float*, int)"


def said(stderr: str) -> list[str]:
    """The NaN report lines, with the process id left out (it differs from run to run)."""
    return [re.sub(r"process \d+", "process P", line) for line in nan_lines(stderr)]


def digests(run_dir) -> dict[tuple, str]:
    return {(r["launch"], r["arg"], r.get("offset", 0), r["phase"]): r["digest"]
            for r in manifest(run_dir)}


def both_ways(cudump_run, program: list[str], mode: str, where: Path) -> tuple:
    """The program under `mode` with scans ahead (in where/ahead) and without them (in
    where/alone), each having exited 0."""
    ahead = cudump_run(program, mode, run_dir=where / "ahead")
    alone = cudump_run(program, mode, "--no-scans-ahead", run_dir=where / "alone")
    assert ahead.returncode == 0 and alone.returncode == 0, ahead.stderr + alone.stderr
    return ahead, alone


def test_digests_made_ahead_are_the_launches_own(fake, cudump_run, tmp_path):
    """diverge launches the same four kernels over the same buffers every round: from the
    third round on, each launch's digests before it are made with the launch before it. The
    digests are those of a run without scans ahead, buffer for buffer."""
    program = [str(fake.programs["diverge"]), "8"]
    ahead, alone = both_ways(cudump_run, program, "--digest", tmp_path)
    assert ahead.stdout == alone.stdout
    assert digests(ahead.run_dir) == digests(alone.run_dir)
    assert len(digests(ahead.run_dir)) > 50
    made, void = summary(ahead.run_dir)["scans_ahead"], summary(ahead.run_dir)["scans_ahead_void"]
    assert made >= 20, (made, void)
    assert (summary(alone.run_dir)["scans_ahead"], summary(alone.run_dir)["scans_ahead_void"]) \
        == (0, 0)


def test_a_buffer_one_launch_writes_and_the_next_reads_is_read_once(fake, cudump_run,
                                                                    tmp_path):
    """chain: square(x, y) writes y, and vecAdd(y, b, z) reads it right after. The digests
    of y after square and before vecAdd, made ahead in the same launch of cudump's kernel,
    read y once (tooljob.h: a twin), so cudump's kernel reads fewer bytes than with no
    scans ahead, where each launch's digests before it have a launch of their own; every
    digest is the same."""
    program = [str(fake.programs["chain"]), "12", "37"]
    counts = {way: tmp_path / f"{way}.stats" for way in ("ahead", "alone")}
    ahead = cudump_run(program, "--digest", run_dir=tmp_path / "ahead",
                       env_extra={"FAKECUDA_STATS": str(counts["ahead"])})
    alone = cudump_run(program, "--digest", "--no-scans-ahead", run_dir=tmp_path / "alone",
                       env_extra={"FAKECUDA_STATS": str(counts["alone"])})
    assert ahead.returncode == 0 and alone.returncode == 0, ahead.stderr + alone.stderr
    assert digests(ahead.run_dir) == digests(alone.run_dir)
    assert summary(ahead.run_dir)["scans_ahead"] >= 10
    read = {way: dict(line.split() for line in path.read_text().splitlines())["tool_bytes"]
            for way, path in counts.items()}
    # 12 steps of 2 launches, each with 2 phases: 2 buffers of 4 KiB in square's, 3 in vecAdd's:
    # 240 KiB read with no scans ahead; y read once where the two phases meet.
    assert int(read["alone"]) == 12 * 2 * (2 + 3) * 4096, read
    assert int(read["ahead"]) <= int(read["alone"]) - 10 * 4096, read


def test_a_host_copy_between_two_launches_voids_their_scans_ahead(fake, cudump_run):
    """chain runs square(x, y), then vecAdd(y, b, z), eight steps; step 7 copies a NaN into
    y between the two. vecAdd's scans before it, made ahead with square's, would have found
    y finite: the copy voids them, vecAdd scans y itself, and the NaN is reported as carried
    on from the host's copy, not as made by vecAdd. The other steps use their scans ahead."""
    ran = cudump_run([str(fake.programs["chain"]), "8", "37", "a7"], "--check-nan",
                     "--scans-ahead")
    assert ran.returncode == 0, ran.stderr
    (line,) = nan_lines(ran.stderr)
    assert f"launch 14 of {ADD}" in line
    assert line.endswith("propagated: arg 0 was already non-finite (from a host-to-device copy "
                         "of 4 bytes (cuMemcpyHtoDAsync) before launch 14)")
    totals = summary(ran.run_dir)
    assert totals["first_nan_producer"]["kind"] == "copy"
    # Square learns in step 1 that vecAdd comes next; steps 2-8 scan ahead with it, and all
    # but step 7 use them. vecAdd never learns what comes after it: x's copy comes between.
    assert (totals["scans_ahead"], totals["scans_ahead_void"]) == (6, 1), totals


def test_nan_reports_are_those_without_scans_ahead(fake, cudump_run, tmp_path):
    """chain with step 5's x overflowing: square makes the Inf, and vecAdd, scanned ahead
    with square, carries it on. The reports are those of a run without scans ahead."""
    program = [str(fake.programs["chain"]), "8", "37", "5"]
    ran, alone = both_ways(cudump_run, program, "--check-nan", tmp_path)
    assert len(said(ran.stderr)) == 2
    assert said(ran.stderr) == said(alone.stderr)
    assert [r["launch"] for r in manifest(ran.run_dir) if "nonfinite" in r] == \
        [r["launch"] for r in manifest(alone.run_dir) if "nonfinite" in r]

    def taken(run_dir) -> list[tuple]:
        return sorted((r["launch"], r["arg"], r["phase"]) for r in manifest(run_dir)
                      if r.get("file"))

    # square's scans after it, made in the same launch of cudump's kernel as vecAdd's made
    # ahead, still hold the stream where they find the Inf, and its buffers are copied.
    assert taken(ran.run_dir) == taken(alone.run_dir)
    assert {launch for launch, _, _ in taken(ran.run_dir)} == {9, 10}
    assert (summary(ran.run_dir)["scans_ahead"], summary(ran.run_dir)["scans_ahead_void"]) \
        == (7, 0)
    assert summary(alone.run_dir)["scans_ahead"] == 0


def by_stream(run_dir) -> dict[tuple, list[str]]:
    """Each stream's digests in launch order: launch numbers interleave differently from run
    to run, and each thread of `threads` has its own stream and buffers."""
    out: dict[tuple, list[str]] = {}
    for r in sorted(manifest(run_dir), key=lambda r: (r["stream"], r["launch"])):
        out.setdefault((r["stream"], r["arg"], r["phase"]), []).append(r["digest"])
    return out


def test_eight_threads_launching_at_once_get_the_digests_they_would_alone(fake, cudump_run,
                                                                          tmp_path):
    """threads: eight threads, each launching vecAdd on its own stream, 200 times. Scans
    ahead are made only while no other thread is inside a call that may put work on a
    stream (how many, the scheduler decides): the digests are those of a run without them,
    and none is lost."""
    program = [str(fake.programs["threads"]), "200"]
    ahead, alone = both_ways(cudump_run, program, "--digest", tmp_path)
    assert "never came back" not in ahead.stderr
    mine, theirs = digests(ahead.run_dir), digests(alone.run_dir)
    assert len(mine) == len(theirs) == 8 * 200 * 2 * 3
    assert sorted(by_stream(ahead.run_dir).values()) == sorted(by_stream(alone.run_dir).values())


def test_threads_taking_turns_use_scans_ahead_and_get_the_same_digests(fake, cudump_run,
                                                                       tmp_path):
    """threads 200 turns 10: the same eight threads, set up first, then launching ten at a
    time each under one lock, so that while one launches no other is in a call. Within a
    turn each launch uses the scans made with the one before it (from a thread's first turn
    on: its plan is kept at its second launch and learns at its third what comes next);
    the first launch of a turn voids those the last turn made if another thread made them.
    The digests are those of a run without scans ahead."""
    program = [str(fake.programs["threads"]), "200", "turns", "10"]
    ahead, alone = both_ways(cudump_run, program, "--digest", tmp_path)
    assert sorted(by_stream(ahead.run_dir).values()) == sorted(by_stream(alone.run_dir).values())
    assert len(digests(ahead.run_dir)) == 8 * 200 * 2 * 3
    assert summary(ahead.run_dir)["scans_ahead"] > 0


def test_a_tensor_map_encoded_between_two_launches_does_not_void_them(fake, cudump_run,
                                                                      tmp_path):
    """cuDNN and cuBLASLt encode a Hopper kernel's tensor maps right before each launch: an
    encode works on the host alone (api.h's rows say HOST), so the scans ahead of the
    launch after it hold, as where the map is encoded once. tensormaps 12 ... encode: tma_copy
    12 times, its map encoded again before each launch."""
    def run(way: str, *more: str, name: str):
        ran = cudump_run([str(fake.programs["tensormaps"]), "12", "0", "0", "tiled", way],
                         "--digest", *more, run_dir=tmp_path / name)
        assert ran.returncode == 0, ran.stderr
        return ran

    again, once = run("encode", name="again"), run("launch", name="once")
    alone = run("encode", "--no-scans-ahead", name="alone")
    assert again.stdout == alone.stdout
    assert digests(again.run_dir) == digests(alone.run_dir)
    made = summary(again.run_dir)["scans_ahead"]
    assert made == summary(once.run_dir)["scans_ahead"] and made >= 9, made


def test_a_host_copy_into_a_map_tensor_still_voids_them(fake, cudump_run, tmp_path):
    """The same, with a NaN copied into the map's tensor before launch 6 (and the value put
    back before launch 7): the copies void the scans ahead, the encodes do not, and the NaN
    is reported as the run without scans ahead reports it."""
    program = [str(fake.programs["tensormaps"]), "12", "6", "0", "tiled", "encode"]
    ran, alone = both_ways(cudump_run, program, "--check-nan", tmp_path)
    assert said(ran.stderr) and said(ran.stderr) == said(alone.stderr)
    first = summary(ran.run_dir)["first_nan_producer"]
    assert (first["kind"], first["before_launch"]) == ("copy", 6)
    assert summary(ran.run_dir)["scans_ahead"] > 0


def test_a_map_encoded_for_other_memory_is_another_launch(fake, cudump_run, tmp_path):
    """tensormaps 12 8 6 tiled encode: from launch 6 the map is encoded for a second tensor
    (and a NaN copied into it before launch 8). The map's bytes are the launch's parameters:
    launch 6 is not the launch whose scans were made ahead with launch 5, and scans its
    buffers itself. Digests and NaN reports are those of a run without scans ahead."""
    program = [str(fake.programs["tensormaps"]), "12", "8", "6", "tiled", "encode"]
    for mode in ("--digest", "--check-nan"):
        ahead, alone = both_ways(cudump_run, program, mode, tmp_path / mode.lstrip("-"))
        assert ahead.stdout == alone.stdout
        assert said(ahead.stderr) == said(alone.stderr)
        assert bool(said(ahead.stderr)) == (mode == "--check-nan")
        if mode == "--digest":
            assert digests(ahead.run_dir) == digests(alone.run_dir)
        totals = summary(ahead.run_dir)
        assert totals["scans_ahead"] > 0 and totals["scans_ahead_void"] > 0, totals


def test_a_kernel_over_the_same_buffers_in_every_layer_gets_its_scans_ahead(fake, cudump_run,
                                                                           tmp_path):
    """layers 4 30: each of four layers runs vecAdd over its own weights, then square over
    the same two buffers in every layer, 30 steps with nothing between the launches. The
    plan that came after square's last launch is the wrong guess three times in four; the
    plans of the launches made in a row before it tell the layers apart. Once a step has
    shown each context (the chain is eight plans long from the third step on), every launch
    uses scans ahead, and the digests are those of a run without them."""
    program = [str(fake.programs["layers"]), "4", "30"]
    ahead, alone = both_ways(cudump_run, program, "--digest", tmp_path)
    assert ahead.stdout == alone.stdout
    assert digests(ahead.run_dir) == digests(alone.run_dir)
    assert len(digests(ahead.run_dir)) == 120 * 3 * 2 + 120 * 2 * 2  # (args) x (before, after)
    totals = summary(ahead.run_dir)
    assert totals["scans_ahead"] >= 27 * 8 and totals["scans_ahead_void"] <= 4, totals
    checked = cudump_run(program, "--check-nan", run_dir=tmp_path / "nan")
    assert checked.returncode == 0 and checked.stdout == alone.stdout, checked.stderr
    assert said(checked.stderr) == []
    assert summary(checked.run_dir)["scans_ahead"] >= 27 * 8
