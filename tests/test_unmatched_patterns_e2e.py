"""A kernel pattern that matches no launch is said at the end of the run (and by ls and
stats --kernel), with the names it may have meant, through the stand-in driver."""

from __future__ import annotations

from pathlib import Path

from cudump.kernels.pattern import KernelPattern
from cudump.kernels.unmatched import NamedPattern, SeenKernel, hint, unmatched_lines

VEC_ADD = "vecAdd(float const*, float const*, float*, int)"
SEEN = [SeenKernel(VEC_ADD, "_Z6vecAddPKfS0_Pfi"), SeenKernel("scale", "scale"),
        SeenKernel("void fill<int>(int*, int, int)", "_Z4fillIiEvPT_S0_i")]


def _lines(stderr: str, what: str = "launch") -> list[str]:
    return [line for line in stderr.splitlines() if f"matched no {what}" in line]


def test_a_pattern_that_is_part_of_a_name_is_offered_with_stars() -> None:
    assert hint(KernelPattern("vec"), SEEN) == "did you mean '*vec*'? seen: vecAdd"
    assert hint(KernelPattern("vecadd"), SEEN) == "closest seen: vecAdd"
    assert hint(KernelPattern("re:^mul"), SEEN).startswith("seen: ")
    assert hint(KernelPattern("vec"), []) == "no kernel was launched"
    assert unmatched_lines([NamedPattern("--break 'vecAdd'", KernelPattern("vecAdd")),
                            NamedPattern("--break 'fil'", KernelPattern("fil"))], SEEN) == [
        "cudump: --break 'fil' matched no launch; did you mean '*fil*'? seen: fill<int>"]


def test_each_pattern_that_matched_no_launch_is_named_at_the_end(fake, cudump_run,
                                                               tmp_path: Path) -> None:
    rule = tmp_path / "r.yaml"
    rule.write_text("rules:\n  - name: s\n    kernel: 'scal'\n")
    ran = cudump_run([str(fake.programs["diverge"]), "2"], "--break", "vec", "--batch",
                     "/dev/null", "--rule", str(rule), "--capture-launch", "vecadd",
                     "--digest", "-k", "*fill*")
    assert ran.returncode == 0, ran.stderr
    assert _lines(ran.stderr) == [
        f"cudump: {rule}:2: kernel 'scal' matched no launch; did you mean '*scal*'? "
        "seen: scale",
        "cudump: --capture-launch 'vecadd' matched no launch; closest seen: vecAdd",
        "cudump: --break 'vec' matched no launch; did you mean '*vec*'? seen: vecAdd"]
    # Said before the summary, which stays the last line.
    assert ran.stderr.splitlines()[-1].startswith("cudump: 1 process")


def test_patterns_that_matched_are_not_named(fake, cudump_run) -> None:
    ran = cudump_run([str(fake.programs["diverge"]), "2"], "--break", "*vec*", "--batch",
                     "/dev/null", "--capture-launch", "scale", "--check-nan", "-k",
                     "regex:^void fill")
    assert ran.returncode == 0, ran.stderr
    assert _lines(ran.stderr) == []


def test_ls_and_stats_name_a_kernel_pattern_that_matched_nothing(fake, cudump_run,
                                                                 cudump) -> None:
    ran = cudump_run([str(fake.programs["diverge"]), "2"], "--digest", "-k", "scale")
    assert ran.returncode == 0, ran.stderr
    for command in ("ls", "stats"):
        done = cudump(command, str(ran.run_dir), "--kernel", "vec")
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines() == [
            f"cudump {command}: --kernel 'vec' matched no kernel of {ran.run_dir}; did you "
            "mean '*vec*'? seen: vecAdd"]
        assert cudump(command, str(ran.run_dir), "--kernel", "*vec*").stderr == ""
    # A kernel that ran but has no snapshots is no mistake of the pattern's.
    assert cudump("ls", str(ran.run_dir), "--kernel", "fill*").stderr == ""
