"""`--batch FILE`: read once, whatever FILE is (a file, a pipe, /dev/stdin, <(...)), and
checked whole before the program starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudump.errors import UsageError
from cudump.prompt.batch_file import command_problem, load_batch

ROOT = Path(__file__).resolve().parent.parent
W, H = 64, 48
COMMANDS = "# stop at the first launch of FrP0k, look, go on\ninfo args\n\ncontinue\n"


def zed(fake) -> list[str]:
    return [str(fake.programs["zed"]), "1", "--size", f"{W}x{H}"]


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("cudump: error: "), stderr
    return lines[0]


def run(fake, shim_lib: Path, tmp_path: Path, batch: str, **popen) -> subprocess.CompletedProcess:
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib),
                        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "cudump", "--out", str(tmp_path / "run"),
                           "--break", "FrP0k5607tPV", "--batch", batch, "--", *zed(fake)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          **popen)


def ran_the_commands(done: subprocess.CompletedProcess, bare: str) -> None:
    assert done.returncode == 0, done.stderr
    assert done.stdout == bare                     # the program's own output
    lines = done.stderr.splitlines()
    assert "(cudump) info args" in lines and "(cudump) continue" in lines, done.stderr
    assert "error:" not in done.stderr, done.stderr


# -- end to end ------------------------------------------------------------------------

def test_a_batch_file_that_is_not_utf8_is_refused_before_the_program_runs(
        fake, shim_lib, tmp_path):
    commands = tmp_path / "commands.txt"
    commands.write_bytes(b"info args\ncontinue \xff\xfe\n")
    done = run(fake, shim_lib, tmp_path, str(commands))
    assert done.returncode == 2 and done.stdout == ""       # the program never ran
    line = one_error_line(done.stderr)
    assert f"--batch {commands}, line 2: not UTF-8 text (byte 0xff at column 10)" in line
    assert not (tmp_path / "run").exists()


def test_a_batch_file_with_an_unknown_command_is_refused_before_the_program_runs(
        fake, shim_lib, tmp_path):
    commands = tmp_path / "commands.txt"
    commands.write_text("info args\n\n# fine so far\nfrobnicate arg0\ncontinue\n")
    done = run(fake, shim_lib, tmp_path, str(commands))
    assert done.returncode == 2 and done.stdout == ""
    line = one_error_line(done.stderr)
    assert f"--batch {commands}, line 4: unknown command 'frobnicate'" in line, line


def test_a_batch_from_a_pipe_runs_as_a_file_does(fake, shim_lib, bare_run, tmp_path):
    """`--batch <(...)` is a /dev/fd name of a pipe: readable once, and not a regular file."""
    bare = bare_run(zed(fake)).stdout
    read_end, write_end = os.pipe()
    os.write(write_end, COMMANDS.encode())
    os.close(write_end)
    try:
        done = run(fake, shim_lib, tmp_path, f"/dev/fd/{read_end}", pass_fds=(read_end,))
    finally:
        os.close(read_end)
    ran_the_commands(done, bare)


def test_a_batch_from_stdin_runs_as_a_file_does(fake, shim_lib, bare_run, tmp_path):
    bare = bare_run(zed(fake)).stdout
    ran_the_commands(run(fake, shim_lib, tmp_path, "/dev/stdin", input=COMMANDS), bare)


def test_a_batch_from_a_fifo_runs_as_a_file_does(fake, shim_lib, bare_run, tmp_path):
    bare = bare_run(zed(fake)).stdout
    fifo = tmp_path / "commands.fifo"
    os.mkfifo(fifo)
    # The writer opens the FIFO once cudump opens it to read, and ends.
    writer = subprocess.Popen(["sh", "-c", f"printf '%s' \"$0\" > {fifo}", COMMANDS])
    try:
        done = run(fake, shim_lib, tmp_path, str(fifo))
    finally:
        writer.wait(timeout=120)
    ran_the_commands(done, bare)


# -- the checks ------------------------------------------------------------------------

def test_the_commands_are_read_without_blank_lines_and_comments(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(COMMANDS)
    assert load_batch(path) == ["info args", "continue"]
    path.write_text("")
    assert load_batch(path) == []


@pytest.mark.parametrize(("line", "problem"), [
    ("frobnicate", "unknown command 'frobnicate'"),
    ("info", "info needs a subcommand"),
    ("info nothing", "info: unknown subcommand 'nothing'"),
    ("info/x args", "info takes no /FMT suffix"),
    ("continue/x", "continue takes no /FMT suffix"),
    ("dump 'arg0", "No closing quotation"),
])
def test_a_command_that_cannot_be_parsed_is_named(line, problem):
    found = command_problem(line)
    assert found is not None and problem in found, found


@pytest.mark.parametrize("line", ["info args", "x/4xb arg0 + 8", "p arg0[1]@2", "c",
                                  "break foo if arg1 > 2", "help", "info -h",
                                  "display/x arg3", "dump arg2 out.npy"])
def test_commands_of_the_prompt_pass(line):
    assert command_problem(line) is None


def test_a_directory_or_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="is a directory"):
        load_batch(tmp_path)
    with pytest.raises(UsageError, match="no such file"):
        load_batch(tmp_path / "none")
