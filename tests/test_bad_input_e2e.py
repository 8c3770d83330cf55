"""Bad input at run time, on the stand-in driver: a rule file or a prompt command that cudump
cannot use is refused in one line, before it can stall the controller or drop a process's
connection, and the program runs as it would without cudump."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

W, H = 64, 48
SLOW_REGEX = "re:" + ".*" * 12 + "Q"     # polynomial: minutes per kernel name if accepted


def batch(tmp_path: Path, *commands: str) -> Path:
    path = tmp_path / "commands.txt"
    path.write_text("\n".join(commands) + "\n")
    return path


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("error:", "cudump: error"))]


def zed(fake, frames: int = 2) -> list[str]:
    return [str(fake.programs["zed"]), str(frames), "--size", f"{W}x{H}"]


# ---------------------------------------------------------------- regular expressions


@pytest.mark.parametrize("action", ["snapshot", "break"])
def test_a_polynomial_regex_in_a_rule_file_is_refused_before_the_program_runs(
        fake, cudump_run, tmp_path, action):
    rule = tmp_path / "slow.yaml"
    rule.write_text(f"rules:\n  - kernel: '{SLOW_REGEX}'\n    action: {action}\n")
    ran = cudump_run(zed(fake), "--rule", str(rule), timeout=30)
    assert ran.returncode == 2 and ran.stdout == ""        # nothing ran
    assert "Traceback" not in ran.stderr
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith(f"cudump: error: {rule}:2: field 'kernel': regular expression")
    assert "too many repetitions" in line


def test_a_polynomial_regex_at_the_prompt_is_refused_and_the_run_goes_on(
        fake, cudump_run, bare_run, tmp_path):
    commands = batch(tmp_path, f"break {SLOW_REGEX}", "info breakpoints", "continue",
                     "continue")
    ran = cudump_run(zed(fake), "--break", "FrP0k5607tPV", "--batch", str(commands),
                     timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(zed(fake)).stdout
    assert "Traceback" not in ran.stderr
    (line,) = error_lines(ran.stderr)
    assert line.startswith("error: regular expression") and "too many repetitions" in line
    assert ran.stderr.count("Breakpoint 1, launch") == 2      # the one breakpoint there is


# ---------------------------------------------------------------- reads at the prompt


@pytest.mark.parametrize(("command", "problem"), [
    # past the end of the 64-bit address space: the connection was dropped, the prompt hung
    ("x/16xb arg0+18446744073709551615", "do not fit in the 64-bit address space"),
    ("x/2xg 18446744073709551615", "do not fit in the 64-bit address space"),
    ("x/1xb 0x10000000000000000", "do not fit in the 64-bit address space"),
    ("x/1xb 0-1", "it must be >= 0"),
    ("print arg0[1000000000000000000]@4", "is outside the allocation of arg0"),
    # outside every allocation: the stand-in driver read host memory there and faulted
    ("x/8xb 4096", "address 0x1000 is not in any allocation"),
    ("x/s 4096", "address 0x1000 is not in any allocation"),
    ("x/2xg 0x7f00", "address 0x7f00 is not in any allocation"),
])
def test_a_read_beyond_the_address_space_is_refused_and_the_process_stays(
        fake, cudump_run, bare_run, tmp_path, command, problem):
    commands = batch(tmp_path, command, "x/4xb arg0", "continue")
    ran = cudump_run(zed(fake, 1), "--break", "FrP0k5607tPV", "--batch", str(commands),
                     timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(zed(fake, 1)).stdout
    assert "dropped the connection" not in ran.stderr and "Traceback" not in ran.stderr
    (line,) = error_lines(ran.stderr)
    assert line.startswith("error: ") and problem in line, line
    at = ran.stderr.splitlines().index("(cudump) x/4xb arg0")
    assert ran.stderr.splitlines()[at + 1].startswith("0x")   # the next read still works


def test_a_read_past_the_end_of_an_allocation_stops_at_its_end_and_the_process_stays(
        fake, cudump_run, bare_run, tmp_path):
    commands = batch(tmp_path, "x/1048576xb arg0", "continue")
    ran = cudump_run(zed(fake, 1), "--break", "FrP0k5607tPV", "--batch", str(commands),
                     timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(zed(fake, 1)).stdout
    assert "Traceback" not in ran.stderr and not error_lines(ran.stderr)
    assert "bytes past the end of the allocation at" in ran.stderr
    assert "is not in any allocation; showing the" in ran.stderr


def test_a_request_that_fails_unexpectedly_still_answers_the_prompt():
    """Whatever goes wrong while the connection's thread serves a request, the prompt gets
    an error, not a wait for ever, and the next request is served."""
    import struct
    import threading
    from concurrent.futures import Future

    from cudump.controller.remote_stop import RemoteStop
    from cudump.launches.stop import TargetError

    stop = RemoteStop(conn=None, proc=None, info=None, halt=None)  # type: ignore[arg-type]
    server = threading.Thread(target=stop.serve, daemon=True)
    server.start()

    def ask(fn):
        fut: Future = Future()
        stop._commands.put((fn, fut))
        return fut.exception(timeout=30) or fut.result()

    failed = ask(lambda: struct.pack("<Q", 1 << 64))
    assert isinstance(failed, TargetError) and "struct.error" in str(failed)
    failed = ask(lambda: {}["missing"])
    assert isinstance(failed, TargetError) and "KeyError" in str(failed)
    assert ask(lambda: 42) == 42

    def resume() -> None:
        stop.resumed = True

    ask(resume)
    server.join(timeout=30)
    assert not server.is_alive()


# ---------------------------------------------------------------- rule numbers


@pytest.mark.parametrize(("key", "value", "limit"), [
    ("every", "4294967296", "4294967295"),
    ("skip", "1" + "0" * 30, "18446744073709551615"),
    ("count", "18446744073709551615", "18446744073709551614"),
])
def test_a_rule_number_no_counter_can_hold_is_refused_before_the_program_runs(
        fake, cudump_run, tmp_path, key, value, limit):
    """Accepted, it dropped every process's connection and the run recorded nothing."""
    rule = tmp_path / "big.yaml"
    rule.write_text(f"rules:\n  - kernel: vecAdd\n    format: npy\n    {key}: {value}\n")
    ran = cudump_run([str(fake.programs["linked"])], "--rule", str(rule), timeout=30)
    assert ran.returncode == 2 and ran.stdout == ""
    (line,) = ran.stderr.strip().splitlines()
    assert line == (f"cudump: error: {rule}:4: field '{key}': {value} is too large: at most "
                    f"{limit} (the shim holds it in {len(bin(int(limit))) - 2} bits)")


def test_rule_numbers_at_the_counters_limits_run(fake, cudump_run, tmp_path):
    rule = tmp_path / "edge.yaml"
    rule.write_text("rules:\n  - kernel: vecAdd\n    format: npy\n    every: 4294967295\n"
                    "    count: 18446744073709551614\n")
    ran = cudump_run([str(fake.programs["linked"])], "--rule", str(rule), timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert "dropped the connection" not in ran.stderr
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert summary["launches"] == 5 and summary["snapshots"] > 0   # the first launch only


def test_a_rule_file_of_many_megabytes_is_refused_before_the_program_runs(
        fake, cudump_run, tmp_path):
    rule = tmp_path / "huge.yaml"
    one = "  - kernel: vecAdd\n    every: 2\n"
    rule.write_text("rules:\n" + one * ((8 << 20) // len(one)))
    ran = cudump_run([str(fake.programs["linked"])], "--rule", str(rule), timeout=60)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.strip().splitlines() == [
        f"cudump: error: {rule}: larger than 1 MiB; a rule file needs a few kilobytes (is this "
        "the right file?)"]


# ---------------------------------------------------------------- dump at the prompt


def test_dump_into_a_folder_that_is_a_file_is_one_line_and_the_session_goes_on(
        fake, cudump_run, bare_run, tmp_path):
    (tmp_path / "taken").write_text("not a folder\n")
    target = tmp_path / "taken" / "left.npy"
    commands = batch(tmp_path, f"dump arg2 {target}", "dump arg2 left.npy", "continue")
    ran = cudump_run(zed(fake, 1), "--break", "FrP0k5607tPV", "--batch", str(commands),
                     timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(zed(fake, 1)).stdout
    assert error_lines(ran.stderr) == [
        f"error: dump: cannot write {target}: {tmp_path / 'taken'} is a file, not a folder"]
    assert (ran.run_dir / "left.npy").is_file()


# ---------------------------------------------------------------- captures.jsonl


def _spoil(capture: dict, change: str) -> object:
    """A captured launch with one thing wrong in it."""
    if change == "a list":
        return [capture["pid"], capture["launch"]]
    key, _, value = change.partition("=")
    target = capture
    *path, last = key.split(".")
    for part in path:
        target = target[int(part)] if part.isdigit() else target[part]
    if value == "<delete>":
        del target[int(last) if last.isdigit() else last]
    else:
        target[int(last) if last.isdigit() else last] = json.loads(value)
    return capture


CAPTURE_DAMAGE = [
    ("pid=\"4242\"", "field 'pid': expected a whole number, got \"4242\""),
    ("kernel=5", "field 'kernel': expected a string, got 5"),
    ("occurrence=\"first\"", "field 'occurrence': expected a whole number, got \"first\""),
    ("grid=<delete>", "field 'grid' is missing"),
    ("block=[1, 2]", "field 'block': expected a list of 3 whole numbers, got [1, 2]"),
    ("problems=[1]", "field 'problems': expected a list of strings, got [1]"),
    ("pointers=\"none\"", "field 'pointers': expected a list, got \"none\""),
    ("pointers.0.offset=<delete>", "field 'pointers[0].offset' is missing"),
    ("pointers.0.alloc.base=\"0x10\"",
     "field 'pointers[0].alloc.base': expected a whole number, got \"0x10\""),
    ("buffers.0=7", "field 'buffers[0]': expected an object, got 7"),
    ("buffers.0.shape=\"48\"", "field 'buffers[0].shape': expected a list of whole numbers, "
                               "got \"48\""),
    ("buffers.0.address=1.5", "field 'buffers[0].address': expected a whole number, got 1.5"),
    ("a list", "not a captured launch (a JSON list, not an object)"),
]
SPEC_DAMAGE = [      # well typed, but no launch the replay can rebuild
    ("layout=[[0]]", "not a launch that can be replayed: layout[0] must be [offset, size] "
                     "with size > 0, not [0]"),
    ("params=\"zz\"", "not a launch that can be replayed: params is not a hex string"),
    ("buffers.0.dtype=\"uint13\"", "not a launch that can be replayed: buffers[0].dtype "
                                   "\"uint13\" is not a numpy dtype of plain data"),
]


@pytest.fixture(scope="module")
def captured_run(shim_lib, fake, tmp_path_factory) -> Path:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    out = tmp_path_factory.mktemp("captured") / "run"
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib),
                        "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "cudump", "--out", str(out),
                           "--capture-launch", "vecAdd", "--", str(fake.programs["linked"])],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("tool", ["replay", "extract"])
@pytest.mark.parametrize(("change", "problem"), CAPTURE_DAMAGE + SPEC_DAMAGE)
def test_a_damaged_capture_is_one_line_naming_the_file_line_and_field(
        captured_run, tmp_path, capsys, tool, change, problem):
    """Wrong types or missing keys in captures.jsonl were an internal error. A line that is
    not a captured launch stops the reading of the file, whichever launch is asked for; a
    well-typed one stops only the launch it is."""
    import shutil

    from cudump.cli import main

    run = tmp_path / "run"
    shutil.copytree(captured_run, run)
    lines = (run / "captures.jsonl").read_text().splitlines()
    asked = json.loads(lines[0 if (change, problem) in CAPTURE_DAMAGE else 1])["launch"]
    lines[1] = json.dumps(_spoil(json.loads(lines[1]), change))
    (run / "captures.jsonl").write_text("\n".join(lines) + "\n")
    argv = [tool, str(run), "--launch", str(asked)]
    if tool == "extract":
        argv.append(str(tmp_path / "folder"))
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and "internal error" not in err and "Traceback" not in err, err
    if (change, problem) in CAPTURE_DAMAGE and change != "a list":
        problem = f"not a captured launch: {problem}"
    assert err == f"cudump: error: {run / 'captures.jsonl'}:2: {problem}\n"


# ---------------------------------------------------------------- escapes typed at the prompt


@pytest.mark.parametrize("typed", [
    "\x1b[31m",          # a colour code, pasted from a program's output
    "\x1b[<1;2M",        # an SGR mouse report with a field missing
    "\x1b[Mxyz",         # an X10 mouse report with a button no terminal sends
])
def test_an_escape_sequence_typed_at_the_prompt_leaves_it_usable(shim_lib, fake, tmp_path,
                                                                  typed):
    """prompt_toolkit took these for mouse reports and printed a traceback, then "Press ENTER
    to continue" ate the next command."""
    import os
    import sys

    pexpect = pytest.importorskip("pexpect")
    root = Path(__file__).resolve().parent.parent
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib), "CUDUMP_HISTORY": str(tmp_path / "h"),
                        "TERM": "dumb",
                        "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = pexpect.spawn(sys.executable, ["-m", "cudump", "--out", str(tmp_path / "run"),
                                           "--break", "FrP0k5607tPV", "--", *zed(fake, 1)],
                          env=env, cwd=str(tmp_path), encoding="utf-8", timeout=30,
                          dimensions=(50, 250))
    child.expect(r"Breakpoint 1, launch 2 \(occurrence 1\)")
    child.expect_exact("(cudump)")
    child.send(typed)
    child.sendline("")
    child.expect_exact("(cudump)")
    seen = child.before
    child.sendline("info launch")
    child.expect(r"launch\s+2\b")
    child.sendline("continue")
    child.expect(r"cudump: 1 process, 2 launches")
    child.expect(pexpect.EOF)
    seen += child.before
    child.close()
    assert child.exitstatus == 0
    assert "Traceback" not in seen and "Unhandled exception" not in seen
    assert "Press ENTER" not in seen
