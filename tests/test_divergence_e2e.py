"""Root causes and consequences among divergent launches (`cudump diff` of digest runs,
bisect's step 2) and `cudump bisect --baseline-runs N` (nondeterminism learnt from identical
runs of A), end to end on the stand-in driver with tests/fakecuda/progs/diverge.c, where
DIVERGE_NOISE=1 makes fill's buffer differ between identical runs."""

from __future__ import annotations

from pathlib import Path

from cli_run import Cudump

ADD = "vecAdd(float const*, float const*, float*, int)"


def test_diff_names_the_root_cause_and_counts_consequences(cudump: Cudump, diverge: str,
                                                           tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert cudump("--digest", "--out", str(a), "--", diverge).returncode == 0
    assert cudump("--digest", "--out", str(b), "--", diverge,
                  env={"DIVERGE_AT": "5"}).returncode == 0
    done = cudump("diff", str(a), str(b))
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    # Round 5's first vecAdd (launch 18) read equal inputs and wrote other output: the root
    # cause. Its consequences read what differs: scale and vecAdd of round 5 (19, 20), round
    # 6's first vecAdd (22, over round 5's c), and the accumulating vecAdd of rounds 6 to 8
    # (24, 28, 32).
    assert (f"root cause: launch 18 of {ADD} (occurrence 9), arg 2 after: its inputs "
            "matched, its output differs") in lines
    assert ("divergent launches: 7: 1 root cause, 6 consequences (inputs already "
            "differed)") in lines


def test_bisect_step_2_names_the_root_cause(cudump: Cudump, diverge: str,
                                            tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    done = cudump("bisect", "--env-b", "DIVERGE_AT=3", "--html", str(report), "--",
                  diverge, "4")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (f"  root cause: launch 10 of {ADD} (occurrence 5), arg 2 after: its inputs "
            "matched, its output differs") in done.stdout.splitlines()
    assert "  divergent launches: 5: 1 root cause, 4 consequences" in done.stdout
    assert "root cause: launch 10 of" in report.read_text()


def test_bisect_without_baseline_runs_stops_at_the_noise(cudump: Cudump, diverge: str,
                                                         tmp_path: Path) -> None:
    done = cudump("bisect", "--env-a", "DIVERGE_NOISE=1", "--env-b", "DIVERGE_NOISE=1",
                  "--env-b", "DIVERGE_AT=3", "--", diverge, "4")
    # fill's buffer differs from the first launch on: bisect shows it (each side's re-run
    # says it is not deterministic).
    assert "first divergent: launch 1 of void fill<int>(int*, int, int)" in done.stdout
    assert "A is not deterministic" in done.stdout
    assert done.returncode == 1, done.stdout + done.stderr


def test_baseline_runs_skip_nondeterministic_buffers(cudump: Cudump, diverge: str,
                                                     tmp_path: Path) -> None:
    work = tmp_path / "work"
    done = cudump("bisect", "--baseline-runs", "2", "--out", str(work),
                  "--env-a", "DIVERGE_NOISE=1", "--env-b", "DIVERGE_NOISE=1",
                  "--env-b", "DIVERGE_AT=3", "--", diverge, "4")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "  A (baseline 1 of 2): 64 records in a-base1/, exit status 0" in out
    assert "  A (baseline 2 of 2): 64 records in a-base2/, exit status 0" in out
    # fill's tag, after each of its 4 launches and before the 3 later ones.
    assert ("  nondeterministic: 7 buffers differ between identical runs of A; the first: "
            "launch 1 of void fill<int>(int*, int, int) (occurrence 1), arg 0 after") in out
    assert "  7 of them are nondeterministic (they differ between identical runs of A)" in out
    assert (f"first divergent: launch 10 of {ADD} (occurrence 5), arg 2 after; 9 launches "
            "matched before it") in out
    assert "all of them within [997:1000]" in out
    assert (work / "a-base2").is_dir()


def test_baseline_runs_when_only_noise_differs(cudump: Cudump, diverge: str) -> None:
    done = cudump("bisect", "--baseline-runs", "1", "--env-a", "DIVERGE_NOISE=1",
                  "--env-b", "DIVERGE_NOISE=1", "--env-b", "UNRELATED=1", "--", diverge, "3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("no divergence beyond nondeterminism (5 buffers differ between identical runs)"
            in done.stdout)
    assert "step 3" not in done.stdout


def test_baseline_runs_of_a_deterministic_program(cudump: Cudump, diverge: str) -> None:
    done = cudump("bisect", "--baseline-runs", "1", "--env-b", "DIVERGE_AT=3", "--",
                  diverge, "4")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "  deterministic: no buffer differs between A and its 1 baseline run" in done.stdout
    assert f"first divergent: launch 10 of {ADD} (occurrence 5)" in done.stdout


def test_baseline_runs_must_not_be_negative(cudump: Cudump, diverge: str) -> None:
    done = cudump("bisect", "--baseline-runs", "-1", "--", diverge)
    assert done.returncode == 2
    assert "--baseline-runs must be 0 or more" in done.stderr
