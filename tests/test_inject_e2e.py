"""Transplants end to end on the stand-in driver: `cudump --inject RUN:LAUNCH` (a launch run on
the inputs another run recorded for it), `cudump replay --inputs-from RUN` and the
confirmation `cudump bisect` suggests, with tests/fakecuda/progs/diverge.c (DIVERGE_AT=3
makes round 3's first vecAdd, launch 10, cover 3 elements fewer: a root cause; launch 11,
scale, reads what it left: a consequence), zed.c (pitched images) and ranks.c (two ranks)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zedref
from cli_run import Cudump, cli_runner
from records import manifest, summary

from cudump.analysis.bisect.confirm import confirm_command, whole_buffers
from cudump.analysis.bisect.sides import Side
from cudump.analysis.transplant.donor import parse_spec
from cudump.errors import UsageError
from cudump.policy.rules import Rule, load_rules
from cudump.rundir.injections import InjectionFormatError, InjectionRecord
from cudump.rundir.manifest import SnapshotRecord
from cudump.rundir.runs import Run

BAD = {"DIVERGE_AT": "3"}
ROUNDS = "4"
SUM_A = "sum 14995000.0"            # what diverge prints without DIVERGE_AT
ADD = "vecAdd(float const*, float const*, float*, int)"


def rule_file(path: Path, kernel: str, occurrence: int) -> Path:
    """A rule taking one launch of a kernel, before and after, as .npy."""
    path.write_text(f"rules:\n  - kernel: {kernel}\n    skip: {occurrence - 1}\n    count: 1\n"
                    "    when: both\n    format: npy\n")
    return path


def snapshot_run(cudump: Cudump, out: Path, rule: Path, *program: str,
                 env: dict[str, str] | None = None) -> Path:
    done = cudump("--out", str(out), "--rule", str(rule), "--", *program, env=env)
    assert done.returncode == 0, done.stderr
    return out


def injections(run_dir: Path) -> list[InjectionRecord]:
    """summary.json's injection records, read back by their own class."""
    return [InjectionRecord.from_json(r) for r in summary(run_dir)["injections"]]


def inject_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("cudump: inject:")]


@pytest.fixture(scope="module")
def a11(shim_lib: Path, fake, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A's snapshots of launch 11 (scale, occurrence 3), before and after: one run for the
    module, which its tests only read."""
    base = tmp_path_factory.mktemp("a11")
    rule = rule_file(base / "scale3.yaml", "scale", 3)
    return snapshot_run(cli_runner(shim_lib, fake.env(), base), base / "a11", rule,
                        str(fake.programs["diverge"]), ROUNDS)


def test_bisect_suggests_the_confirmation_and_it_shows_the_launch_itself_differs(
        cudump: Cudump, diverge: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    done = cudump("bisect", "--out", str(work), "--env-b", "DIVERGE_AT=3", "--",
                  diverge, ROUNDS)
    assert done.returncode == 1, done.stdout + done.stderr
    command = f"DIVERGE_AT=3 cudump --inject {work / 'a-snap'}:10 -- {diverge} {ROUNDS}"
    assert f"  confirm: B on A's inputs at launch 10: {command}" in done.stdout.splitlines()

    # B on A's inputs of the root cause: its inputs were equal already, so its output still
    # differs in the 3 elements B's shorter n leaves (A wrote 2998 at [999], B kept 5996).
    out = tmp_path / "confirm"
    ran = cudump("--out", str(out), "--inject", f"{work / 'a-snap'}:10", "--", diverge, ROUNDS,
                 env=BAD)
    assert ran.returncode == 0, ran.stderr
    head = (f"cudump: inject: launch 10 of vecAdd (occurrence 5): inputs from "
            f"{work / 'a-snap'} written (3 buffers, 11.7 KiB); ")
    assert inject_lines(ran.stderr) == [
        head + f"arg 0 after now equals {work / 'a-snap'}'s",
        head + f"arg 1 after now equals {work / 'a-snap'}'s",
        head + f"arg 2 after still differs from {work / 'a-snap'}'s in 3 of 1,000 elements "
               "(max abs diff 2998)"]
    assert "inputs injected at 1 of 1 launch;" in ran.stderr.splitlines()[-1]
    [record] = injections(out)
    assert (record.status, record.launch, record.kernel, record.occurrence) == \
        ("written", 10, ADD, 5)
    assert (record.live_kernel, record.live_occurrence, record.buffers, record.bytes) == \
        (ADD, 5, 3, 12000)
    assert [(o.arg, o.status, o.differing) for o in record.outputs] == \
        [(0, "equal", 0), (1, "equal", 0), (2, "differs", 3)]
    # The launch's buffers after it, as a rule `when: after` takes them.
    taken = manifest(out)
    assert {(r["launch"], r["arg"], r["phase"], r["rule"]) for r in taken} == \
        {(10, arg, "after", "--inject") for arg in range(3)}
    assert all(r["file"] == o.file for r, o in zip(taken, record.outputs, strict=True))


def test_a_consequence_on_good_inputs_leaves_the_good_outputs(
        cudump: Cudump, diverge: str, a11: Path, tmp_path: Path) -> None:
    out = tmp_path / "b"
    ran = cudump("--out", str(out), "--inject", f"{a11}:11", "--", diverge, ROUNDS, env=BAD)
    assert ran.returncode == 0, ran.stderr
    assert inject_lines(ran.stderr) == [
        f"cudump: inject: launch 11 of scale (occurrence 3): inputs from {a11} written "
        f"(1 buffer, 3.9 KiB); arg 0 after now equals {a11}'s"]
    # scale's output was the only thing the short vecAdd had spoilt: B ends as A does.
    assert ran.stdout.splitlines()[0] == SUM_A
    [record] = injections(out)
    [after] = [r for r in manifest(a11) if r["phase"] == "after"]
    assert np.array_equal(np.load(out / str(record.outputs[0].file)), np.load(a11 / after["file"]))


def test_another_kernel_at_the_launch_is_refused_and_left_alone(
        cudump: Cudump, diverge: str, a11: Path, fake, tmp_path: Path) -> None:
    # One more fill first: launch 11 of this run is vecAdd, not scale.
    env = {**BAD, "DIVERGE_EXTRA": "1"}
    out = tmp_path / "b"
    ran = cudump("--out", str(out), "--inject", f"{a11}:11", "--", diverge, ROUNDS, env=env)
    assert ran.returncode == 0, ran.stderr
    errors = [ln for ln in ran.stderr.splitlines() if "error" in ln]
    assert errors == [f"cudump: error: --inject {a11}:11: launch 11 of this run is vecAdd, not "
                      f"scale as in {a11}; nothing written, the program runs on untouched"]
    assert not inject_lines(ran.stderr)
    bare = subprocess.run([diverge, ROUNDS], env=fake.env() | env, capture_output=True,
                          text=True, timeout=60)
    assert ran.stdout == bare.stdout
    assert manifest(out) == []                      # nothing taken of a launch left alone
    [record] = injections(out)
    assert (record.status, record.live_kernel, record.buffers) == ("refused", ADD, 0)
    assert "inputs injected at 0 of 1 launch;" in ran.stderr.splitlines()[-1]


def test_buffers_of_another_size_are_refused(cudump: Cudump, diverge: str, a11: Path,
                                             tmp_path: Path) -> None:
    ran = cudump("--out", str(tmp_path / "b"), "--inject", f"{a11}:11", "--", diverge, ROUNDS,
                 env={"DIVERGE_SIZE": "500"})
    assert ran.returncode == 0, ran.stderr
    assert (f"cudump: error: --inject {a11}:11: sizes differ: {a11}'s arg 0 is 4,000 bytes "
            "(uint8 [4000]), this launch's 2,000 bytes; nothing written, the program runs on "
            "untouched") in ran.stderr.splitlines()
    [record] = injections(tmp_path / "b")
    assert record.status == "refused" and record.reason and "sizes differ" in record.reason


def test_a_launch_never_made_is_said_at_the_end(cudump: Cudump, diverge: str, a11: Path,
                                                tmp_path: Path) -> None:
    ran = cudump("--out", str(tmp_path / "b"), "--inject", f"{a11}:11", "--", diverge, "2")
    assert ran.returncode == 0, ran.stderr
    assert inject_lines(ran.stderr) == ["cudump: inject: launch 11 of scale (occurrence 3): "
                                        "never reached in this run; nothing written"]
    [record] = injections(tmp_path / "b")
    assert (record.status, record.pid, record.outputs) == ("not-reached", None, [])


def test_pitched_images_are_written_row_by_row_at_the_live_pitch(
        cudump: Cudump, fake, tmp_path: Path) -> None:
    """RUN's frame 1 conversion is given frame 0's UYVY input (its file swapped for frame 0's):
    the injected launch turns frame 0's pixels at frame 1's gain, row by row through a
    pitch of 512 bytes (rows of 256), and the program, which checks every pixel, fails."""
    w, h = 64, 16
    zed = [str(fake.programs["zed"]), "2", "--size", f"{w}x{h}"]
    rule = tmp_path / "zed.yaml"
    rule.write_text("rules:\n  - kernel: device::FrP0k*\n    when: both\n    format: npy\n")
    run = snapshot_run(cudump, tmp_path / "run", rule, *zed)
    records = {(r["launch"], r["arg"], r["phase"]): r for r in manifest(run)}
    shutil.copyfile(run / records[2, 0, "before"]["file"], run / records[4, 0, "before"]["file"])
    out = tmp_path / "b"
    ran = cudump("--out", str(out), "--inject", f"{run}:4", "--", *zed)
    assert ran.returncode != 0                     # the program's own check saw it
    lines = inject_lines(ran.stderr)
    assert len(lines) == 3 and all(f"inputs from {run} written (3 buffers, " in ln
                                   for ln in lines), ran.stderr
    assert "arg 2 after still differs" in lines[1] and "arg 3 after still differs" in lines[2]
    [record] = injections(out)
    uyvy = zedref.nv12_to_uyvy(*zedref.synth_nv12(w, h, 0)).reshape(h, 4 * w)
    left, right = zedref.frp0k(uyvy, w, h, 1.25)
    by_arg = {o.arg: np.load(out / str(o.file)) for o in record.outputs}
    assert np.array_equal(by_arg[2].reshape(h, w, 4), left)
    assert np.array_equal(by_arg[3].reshape(h, w, 4), right)


def test_replay_inputs_from_another_run(cudump: Cudump, diverge: str, a11: Path,
                                        tmp_path: Path) -> None:
    captured = tmp_path / "cap"
    done = cudump("--out", str(captured), "--capture-launch", "vecAdd", "--capture-launch",
                  "scale", "--", diverge, ROUNDS, env=BAD)
    assert done.returncode == 0, done.stderr
    equal = cudump("replay", str(captured), "--launch", "11", "--inputs-from", str(a11))
    assert equal.returncode == 0, equal.stdout + equal.stderr
    assert (f"replay: launch 11 of scale (occurrence 3): inputs from {a11} written (1 buffer, "
            f"3.9 KiB); arg 0 after now equals {a11}'s") in equal.stdout.splitlines()
    other = cudump("replay", str(captured), "--launch", "10", "--inputs-from", f"{a11}:11")
    assert other.returncode == 2
    assert other.stderr.strip() == (f"cudump: error: --inputs-from {a11}:11: launch 11 of "
                                    f"{a11} is scale, not vecAdd as captured; nothing "
                                    "replayed")


def test_replay_of_the_root_cause_on_good_inputs_still_differs(
        cudump: Cudump, diverge: str, tmp_path: Path) -> None:
    rule = rule_file(tmp_path / "add5.yaml", "vecAdd", 5)
    good = snapshot_run(cudump, tmp_path / "a", rule, diverge, ROUNDS)
    captured = tmp_path / "cap"
    assert cudump("--out", str(captured), "--capture-launch", "vecAdd", "--", diverge, ROUNDS,
                  env=BAD).returncode == 0
    done = cudump("replay", str(captured), "--launch", "10", "--inputs-from", str(good))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith(
        f"arg 2 after still differs from {good}'s in 3 of 1,000 elements (max abs diff 2998)")


def test_ranks_pick_the_process(cudump: Cudump, fake, tmp_path: Path) -> None:
    """RUN has launch 2 in both ranks: RUN:2 names neither; RUN:1:2 takes rank 1's, written
    into this run's rank 1 whichever starts first. Rank 1 of this run poisons its launch 2
    (inf + -inf): on the good run's inputs it leaves what the good run's rank 1 left."""
    prog = str(fake.programs["ranks"])
    rule = rule_file(tmp_path / "add2.yaml", "vecAdd", 2)
    good = snapshot_run(cudump, tmp_path / "good", rule, prog, "3", "5", "0")
    vague = cudump("--out", str(tmp_path / "x"), "--inject", f"{good}:2", "--", prog)
    assert vague.returncode == 2 and len(vague.stderr.splitlines()) == 1
    assert f"2 processes of {good} made launch 2; give RUN:PID_OR_RANK:LAUNCH" in vague.stderr
    assert "(rank 0)" in vague.stderr and "(rank 1)" in vague.stderr
    assert not (tmp_path / "x").exists()
    out = tmp_path / "bad"
    ran = cudump("--out", str(out), "--inject", f"{good}:1:2", "--", prog, "3", "5", "2",
                 env={"RANKS_REVERSE": "1"})
    assert ran.returncode == 0, ran.stderr
    lines = inject_lines(ran.stderr)
    assert lines[-1] == (f"cudump: inject: launch 2 of vecAdd (occurrence 2): inputs from "
                         f"{good} written (3 buffers, 12.0 KiB); arg 2 after now equals "
                         f"{good}'s")
    [record] = injections(out)
    ranks = {int(pid): rank for pid, rank in summary(out)["ranks"].items()}
    assert record.source_rank == 1 and ranks[record.pid] == 1


@pytest.mark.parametrize("spec, problem", [
    ("{run}", "which launch? give RUN:LAUNCH or RUN:PID_OR_RANK:LAUNCH"),
    ("{run}:x", "expected RUN:LAUNCH or RUN:PID_OR_RANK:LAUNCH"),
    ("{tmp}/nowhere:3", "{tmp}/nowhere is not a cudump run directory (no manifest.jsonl)"),
    ("{run}:0", "launches are numbered from 1"),
    ("{run}:12", "{run} has no snapshot of launch 12 (cudump ls {run} lists its launches)"),
    ("{run}:7:11", "no process of {run} with pid or rank 7 made launch 11"),
    ("{digests}:11", "{digests} holds no 'before' snapshot of launch 11 (digests or scans "
                     "only?)"),
])
def test_bad_injections_are_one_line_before_anything_runs(
        cudump: Cudump, diverge: str, a11: Path, tmp_path: Path, spec: str,
        problem: str) -> None:
    digests = tmp_path / "digests"
    if "{digests}" in spec:
        assert cudump("--out", str(digests), "--digest", "--", diverge, ROUNDS).returncode == 0
    names = {"run": a11, "tmp": tmp_path, "digests": digests}
    text = spec.format(**names)
    out = tmp_path / "never"
    done = cudump("--out", str(out), "--inject", text, "--", diverge, ROUNDS)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith(f"cudump: error: --inject {text}: {problem.format(**names)}"), line
    assert done.stdout == "" and not out.exists()


def test_inject_refuses_the_prompt_and_two_writes_into_one_launch(
        cudump: Cudump, diverge: str, a11: Path) -> None:
    done = cudump("--inject", f"{a11}:11", "--break", "scale", "--", diverge)
    assert done.returncode == 2
    assert done.stderr.strip() == ("cudump: error: --inject runs without the prompt: leave "
                                   "out --break, --batch, --break-on-nan and rules with "
                                   "'action: break'")
    twice = cudump("--inject", f"{a11}:11", "--inject", f"{a11}:11", "--", diverge)
    assert twice.returncode == 2
    assert "would both write into launch 11 of one process" in twice.stderr


def test_a_run_path_with_colons(tmp_path: Path) -> None:
    run = tmp_path / "a:1"
    run.mkdir()
    (run / "manifest.jsonl").write_text("")
    assert parse_spec(f"{run}:5") == parse_spec(f"{run}:5")
    spec = parse_spec(f"{run}:5")
    assert (spec.run, spec.who, spec.launch) == (run, None, 5)
    spec = parse_spec(f"{run}:2:5")
    assert (spec.run, spec.who, spec.launch) == (run, 2, 5)
    assert parse_spec(str(run), "--inputs-from", launch_required=False).launch is None
    with pytest.raises(UsageError, match="which launch"):
        parse_spec(str(run))


def test_injection_records_are_checked_when_read() -> None:
    record = InjectionRecord(source="a", launch=3, kernel="k()", occurrence=1, source_pid=9,
                             status="written")
    assert InjectionRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    for bad, says in (({**record.to_json(), "status": "maybe"}, "unknown status 'maybe'"),
                      ({**record.to_json(), "launch": "3"},
                       "field 'launch': expected a whole number, got \"3\""),
                      ({**record.to_json(), "extra": 1}, "unknown field 'extra'"),
                      ({"source": "a"}, "field 'launch' is missing"),
                      ({**record.to_json(), "outputs": [{"arg": 0, "offset": 0,
                                                         "status": "differs", "max_abs": "x"}]},
                       "output: field 'max_abs': expected a number, got \"x\"")):
        with pytest.raises(InjectionFormatError, match=re.escape(says)):
            InjectionRecord.from_json(bad)
    # a null stands for a field left out; a difference may be a whole or a decimal number
    kept = {**record.to_json(), "buffers": None,
            "outputs": [{"arg": 2, "offset": 0, "status": "differs", "max_abs": 1}]}
    back = InjectionRecord.from_json(kept)
    assert back.buffers == 0 and back.outputs[0].max_abs == 1


def test_bisect_suggests_only_what_is_true_and_short(tmp_path: Path) -> None:
    def rules(text: str) -> list[Rule]:
        path = tmp_path / "r.yaml"
        path.write_text(f"rules:\n  - kernel: k\n{text}")
        return load_rules([path])

    assert whole_buffers([]) and whole_buffers(rules("    overrides:\n      0: {dtype: uint8}\n"))
    assert not whole_buffers(rules("    overrides:\n      0: {count: 4}\n"))
    assert not whole_buffers(rules("    overrides:\n      0: {width: 4, height: 2}\n"))
    snap = tmp_path / "a-snap"
    snap.mkdir()
    records = [SnapshotRecord("k(float*)", "_Z1kPf", 7, 1, pid, [1, 1, 1], [1, 1, 1], "0x0", 0,
                              "float*", "before", "0x10", "float32", [4], f"{pid}.npy", rank=rank)
               for pid, rank in ((100, 0), (200, 1))]
    (snap / "manifest.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
    run = Run.open(snap)
    b = Side("B", ("./app", "x"), (("SEED", "2 3"),))
    assert confirm_command(b, run, records[1]) == \
        f"SEED='2 3' cudump --inject {snap}:1:7 -- ./app x"
    assert confirm_command(Side("B", ("./app", "y" * 300)), run, records[0]) is None
