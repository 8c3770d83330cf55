"""Messages that name the problem: the help and usage lines, and what a rule is told when it
names an argument the kernel does not have, or one that is not a pointer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cudump.cli import _commands, _parser, main
from cudump.commands import SUBCOMMANDS

ROOT = Path(__file__).resolve().parent.parent


def rule_file(tmp_path: Path, args: str) -> Path:
    path = tmp_path / "my.yaml"
    path.write_text(f"rules:\n  - kernel: vecAdd\n    args: {args}\n")
    return path


def test_each_command_imports_only_its_own_module() -> None:
    """A run does not import the offline commands (bisect's and diff's imports took 0.45 s
    of every run's start), and `cudump ls` neither the run's nor bisect's: each command's
    module is imported when it runs (ls shares stats' helpers). Checked in a fresh
    interpreter, whose modules are its own."""
    code = ("import json, sys; from cudump.cli import _command; _command(sys.argv[1]); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('cudump.commands.'))))")
    def imported(name: str) -> set[str]:
        done = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                              cwd=ROOT, check=True)
        return {m.removeprefix("cudump.commands.") for m in json.loads(done.stdout)}

    assert imported("run") == {"run", "run_values"}      # run_values: run's option checks
    assert "ls" in imported("ls") and not imported("ls") & {"run", "bisect", "diff", "replay"}


def test_the_usage_names_every_subcommand(capsys) -> None:
    assert set(SUBCOMMANDS) == set(_commands()) - {"run"}
    for argv in ([], ["--trace"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "no program given" in err and len(err.strip().splitlines()) == 1
        for name in SUBCOMMANDS:
            assert name in err, (name, err)


def test_staging_help_says_it_tunes_speed(capsys) -> None:
    text = " ".join(_parser(_commands()["run"]).format_help().split())
    assert "the largest set of buffers one launch can snapshot" not in text
    assert "larger buffers are streamed through it in pieces, so it tunes speed" in text


def test_bisect_usage_is_argparse_s(capsys) -> None:
    text = _parser(_commands()["bisect"]).format_help()
    usage = text.split("\n\n")[0]
    assert usage.startswith("usage: cudump bisect [-h]")
    assert "[-j JOBS]" in usage and "-- PROGRAM_A [ARGS...] [-- PROGRAM_B [ARGS...]]" in usage
    assert all(len(line) <= 100 for line in text.splitlines())


def test_a_rule_naming_an_argument_the_kernel_lacks_says_how_many_it_has(
        fake, cudump_run, tmp_path) -> None:
    rule = rule_file(tmp_path, "[9]")
    ran = cudump_run([str(fake.programs["nans"]), "3", "37"], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    warnings = [line for line in ran.stderr.splitlines() if "warning" in line]
    assert warnings == [
        f"cudump: warning: rule vecAdd ({rule}:2): vecAdd has 4 arguments (arg 0 to arg 3); "
        "args: [9] names arg 9, which it does not have"]


@pytest.mark.parametrize("override", [False, True])
def test_a_rule_on_an_int_argument_names_its_type(fake, cudump_run, tmp_path,
                                                  override) -> None:
    path = rule_file(tmp_path, "[3]")
    if override:
        path.write_text(path.read_text() + "    overrides:\n      3: {dtype: float32, count: 4}\n")
    ran = cudump_run([str(fake.programs["nans"]), "2", "37"], "--rule", str(path))
    assert ran.returncode == 0, ran.stderr
    assert "not in any tracked allocation" not in ran.stderr
    assert ("cudump: warning: no snapshot of vecAdd(float const*, float const*, float*, int) "
            "arg 3 (before, launch 1): arg 3 of vecAdd is an int, not a pointer") in ran.stderr


def test_entry_point_usage_lists_the_subcommands() -> None:
    done = subprocess.run([sys.executable, "-m", "cudump"], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 2
    assert "replay" in done.stderr and "extract" in done.stderr
