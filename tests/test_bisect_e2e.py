"""`cudump bisect` and the diff of digest runs end to end on the stand-in driver, with
tests/fakecuda/progs/diverge.c: rounds of fill<int>, vecAdd, scale and vecAdd, where
DIVERGE_AT=K makes round K's first vecAdd (launch 4K - 2, occurrence 2K - 1) leave the
last DIVERGE_SHORT elements of its output (arg 2) unwritten."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from cli_run import Cudump, Done
from records import manifest

ADD = "vecAdd(float const*, float const*, float*, int)"


def first_line(out: str) -> str:
    return next(line.strip() for line in out.splitlines()
                if line.strip().startswith("first divergent:"))


def one_line_error(done: Done, *words: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cudump: error:"), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    for word in words:
        assert word in lines[0], lines[0]


# ---------------------------------------------------------------------------------------
# cudump diff of digest runs


def test_diff_of_digest_runs_finds_the_changed_launch(cudump: Cudump, diverge: str,
                                                      tmp_path: Path) -> None:
    a, b, full = tmp_path / "a", tmp_path / "b", tmp_path / "full"
    assert cudump("--digest", "--out", str(a), "--", diverge).returncode == 0
    ran = cudump("--digest", "--out", str(b), "--", diverge, env={"DIVERGE_AT": "5"})
    assert ran.returncode == 0, ran.stderr
    done = cudump("diff", str(a), str(b))
    assert done.returncode == 1, done.stderr
    # 8 rounds of 4 launches; round 5's first vecAdd is launch 18, occurrence 9.
    assert first_line(done.stdout) == (
        f"first divergent: launch 18 of {ADD} (occurrence 9), arg 2 after; 17 launches "
        "matched before it")
    assert "digest differs: A " in done.stdout

    # Full snapshots of A's program compare with its digests, pair by pair, by digesting
    # the arrays: equal with A, and the same first divergent launch against B.
    rule = tmp_path / "all.yaml"
    rule.write_text("rules:\n  - kernel: '*'\n    format: npy\n")
    assert cudump("--rule", str(rule), "--out", str(full), "--", diverge).returncode == 0
    same = cudump("diff", str(a), str(full))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "128 pairs compared, 0 differ" in same.stdout
    against = cudump("diff", str(full), str(b))
    assert against.returncode == 1
    assert first_line(against.stdout) == first_line(done.stdout)


# ---------------------------------------------------------------------------------------
# cudump bisect


def test_bisect_one_program_two_environments(cudump: Cudump, diverge: str,
                                             tmp_path: Path) -> None:
    work, report = tmp_path / "work", tmp_path / "report.html"
    done = cudump("bisect", "--env-b", "DIVERGE_AT=5", "--out", str(work), "--html",
                  str(report), "--", diverge)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert first_line(out) == (f"first divergent: launch 18 of {ADD} (occurrence 9), arg 2 "
                               "after; 17 launches matched before it")
    assert "step 3: snapshots of launch 18 (vecAdd, occurrence 9), before and after" in out
    # Only that launch was snapshotted: its three buffers, before and after.
    for side in ("a-snap", "b-snap"):
        records = manifest(work / side)
        assert {(r["launch"], r["occurrence"]) for r in records} == {(18, 9)}
        assert len(records) == 6
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+18\s+vecAdd", line)]
    assert [(r[3], r[4], r[5]) for r in rows] == [
        ("0", "before", "same"), ("1", "before", "same"), ("2", "before", "same"),
        ("0", "after", "same"), ("1", "after", "same"), ("2", "after", "DIFF")]
    # The differing elements, named: the last three of 1,000, each a round behind in A.
    assert "differing elements: 3 of 1,000 (0.3%)" in out
    assert ("elements that differ: (997) A=2992 B=11968; (998) A=2995 B=11980; (999) "
            "A=2998 B=11992") in out
    assert "all of them within [997:1000]" in out
    a_npy = next((work / "a-snap").glob("*-arg2-after.npy"))
    b_npy = next((work / "b-snap").glob("*-arg2-after.npy"))
    differ = np.flatnonzero(np.load(a_npy) != np.load(b_npy))
    assert differ.tolist() == [997, 998, 999]
    # The report: the differing buffer (1-D) plotted before and after, with its elements.
    page = report.read_text()
    assert "first divergent" in page and "DIVERGE_AT=5" in page
    assert page.count('<svg class="plot"') == 2
    assert "elements that differ: all 3, all of them within [997:1000]" in page
    assert "<tr><td>(999)</td><td>2998</td><td>11992</td></tr>" in page
    assert f"report: {report}" in out and f"work directory: {work}" in out


def test_bisect_two_programs_finds_the_launch_in_the_second_process(
        cudump: Cudump, diverge: str, tmp_path: Path) -> None:
    """Each side runs the program twice (two processes); only B's second diverges."""
    scripts = []
    for name, at in (("a.sh", "0"), ("b.sh", "3")):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\n{diverge} 4\nDIVERGE_AT={at} {diverge} 4\n")
        script.chmod(0o755)
        scripts.append(str(script))
    done = cudump("bisect", "--", scripts[0], "--", scripts[1])
    assert done.returncode == 1, done.stdout + done.stderr
    line = first_line(done.stdout)
    # Process 1: 16 launches; process 2: round 3's first vecAdd is launch 10.
    assert line.startswith(f"first divergent: launch 10 of {ADD} (occurrence 5, process 2 of "
                           "2 (pid ")
    assert line.endswith("), arg 2 after; 25 launches matched before it")
    assert "all of them within [997:1000]" in done.stdout
    assert "now removed" in done.stdout
    assert not list((tmp_path / "tmp").iterdir())      # the temporary work directory


def test_bisect_with_rules_keeps_their_geometry(cudump: Cudump, diverge: str,
                                                tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n"
        "  - kernel: vecAdd\n"
        "    args: [2]\n"
        "    overrides:\n"
        "      2: {dtype: float32, width: 100, height: 10}\n"
        "  - kernel: 'fill*'\n"
        "    action: break\n")
    work = tmp_path / "work"
    done = cudump("bisect", "--rule", str(rules), "--env-b", "DIVERGE_AT=3", "--out",
                  str(work), "--", diverge, "3")
    assert done.returncode == 1, done.stdout + done.stderr
    # Only vecAdd's arg 2 is digested: launches 2, 4, 6 and 8 of rounds 1 and 2, then 10.
    assert first_line(done.stdout) == (
        f"first divergent: launch 10 of {ADD} (occurrence 5), arg 2 after; 4 launches matched "
        "before it")
    assert "(rules with 'action: break' are left out)" in done.stdout
    assert "data: float32 [10, 100], 1,000 elements" in done.stdout
    assert "all of them within [9:10, 97:100]" in done.stdout
    records = manifest(work / "a-digest")
    assert {(r["kernel"], r["arg"]) for r in records} == {(ADD, 2)}
    assert all(r["file"] is None and len(r["digest"]) == 16 for r in records)


def test_bisect_with_no_divergence_says_so(cudump: Cudump, diverge: str,
                                           tmp_path: Path) -> None:
    done = cudump("bisect", "--env-a", "UNRELATED=1", "--env-b", "UNRELATED=2", "--",
                  diverge, "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no divergence: every buffer has the same digest in A and B" in done.stdout
    assert "step 3" not in done.stdout
    assert not list((tmp_path / "tmp").iterdir())


def test_bisect_says_when_the_rerun_does_not_reproduce(cudump: Cudump, diverge: str,
                                                       tmp_path: Path) -> None:
    once = tmp_path / "once"
    done = cudump("bisect", "--env-b", "DIVERGE_AT=3", "--env-b", f"DIVERGE_ONCE={once}",
                  "--", diverge, "3")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "first divergent: launch 10 of" in done.stdout
    assert "B's re-run gave other bytes at this buffer than its digest run" in done.stdout
    one_line_error(done, "did not reproduce the divergence at launch 10", "B changed",
                   "not deterministic")
    assert "work directory (kept, with the runs' logs)" in done.stdout


def test_a_failing_side_is_reported(cudump: Cudump, diverge: str, tmp_path: Path) -> None:
    failing = tmp_path / "fails.sh"
    failing.write_text(f"#!/bin/sh\nDIVERGE_AT=3 {diverge} 3\nexit 3\n")
    failing.chmod(0o755)
    done = cudump("bisect", "--", diverge, "3", "--", str(failing))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "note: B: the program exited with status 3" in done.stdout
    assert "first divergent: launch 10 of" in done.stdout

    same = tmp_path / "same.sh"
    same.write_text(f"#!/bin/sh\n{diverge} 2\nexit 4\n")
    same.chmod(0o755)
    done = cudump("bisect", "--", diverge, "2", "--", str(same))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no divergence: every buffer has the same digest in A and B, but the programs' " \
        "exit statuses differ (A 0, B 4)" in done.stdout

    missing = cudump("bisect", "--", diverge, "2", "--", str(tmp_path / "no-such-program"))
    assert missing.returncode == 2
    one_line_error(missing, "B:", "did not run under cudump", "no-such-program")


@pytest.mark.parametrize("args,words", [
    (["--", "prog"], ["--env-a/--env-b"]),
    (["--", "prog", "--"], ["nothing after the second '--'"]),
    ([], ["no program given"]),
    (["--env-a", "NOEQUALS", "--", "prog"], ["--env-a 'NOEQUALS'", "NAME=VALUE"]),
    (["--env-a", "X=1", "--env-b", "X=1", "--", "prog"], ["the same command"]),
    (["--rule", "/nonexistent.yaml", "--env-b", "X=1", "--", "prog"], ["no such rule file"]),
    (["--rtol", "-1", "--env-b", "X=1", "--", "prog"], ["--atol and --rtol", "0 or more"]),
    (["--batch-size", "0", "--env-b", "X=1", "--", "prog"], ["--batch-size must be 1 or more"]),
    (["--by-sums", "--env-b", "X=1", "--", "prog"], ["--by-sums needs a tolerance"]),
])
def test_bad_arguments_are_one_line(cudump: Cudump, tmp_path: Path, args: list[str],
                                    words: list[str]) -> None:
    done = cudump("bisect", *args)
    assert done.returncode == 2
    one_line_error(done, *words)
    assert done.stdout == ""                 # nothing was run, nothing made
    assert not list((tmp_path / "tmp").iterdir())


def test_unusable_output_places_are_refused_before_anything_runs(cudump: Cudump, diverge: str,
                                                                 tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "something").write_text("x")
    done = cudump("bisect", "--env-b", "DIVERGE_AT=3", "--out", str(busy), "--", diverge)
    assert done.returncode == 2 and done.stdout == ""
    one_line_error(done, "--out", "new or empty directory")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    done = cudump("bisect", "--env-b", "DIVERGE_AT=3", "--html", str(blocker / "r.html"), "--",
                  diverge)
    assert done.returncode == 2 and done.stdout == ""
    one_line_error(done, "--html")
    for report, page in ((tmp_path / "old.html", tmp_path / "old.html"),
                         (tmp_path / "old", tmp_path / "old" / "index.html")):
        page.parent.mkdir(exist_ok=True)
        page.write_text("an earlier report")
        done = cudump("bisect", "--env-b", "DIVERGE_AT=3", "--html", str(report), "--",
                      diverge)
        assert done.returncode == 2 and done.stdout == ""
        one_line_error(done, "--html", f"{page} already exists")
        assert page.read_text() == "an earlier report"
    assert not list((tmp_path / "tmp").iterdir())


# ---------------------------------------------------------------------------------------
# bisect with a tolerance: DIVERGE_JITTER=2 makes round 2's scale (launch 7) multiply by
# 2 * (1 + 1e-6), so that c and acc differ by about a millionth from then on, and every
# launch reading or writing them has digests that differ (launches 7, 8, 10, 12, 16, 20 and
# 24 in 6 rounds: c is written afresh from round 3 on, acc carries the difference).
# `scale` has a plain C name, so its buffer's type comes from the rule (compared as bytes
# without it, where no tolerance applies). Typed, every digest has a sum of |x| beside it.

FLOATS = """rules:
  - kernel: "*"
    args: pointers
    overrides:
      0: {dtype: float32}
"""


def floats_rule(tmp_path: Path) -> str:
    path = tmp_path / "floats.yaml"
    path.write_text(FLOATS)
    return str(path)


def test_rounding_within_the_tolerance_is_no_divergence(cudump: Cudump, diverge: str,
                                                        tmp_path: Path) -> None:
    work = tmp_path / "work"
    done = cudump("bisect", "--env-b", "DIVERGE_JITTER=2", "--rtol", "1e-4", "--batch-size", "4",
                  "--rule", floats_rule(tmp_path), "--out", str(work), "--", diverge, "6")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # The digests are exact: 22 pairs' differ from round 2's scale on, but their sums of |x|
    # are within the tolerance, so no launch is known to diverge before step 3.
    assert "96 pairs compared, 0 differ" in out
    assert ("22 pairs have digests that differ and sums of |x| within the tolerance: their "
            "elements may be within it") in out
    assert "first divergent:" not in out
    # Seven launches' digests differ; four at a time are snapshotted and compared.
    assert ("step 3: snapshots of 4 launches whose digests differ (launches 7 to 12), before "
            "and after, compared within atol 0, rtol 0.0001") in out
    assert "step 3: snapshots of 3 launches whose digests differ (launches 16 to 24)" in out
    assert out.count("equal within the tolerance") == 2
    assert ("no divergence beyond the tolerance (atol 0, rtol 0.0001): 7 launches with "
            "digests that differ, each within it") in out
    assert "step 4" not in out
    assert {r["launch"] for r in manifest(work / "a-snap")} == {7, 8, 10, 12}
    assert {r["launch"] for r in manifest(work / "b-snap2")} == {16, 20, 24}
    # Without the tolerance, the rounding is the divergence.
    exact = cudump("bisect", "--env-b", "DIVERGE_JITTER=2", "--rule", floats_rule(tmp_path),
                   "--", diverge, "6")
    assert exact.returncode == 1 and "step 3: snapshots of launch 7 (scale" in exact.stdout


def test_the_divergence_beyond_the_tolerance_is_found_past_rounding(
        cudump: Cudump, diverge: str, tmp_path: Path) -> None:
    """Rounding from round 2 on, and round 4's first vecAdd (launch 14) leaving three
    elements unwritten: launch 14 is the divergence, found in the second batch, its inputs
    equal within the tolerance."""
    done = cudump("bisect", "--env-b", "DIVERGE_JITTER=2", "--env-b", "DIVERGE_AT=4",
                  "--rtol", "1e-4", "--batch-size", "4", "--rule", floats_rule(tmp_path), "--",
                  diverge, "6")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    # Launch 14's sums of |x| already say its output differs beyond the tolerance: it is
    # the last candidate, and the four launches with rounding before it are checked first.
    assert first_line(out).startswith(f"first divergent: launch 14 of {ADD}")
    assert "step 3: snapshots of 1 launch whose digests differ (launch 14)" in out
    assert out.count("equal within the tolerance") == 1
    assert ("launch 14 (vecAdd) is the first whose buffers differ beyond the tolerance; its "
            "inputs were equal within it: the root cause") in out
    assert "step 4: the buffers of that launch" in out
    assert "differing elements: 3 of 1,000 (0.3%)" in out


def test_by_sums_takes_sums_within_the_tolerance_as_within_it(cudump: Cudump, diverge: str,
                                                                tmp_path: Path) -> None:
    """--by-sums: no snapshot runs for rounding whose sums of |x| are within the tolerance;
    with a divergence, only the launch the sums name is snapshotted."""
    work = tmp_path / "work"
    rounding = cudump("bisect", "--by-sums", "--env-b", "DIVERGE_JITTER=2", "--rtol", "1e-4",
                      "--rule", floats_rule(tmp_path), "--out", str(work), "--", diverge, "6")
    assert rounding.returncode == 0, rounding.stdout + rounding.stderr
    assert ("--by-sums: 7 launches whose digests differ with sums of |x| within the "
            "tolerance taken as within it (not compared element by element)") in rounding.stdout
    assert ("no divergence beyond the tolerance (atol 0, rtol 0.0001) by the sums of |x|"
            in rounding.stdout)
    assert "step 3" not in rounding.stdout
    assert sorted(d.name for d in work.iterdir() if d.name.endswith(("snap", "digest"))) == [
        "a-digest", "b-digest"]
    found = cudump("bisect", "--by-sums", "--env-b", "DIVERGE_JITTER=2", "--env-b",
                   "DIVERGE_AT=4", "--rtol", "1e-4", "--rule", floats_rule(tmp_path),
                   "--out", str(tmp_path / "found"), "--", diverge, "6")
    assert found.returncode == 1, found.stdout + found.stderr
    assert "--by-sums: 4 launches whose digests differ" in found.stdout
    assert "step 3: snapshots of 1 launch whose digests differ (launch 14)" in found.stdout
    assert "launch 14 (vecAdd) is the first whose buffers differ beyond" in found.stdout
    assert {r["launch"] for r in manifest(tmp_path / "found" / "a-snap")} == {14}


def test_diff_of_digest_runs_within_a_tolerance_by_sums(cudump: Cudump, diverge: str,
                                                         tmp_path: Path) -> None:
    """diff --rtol of two digest runs: pairs whose digests differ but whose sums of |x| are
    within the tolerance are close (exit 0); a divergence beyond it still differs."""
    rule = tmp_path / "digest.yaml"
    rule.write_text(FLOATS + "    format: digest\n")
    envs = {"a": {}, "jitter": {"DIVERGE_JITTER": "2"},
            "short": {"DIVERGE_JITTER": "2", "DIVERGE_AT": "4"}}
    for name, env in envs.items():
        ran = cudump("--rule", str(rule), "--out", str(tmp_path / name), "--", diverge, "6",
                     env=env)
        assert ran.returncode == 0, ran.stderr
    a, jitter, short = (str(tmp_path / name) for name in envs)
    exact = cudump("diff", a, jitter)
    assert exact.returncode == 1 and "22 differ" in exact.stdout, exact.stdout
    close = cudump("diff", "--rtol", "1e-4", a, jitter)
    assert close.returncode == 0, close.stdout + close.stderr
    assert ("96 pairs compared, 0 differ, 22 close (digests differ, sums of |x| within the "
            "tolerance)") in close.stdout
    assert "digest differs; sum of |x| within the tolerance: A " in close.stdout
    # Tighter than the rounding: the sums are apart by more than the tolerance.
    tight = cudump("diff", "--rtol", "1e-9", a, jitter)
    assert tight.returncode == 1 and "sum of |x| differs beyond the tolerance" in tight.stdout
    beyond = cudump("diff", "--rtol", "1e-4", a, short)
    assert beyond.returncode == 1, beyond.stdout
    assert first_line(beyond.stdout).startswith(f"first divergent: launch 14 of {ADD}")


def test_a_buffer_of_no_known_type_is_compared_as_the_type_others_gave_it(
        cudump: Cudump, diverge: str, tmp_path: Path) -> None:
    """No rule: scale (a plain C name) has no element type, so its digests have no sum and
    its bytes differ from round 2 on; vecAdd writes the same memory as float*, so step 3
    compares scale's buffer as float32, within the tolerance: no divergence. --by-sums
    snapshots only scale's launch, which the sums cannot judge."""
    done = cudump("bisect", "--env-b", "DIVERGE_JITTER=2", "--rtol", "1e-4", "--batch-size", "4",
                  "--", diverge, "6")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "96 pairs compared, 1 differ" in done.stdout
    assert "no divergence beyond the tolerance (atol 0, rtol 0.0001): 7 launches" in done.stdout
    quick = cudump("bisect", "--by-sums", "--env-b", "DIVERGE_JITTER=2", "--rtol", "1e-4",
                   "--", diverge, "6")
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert "step 3: snapshots of 1 launch whose digests differ (launch 7)" in quick.stdout
    assert "  equal within the tolerance\n" in quick.stdout
    assert "by the sums of |x|" in quick.stdout


def test_a_side_that_fills_its_compile_caches_is_run_again_warm(cudump: Cudump, diverge: str,
                                                                 tmp_path: Path) -> None:
    """A torch.compile program launches kernels a warm cache spares it (compiling, and
    autotuning's benchmarks, as many as their timings say): the stand-in launches a
    different number of extra fills on each cold run. Each side gets caches of its own in
    the work directory; a side whose first run filled them runs again warm, so that its
    digest run and its snapshot re-runs launch alike and step 3 finds the launch step 2
    named. The user's own caches, where the environment names them, are used as they are.
    Without the warm run, the re-runs' occurrences move and step 3 fails."""
    seen = tmp_path / "seen.txt"
    wrapper = tmp_path / "prog.sh"
    wrapper.write_text(
        '#!/bin/sh\n'
        'if [ -z "$(ls -A "$TORCHINDUCTOR_CACHE_DIR")" ]; then\n'
        f'  echo "cold $TORCHINDUCTOR_CACHE_DIR $TRITON_CACHE_DIR" >> {seen}\n'
        '  mkdir -p "$TORCHINDUCTOR_CACHE_DIR/fx" && touch "$TORCHINDUCTOR_CACHE_DIR/fx/graph"\n'
        '  DIVERGE_EXTRA=$(( $$ % 7 + 1 )); export DIVERGE_EXTRA\n'
        f'else echo "warm $TORCHINDUCTOR_CACHE_DIR $TRITON_CACHE_DIR" >> {seen}; fi\n'
        f'exec {diverge} "$@"\n')
    wrapper.chmod(0o755)
    work = tmp_path / "work"
    done = cudump("bisect", "--env-b", "DIVERGE_AT=5", "--out", str(work), "--", str(wrapper))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count("filled its compile caches") == 2, done.stdout
    assert "A filled its compile caches (torch.compile, Triton) in that run; run again" \
        in done.stdout
    assert "occurrence 9), before and after" in done.stdout, done.stdout  # round 5's vecAdd
    runs = [line.split() for line in seen.read_text().splitlines()]
    assert [r[0] for r in runs] == ["cold", "warm", "cold", "warm", "warm", "warm"], runs
    for label in "ab":
        mine = [r for r in runs if Path(r[1]).is_relative_to(work / "compile-caches" / label)]
        assert len(mine) == 3 and len({tuple(r[1:]) for r in mine}) == 1   # one side's own
    assert (work / "a-digest-warm").is_dir() and (work / "b-digest-warm").is_dir()
    user = tmp_path / "mine"
    (user / "fx").mkdir(parents=True)
    (user / "fx" / "graph").touch()                       # the user's, warm already
    seen.unlink()
    done = cudump("bisect", "--env-a", f"TORCHINDUCTOR_CACHE_DIR={user}", "--env-b",
                  f"TORCHINDUCTOR_CACHE_DIR={user}", "--env-b", "DIVERGE_AT=5", "--out",
                  str(tmp_path / "work2"), "--", str(wrapper))
    assert done.returncode == 1, done.stdout + done.stderr
    assert {line.split()[1] for line in seen.read_text().splitlines()} == {str(user)}
    assert "filled its compile caches" not in done.stdout  # theirs, not judged
