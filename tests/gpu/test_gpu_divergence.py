"""`cudump bisect` and its confirmation (`cudump --inject`) on PyTorch training steps that are
not deterministic: samples/torch_diverge.py, whose embedding is read with index_select, whose
backward is index_add_: atomic adds on CUDA, in whatever order the GPU runs them.

- The program against itself, with --baseline-runs 2: A's identical runs differ (from the
  first backward's index_add_ on), and every buffer that differs between A and B is one of
  those, so bisect says there is no divergence beyond nondeterminism and exits with 0.
- A poked by 0 against B poked by DELTA at one element of fc1's weight
  (TORCH_DIVERGE_POKE=fc1:INDEX:DELTA, before training: one launch of PyTorch's elementwise
  add over the weight, DELTA its by-value alpha): that add is the first divergent launch and
  the root cause (its inputs matched, its output differs). Its snapshots, read back, hold the
  weight: at INDEX the value the program printed, the same on both sides before it ran, and
  DELTA apart after it, and nothing else apart.
- The confirmation bisect prints, run: B again with A's inputs written into that launch. The
  weight it leaves still differs from A's at that one element, and only there within the
  weight (the launch's own parameter makes the difference, not its inputs); the one-hot
  input is left equal.

The poke comes before any nondeterministic launch, so the second bisection needs no baseline
runs. The program is copied into the tests' working directory and run from there, so that
the command bisect suggests stays short enough for it to print.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gpurun import SAMPLES, TIMEOUT_S, cudump_command

from cudump.rundir.manifest import SnapshotRecord, read_manifest

pytestmark = pytest.mark.gpu

PROGRAM = "torch_diverge.py"
LAYER, INDEX, DELTA = "fc1", 1234, 0.001
# fc1's weight: 2048 x 256 float32. Its snapshots reach past it, to the end of its
# allocation block, where other memory need not be equal from run to run (seen on an H100:
# two more elements there differed after the confirmation run).
WEIGHT_ELEMENTS = 2048 * 256
POKE_A = f"TORCH_DIVERGE_POKE={LAYER}:{INDEX}:0"
POKE_B = f"TORCH_DIVERGE_POKE={LAYER}:{INDEX}:{DELTA}"
# A variable the program does not read: bisect refuses two sides that are the same command
# in the same environment.
UNRELATED = "UNRELATED=1"

LAUNCH = r"launch (?P<launch>\d+) of (?P<kernel>.+) \(occurrence (?P<occurrence>\d+)\)"
ROOT_CAUSE = re.compile(rf"^  root cause: {LAUNCH}, arg (?P<arg>\d+) (?P<phase>before|after): "
                        r"its inputs matched, its output differs$", re.MULTILINE)
FIRST = re.compile(rf"^  first divergent: {LAUNCH}, arg \d+ (?:before|after); "
                   r"(?P<matched>\d+) launch(?:es)? matched before it$", re.MULTILINE)
NONDETERMINISTIC = re.compile(rf"^  nondeterministic: (?P<count>\d+) buffers? differ between "
                              rf"identical runs of A; the first: {LAUNCH}, arg \d+ "
                              r"(?:before|after)$", re.MULTILINE)
NO_DIVERGENCE = re.compile(r"^no divergence beyond nondeterminism \((?P<count>\d+) buffers? "
                           r"differs? between identical runs\)$", re.MULTILINE)
CONFIRM = re.compile(r"^  confirm: B on A's inputs at launch (?P<launch>\d+): (?P<command>.+)$",
                     re.MULTILINE)
POKED = re.compile(rf"^poke {LAYER}\.weight\[{INDEX}\]: (?P<old>\S+) -> (?P<new>\S+) "
                   r"\(delta \S+\)$", re.MULTILINE)
INJECTED = re.compile(rf"^cudump: inject: {LAUNCH}: inputs from (?P<source>\S+) written "
                      r"\((?P<buffers>\d+) buffers?, [^)]*\); arg (?P<arg>\d+)"
                      r"(?: \(\+(?P<offset>\d+)\))? after (?P<outcome>.+)$", re.MULTILINE)
STILL_DIFFERS = re.compile(r"^still differs from (?P<source>\S+)'s in (?P<differing>[\d,]+) of "
                           r"[\d,]+ elements \(max abs diff (?P<max>\S+)\)$")


def shown(done: subprocess.CompletedProcess[str]) -> str:
    """What a failed assertion prints: the exit status and the ends of both outputs."""
    return (f"\nexit status {done.returncode}\n--- stdout\n{done.stdout[-8000:]}\n"
            f"--- stderr\n{done.stderr[-4000:]}")


def cudump(args: list[str], cwd: Path,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cudump_command(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def cwd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory holding a copy of the program."""
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("diverge")
    shutil.copy(SAMPLES / PROGRAM, path / PROGRAM)
    return path


def program() -> list[str]:
    return [sys.executable, PROGRAM]


def as_floats(run_dir: Path, record: SnapshotRecord) -> np.ndarray:
    """A snapshot's bytes as float32 (PyTorch's buffers are typed from the kernel's name, or
    not at all)."""
    assert record.status == "ok" and record.file, (record.reason, record)
    array = np.load(run_dir / record.file)
    return np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=np.float32)


def where(record: SnapshotRecord) -> tuple[int, int]:
    """A buffer's argument and the byte offset of its pointer inside it."""
    return record.arg, int(record.extra.get("offset") or 0)


def apart(x: np.ndarray, y: np.ndarray) -> list[int]:
    """Where two float buffers differ (NaN equal to NaN: memory past a tensor may hold any
    bits)."""
    assert x.shape == y.shape, (x.shape, y.shape)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    return np.flatnonzero(~same).tolist()


def buffers(run_dir: Path, launch: int) -> dict[tuple[int, int, str], np.ndarray]:
    """A snapshot run's buffers of one launch as float32, by (arg, offset, phase)."""
    found = {(*where(r), r.phase): as_floats(run_dir, r)
             for r in read_manifest(run_dir) if r.launch == launch}
    assert found, f"{run_dir} has no snapshot of launch {launch}"
    return found


def poke_values(log: Path) -> tuple[np.float32, np.float32]:
    """The element's value before and after the poke, as the program printed them."""
    found = POKED.search(log.read_text(errors="replace"))
    assert found, f"no poke line in {log}:\n{log.read_text(errors='replace')[-3000:]}"
    return np.float32(float(found["old"])), np.float32(float(found["new"]))


def test_the_program_against_itself_differs_only_where_identical_runs_do(cwd, tmp_path):
    work = tmp_path / "work"
    done = cudump(["bisect", "--baseline-runs", "2", "--out", str(work), "--env-b", UNRELATED,
                   "--", *program()], cwd)
    out = done.stdout
    assert done.returncode == 0, shown(done)
    assert "Traceback" not in out + done.stderr, shown(done)
    for n in (1, 2):
        assert re.search(rf"^  A \(baseline {n} of 2\): \d+ records in a-base{n}/, exit "
                         r"status 0$", out, re.MULTILINE), shown(done)
    # The GPU ran the atomic adds in another order at least once in three runs of A.
    noise = NONDETERMINISTIC.search(out)
    assert noise, "A's identical runs did not differ (or bisect said so otherwise):" + shown(done)
    # The first buffer they differ in is the embedding's gradient, as index_add_ left it:
    # everything before it, forward and backward, is deterministic.
    assert "index" in noise["kernel"].lower(), shown(done)
    verdict = NO_DIVERGENCE.search(out)
    assert verdict, shown(done)
    assert verdict["count"] == noise["count"] and int(noise["count"]) > 0, shown(done)
    assert "step 3" not in out and "root cause" not in out, shown(done)


@dataclass(frozen=True)
class Poked:
    """The bisection of the program poked by 0 against poked by DELTA."""

    done: subprocess.CompletedProcess[str]
    work: Path                         # relative to cwd, as bisect was given it
    cwd: Path

    @property
    def out(self) -> str:
        return self.done.stdout

    def root_cause(self) -> re.Match[str]:
        found = ROOT_CAUSE.search(self.out)
        assert found, "no root cause line:" + shown(self.done)
        return found


@pytest.fixture(scope="module")
def poked(cwd: Path) -> Poked:
    work = Path("poked")
    done = cudump(["bisect", "--out", str(work), "--env-a", POKE_A, "--env-b", POKE_B, "--",
                   *program()], cwd)
    assert "Traceback" not in done.stdout + done.stderr, shown(done)
    return Poked(done, work, cwd)


def test_bisect_names_the_poke_as_the_root_cause(poked: Poked):
    done, out = poked.done, poked.out
    assert done.returncode == 1, shown(done)
    cause = poked.root_cause()
    first = FIRST.search(out)
    assert first, shown(done)
    # The poke is the first launch that differs, and it differs from equal inputs.
    assert (first["launch"], first["kernel"]) == (cause["launch"], cause["kernel"]), shown(done)
    assert cause["phase"] == "after", shown(done)
    launch = int(cause["launch"])
    assert (f"step 3: snapshots of launch {launch} (" in out), shown(done)

    # That launch read and wrote the poked weight: at INDEX its snapshots hold the value the
    # program printed, the same on both sides before, DELTA apart after, and nothing else
    # apart. (The weight is the buffer that begins at its first element; the one-hot input
    # holds 1 there.)
    work = poked.cwd / poked.work
    old_a, same = poke_values(work / "logs" / "a-snap.log")
    old, new = poke_values(work / "logs" / "b-snap.log")
    assert old_a == same == old and new != old, (old_a, same, old, new)
    assert abs(float(new) - float(old) - DELTA) < 1e-6, (old, new)
    a, b = buffers(work / "a-snap", launch), buffers(work / "b-snap", launch)
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    weights = [(arg, offset) for arg, offset, phase in a if phase == "before"
               and a[arg, offset, phase].size > INDEX and a[arg, offset, phase][INDEX] == old]
    assert weights, f"no buffer of launch {launch} holds {old!r} at {INDEX}:" + shown(done)
    for arg, offset in weights:
        assert apart(a[arg, offset, "before"], b[arg, offset, "before"]) == []
        assert apart(a[arg, offset, "after"], a[arg, offset, "before"]) == []
        found = apart(a[arg, offset, "after"], b[arg, offset, "after"])
        assert found == [INDEX], (arg, offset, found[:10])
        assert b[arg, offset, "after"][INDEX] == new
    # The root cause line names an argument that holds the weight.
    assert int(cause["arg"]) in {arg for arg, _ in weights}, (cause[0], weights)


def test_the_confirmation_bisect_suggests_shows_the_launch_makes_the_difference(poked: Poked,
                                                                                tmp_path):
    done = poked.done
    launch = int(poked.root_cause()["launch"])
    suggested = CONFIRM.search(poked.out)
    assert suggested and int(suggested["launch"]) == launch, shown(done)
    words = shlex.split(suggested["command"])
    spec = f"{poked.work / 'a-snap'}:{launch}"
    assert words == [POKE_B, "cudump", "--inject", spec, "--", *program()], words

    # Run as suggested, with --out to read what it took.
    name, _, value = words[0].partition("=")
    confirm = tmp_path / "confirm"
    ran = cudump(["--out", str(confirm), *words[2:]], poked.cwd, env={name: value})
    assert ran.returncode == 0, shown(ran)
    lines = list(INJECTED.finditer(ran.stderr))
    assert lines, "no inject line:" + shown(ran)
    a_snap = poked.cwd / poked.work / "a-snap"
    old, new = poke_values(poked.cwd / poked.work / "logs" / "b-snap.log")
    a = buffers(a_snap, launch)
    weights = {(arg, offset) for arg, offset, phase in a
               if phase == "before" and a[arg, offset, phase].size > INDEX
               and a[arg, offset, phase][INDEX] == old}
    outputs = {(arg, offset) for arg, offset, phase in a if phase == "after"}
    seen = set()
    for line in lines:
        assert int(line["launch"]) == launch and line["source"] == str(poked.work / "a-snap"), \
            line[0]
        assert int(line["buffers"]) == sum(1 for k in a if k[2] == "before"), line[0]
        buffer = (int(line["arg"]), int(line["offset"] or 0))
        seen.add(buffer)
        if buffer in weights:
            # The poke's own parameter, DELTA, still makes the difference at that element.
            differs = STILL_DIFFERS.match(line["outcome"])
            assert differs and int(differs["differing"].replace(",", "")) >= 1, line[0]
        else:
            assert line["outcome"] == f"now equals {poked.work / 'a-snap'}'s", line[0]
    assert seen == outputs, (seen, outputs)

    # What the launch left in B's weight, from A's inputs: A's weight with the poke.
    after = [r for r in read_manifest(confirm) if r.launch == launch and r.phase == "after"]
    assert {where(r) for r in after} == outputs
    for r in after:
        assert r.extra.get("rule") == "--inject", r
        mine, theirs = as_floats(confirm, r), a[(*where(r), "after")]
        if where(r) in weights:
            # Within the weight, only the poked element, DELTA apart.
            assert apart(mine[:WEIGHT_ELEMENTS], theirs[:WEIGHT_ELEMENTS]) == [INDEX]
            assert mine[INDEX] == new
        else:
            assert apart(mine, theirs) == []


WITHIN_SUMS = re.compile(r"^no divergence beyond the tolerance \(atol 0\.0001, rtol 0\.001\) "
                         r"by the sums of \|x\|$", re.MULTILINE)


def test_the_program_against_itself_is_within_a_tolerance_by_its_sums(cwd, tmp_path):
    """No baseline runs: with --atol/--rtol and --by-sums, the atomics' rounding is within
    the tolerance by the digests' sums of |x|; the buffers the sums cannot judge (cuBLAS's,
    of no known type) are compared as the type their memory or their kernel's name gives
    them."""
    work = tmp_path / "work"
    done = cudump(["bisect", "--atol", "1e-4", "--rtol", "1e-3", "--by-sums", "--out",
                   str(work), "--env-b", UNRELATED, "--", *program()], cwd)
    assert done.returncode == 0, shown(done)
    assert WITHIN_SUMS.search(done.stdout), shown(done)


def test_a_poke_below_the_tolerance_of_the_sums_is_still_the_root_cause(cwd, poked: Poked):
    """--rtol 1e-5: the poke (DELTA at one of 2048 x 256 weights) moves the weight's sum of
    |x| by far less than the tolerance allows the sum, so the sums cannot tell it; step 3
    compares the elements and names it, as the exact bisection does."""
    done = cudump(["bisect", "--rtol", "1e-5", "--out", "poked-rtol", "--env-a", POKE_A,
                   "--env-b", POKE_B, "--", *program()], cwd)
    assert done.returncode == 1, shown(done)
    assert re.search(r"^  \d+ pairs? ha(?:s|ve) digests that differ and sums of \|x\| within "
                     r"the tolerance", done.stdout, re.MULTILINE), shown(done)
    found = re.search(r"^  launch (?P<launch>\d+) \(.+\) is the first whose buffers differ "
                      r"beyond the tolerance; its inputs were equal within it: the root cause$",
                      done.stdout, re.MULTILINE)
    assert found, shown(done)
    assert found["launch"] == poked.root_cause()["launch"], shown(done)
