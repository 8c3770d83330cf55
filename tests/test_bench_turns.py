"""Processes that take turns (bench/turns.py) and the real-workload benchmark's --turns
(bench/realworld.py): a ring of real processes here, with a stand-in for the model program."""

from __future__ import annotations

import os
import sys
import textwrap
from itertools import pairwise
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from realworld_run import Done, Settings, run_in_turns  # noqa: E402
from realworld_table import (  # noqa: E402
    ALIKE_ROUNDS,
    BenchError,
    round_notes,
    round_ratio,
    round_ratios,
)
from turns import Ring, TurnError, Turns  # noqa: E402

# A participant as samples/torch_forward.py is one: ready after its warm-up, then each chunk
# in its turn. It prints the monotonic clock around each chunk (one clock for every process),
# and the first of the ring waits for the ring's end and says when it came.
PARTICIPANT = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {bench!r})
    from turns import Turns

    spec, label, chunks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fail = sys.argv[4] if len(sys.argv) > 4 else ""
    if fail == "before-ready":
        sys.exit(2)
    turns = Turns.parse(spec, wait_s=120)
    turns.say_ready()
    for k in range(chunks):
        turns.wait()
        if fail == "in-turn":
            sys.exit(5)
        start = time.monotonic_ns()
        deadline = time.monotonic() + 0.002
        while time.monotonic() < deadline:
            pass
        print(f"chunk {{label}} {{k}} {{start}} {{time.monotonic_ns()}}", flush=True)
        turns.pass_on()
    if label == "first":
        turns.wait()
        print(f"end {{time.monotonic_ns()}}", flush=True)
""")


@pytest.fixture
def participant(tmp_path: Path) -> Path:
    path = tmp_path / "participant.py"
    path.write_text(PARTICIPANT.format(bench=str(BENCH)))
    return path


def ring_run(tmp_path: Path, participant: Path, labels: list[str], chunks: int,
             fails: dict[str, str] | None = None) -> list[Done | BenchError]:
    fails = fails or {}
    with Ring(tmp_path / "ring", len(labels)) as ring:
        cmds = [([sys.executable, str(participant), ring.spec(i), label, str(chunks),
                  *([fails[label]] if label in fails else [])], f"run {label}")
                for i, label in enumerate(labels)]
        results = run_in_turns(ring, cmds, tmp_path, 120)
    assert not (tmp_path / "ring").exists()
    return results


def test_the_chunks_of_a_ring_run_one_at_a_time_round_by_round(tmp_path, participant):
    labels = ["first", "second", "third"]
    results = ring_run(tmp_path, participant, labels, chunks=4)
    assert all(isinstance(result, Done) for result in results), results
    chunks, end = [], None
    for result in results:
        assert isinstance(result, Done)
        for line in result.stdout.splitlines():
            word, *rest = line.split()
            if word == "chunk":
                chunks.append((int(rest[2]), int(rest[3]), rest[0], int(rest[1])))
            elif word == "end":
                end = int(rest[0])
    chunks.sort()
    # Round by round, in the ring's order, and never two at once.
    assert [(label, k) for _, _, label, k in chunks] == \
        [(label, k) for k in range(4) for label in labels]
    for (_, before_end, _, _), (after_start, _, _, _) in pairwise(chunks):
        assert after_start >= before_end
    # The first process hears of the ring's end after every process's last chunk.
    assert end is not None and end >= chunks[-1][1]


def test_a_process_that_ends_before_it_is_ready_stops_the_ring(tmp_path, participant):
    results = ring_run(tmp_path, participant, ["first", "second", "third"], chunks=3,
                       fails={"second": "before-ready"})
    failed = results[1]
    assert isinstance(failed, BenchError) and "run second: exit status 2" in str(failed)
    for result in (results[0], results[2]):
        assert isinstance(result, BenchError)
        assert "stopped: run second ended (exit status 2) before it was ready" in str(result)


def test_a_process_that_fails_in_its_turn_stops_the_others(tmp_path, participant):
    results = ring_run(tmp_path, participant, ["first", "second", "third"], chunks=3,
                       fails={"third": "in-turn"})
    assert isinstance(results[2], BenchError) and "exit status 5" in str(results[2])
    for result in results[:2]:
        assert isinstance(result, BenchError)
        assert "stopped: run third failed, so its turn would not go on" in str(result)


def test_turns_are_named_by_three_fifos(tmp_path):
    with Ring(tmp_path / "ring", 2) as ring:
        turns = Turns.parse(ring.spec(1))
        assert (turns.mine, turns.next) == (ring.paths[1], ring.paths[0])
        plain = tmp_path / "plain"
        plain.write_text("")
        with pytest.raises(ValueError, match="expected MINE,NEXT,READY"):
            Turns.parse(f"{ring.paths[0]},{ring.paths[1]}")
        with pytest.raises(ValueError, match=f"{plain} is not a FIFO"):
            Turns.parse(f"{ring.paths[0]},{plain},{ring.ready_path}")
        with pytest.raises(ValueError, match="No such file"):
            Turns.parse(f"{ring.paths[0]},{tmp_path / 'none'},{ring.ready_path}")
    assert not (tmp_path / "ring").exists()


def test_a_turn_that_never_comes_is_an_error_not_a_hang(tmp_path):
    with Ring(tmp_path / "ring", 2) as ring:
        turns = Turns.parse(ring.spec(0), wait_s=0.1)
        turns.say_ready()
        with pytest.raises(TurnError, match="did not come in 0.1 s"):
            turns.wait()
        turns.close()


def test_the_baton_goes_to_the_first_process_when_the_ring_starts(tmp_path):
    with Ring(tmp_path / "ring", 2) as ring:
        first, second = Turns.parse(ring.spec(0)), Turns.parse(ring.spec(1))
        first.say_ready()
        second.say_ready()
        ring.wait_ready(5, lambda: None)
        ring.start()
        first.wait()
        first.pass_on()
        second.wait()
        second.pass_on()
        first.wait()        # round two: back to the first
        for turns in (first, second):
            turns.close()


def test_round_ratios_pair_each_chunk_with_bares_of_the_same_round():
    rounds = [{"bare": [(1.0, 3.0), (2.0, 5.5)], "cudump --check-nan": [(1.4, 3.1), (2.8, 3.0)]},
              {"bare": [(1.5, 3.0), (1.5, 3.0)], "cudump --check-nan": [(2.4, 3.2), (2.1, 3.5)]},
              {"cudump --check-nan": [(9.0, 3.0), (9.0, 3.0)]}]     # bare failed: no pairs
    assert round_ratios(rounds, "cudump --check-nan") == pytest.approx([1.4, 1.4, 1.6, 1.4])
    # Only the rounds whose chunks ran on CPUs of one speed: the second round's probes
    # (3.0 against bare's 5.5) are not, nor is the fourth's (3.5 against 3.0: 17% off).
    assert round_ratios(rounds, "cudump --check-nan", 0.10) == pytest.approx([1.4, 1.6])
    assert round_ratio(rounds, "cudump --check-nan") == pytest.approx(1.4)
    assert round_ratio(rounds, "cudump --digest") is None
    assert round_notes("resnet18 b8", rounds) == [
        "resnet18 b8, cudump --check-nan: taking turns with bare (each chunk of forwards "
        "against bare's chunk of the same round): median ratio 1.400x, from 1.400x to 1.600x "
        "over 4 rounds; the 2 rounds whose chunks' CPU probes were within 10% of each other: "
        "median ratio 1.500x, from 1.400x to 1.600x"]


def test_a_goal_is_judged_on_the_rounds_of_one_cpu_speed_where_enough_are():
    """Cudump's chunks ran at 1.3x bare's where both ran on the fast CPUs, and at 2x where
    cudump's alone ran on a slow one: the rounds of one speed decide, unless there are fewer
    than ALIKE_ROUNDS of them."""
    def rounds(alike: int, unlike: int) -> list[dict[str, list[tuple[float, float]]]]:
        return [{"bare": [(1.0, 3.0)] * (alike + unlike),
                 "mode": [(1.3, 3.0)] * alike + [(2.0, 5.5)] * unlike}]
    assert ALIKE_ROUNDS == 8
    assert round_ratio(rounds(8, 42), "mode") == pytest.approx(1.3)
    assert round_ratio(rounds(7, 3), "mode") == pytest.approx(1.3)      # every round: 7 of 10
    assert round_ratio(rounds(7, 8), "mode") == pytest.approx(2.0)      # every round: 7 of 15
    assert round_ratio(rounds(0, 3), "mode") == pytest.approx(2.0)
    assert round_notes("w", rounds(0, 2))[0].endswith("of each other: none")


def test_with_turns_a_repetitions_runs_take_turns_and_goals_are_judged_by_round(
        monkeypatch, tmp_path):
    """Bare and --check-nan in one ring, bare first (it times its anchors once the ring is
    done). The ratio of the runs' means is 1.45x; the rounds, each chunk against bare's
    beside it, say 1.3x and 1.5x, and their median (1.4x) is the figure the goal is judged
    on."""
    import realworld

    def printed(ms: tuple[float, float], probe: float) -> str:
        return (f"iter_ms {sum(ms) / 2}\nhost_probe_us {probe}\noutput_absmean 1.5\n"
                "anchor_ms 6.0\nanchor_nosync_ms 5.0\nlaunches_per_iter 119\n"
                f"chunk_ms {ms[0]},{ms[1]}\nchunk_probe_us {probe},{probe}\n")

    seen: list[list[str]] = []

    def in_turns(ring, cmds, scratch, limit_s):
        assert ring.size == len(cmds) == 2
        seen.extend(cmd for cmd, _ in cmds)
        return [Done(printed((1.0, 3.0), 3.0), "", 1.0), Done(printed((1.3, 4.5), 5.0), "", 1.0)]

    monkeypatch.setattr(realworld, "run_in_turns", in_turns)
    monkeypatch.setattr(realworld, "sub_run", lambda *args: pytest.fail("run alone"))
    monkeypatch.setattr(realworld, "cudump_summary", lambda out, where, least: {
        "launches": 200, "planned_launches": 2, "repeated_launches": 198})
    s = Settings(1, 10, 2, 60, tmp_path, tmp_path, None, modes=("check-nan",), chunks=2,
                 turns=True)
    load = realworld.TorchWorkload("resnet18")
    said: list[str] = []
    load.rep(0, s, said.append)
    assert "--anchor" in seen[0] and "--check-nan" not in seen[0]
    assert "--check-nan" in seen[1]
    for cmd in seen:
        spec = cmd[cmd.index("--turns") + 1]
        assert len(spec.split(",")) == 3
    assert len(said) == 2 and said[1].startswith("rep 1/1 resnet18  check-nan  2.900")
    rows, notes = load.rows()
    row = next(r for r in rows if r.mode == "cudump --check-nan")
    assert row.ratio == pytest.approx(1.45) and row.matched == pytest.approx(1.4)
    assert row.met is True
    assert any("taking turns with bare" in note for note in notes)
    assert not list((tmp_path).glob("ring-*/*"))


def test_turns_runs_left_no_files(tmp_path, participant):
    ring_run(tmp_path, participant, ["first", "second"], chunks=1)
    assert os.listdir(tmp_path) == ["participant.py"]
