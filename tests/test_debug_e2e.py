"""Breakpoints end to end on the stand-in driver: the shim holds launches, the controller
serves the prompt, and the program runs on with its own output and exit status.

Batch sessions check exact transcripts (addresses and pids normalised); sessions in a
pseudo-terminal (pexpect) check what a person at the terminal sees, Ctrl-C included.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from records import manifest
from zedref import pipeline

ROOT = Path(__file__).resolve().parent.parent
W, H = 64, 48
FRP0K = ("void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4*, int, device::uchar8*, "
         "device::uchar8*, int, int, int, float)")


def normalise(text: str) -> str:
    text = re.sub(r"0x[0-9a-f]{6,}", "0xADDR", text)
    text = re.sub(r"\b(pid|thread) \d+", r"\1 N", text)
    return text


def transcript(stderr: str) -> list[str]:
    """cudump's own lines, without the summary's numbers of bytes."""
    return [normalise(line) for line in stderr.splitlines()]


def batch(tmp_path: Path, *commands: str) -> Path:
    path = tmp_path / "commands.txt"
    path.write_text("\n".join(commands) + "\n")
    return path



def test_next_stops_at_the_next_launch_of_any_kernel(fake, cudump_run, tmp_path):
    """`next` at a breakpoint on one kernel stops at the launch after it, of another kernel;
    `continue` then goes to the breakpoint again."""
    program = [str(fake.programs["zed"]), "2", "--size", f"{W}x{H}"]
    commands = batch(tmp_path, "next", "whatis arg0", "continue", "continue")
    ran = cudump_run(program, "--break", "device::FrP0k5607tPV*", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    heads = [line for line in transcript(ran.stderr)
             if line.startswith(("Breakpoint", "Interrupt", "(cudump)", "Continuing", "type ="))]
    assert heads[:4] == [f"Breakpoint 1, launch 2 (occurrence 1) of {FRP0K}",
                         "(cudump) next", "Continuing to the next launch."] + heads[3:4]
    assert heads[3].startswith("Interrupt, launch 3 (occurrence 2) of ")
    assert heads[4:] == ["(cudump) whatis arg0", heads[5], "(cudump) continue", "Continuing.",
                         f"Breakpoint 1, launch 4 (occurrence 2) of {FRP0K}",
                         "(cudump) continue", "Continuing."]
    assert heads[5].startswith("type = ")


@pytest.mark.parametrize("how", ["path", "relative"])
def test_bt_symbolises_a_program_found_on_path(fake, cudump_run, tmp_path, how):
    """A program started by name (found on PATH, as the kernel did) or by a path relative
    to its working directory: bt names main, which only the file's symbol table knows."""
    zed = Path(fake.programs["zed"])
    commands = batch(tmp_path, "bt", "continue", "continue")
    if how == "path":
        argv, env = [zed.name], {"PATH": f"{zed.parent}{os.pathsep}{os.environ['PATH']}"}
    else:
        argv, env = [os.path.relpath(zed, tmp_path)], {}
    ran = cudump_run([*argv, "2", "--size", f"{W}x{H}"], "--break", "device::FrP0k5607tPV*",
                     "--batch", str(commands), env_extra=env)
    assert ran.returncode == 0, ran.stderr
    frames = [line for line in ran.stderr.splitlines() if line.startswith("#")]
    ours = [line for line in frames if f"({argv[0]}" in line]
    assert ours, frames
    assert any(re.search(r" in main\+0x[0-9a-f]+ \(", line) for line in ours), frames
    assert not any("??" in line for line in ours), frames


def test_batch_session_reads_dumps_and_steps_a_pitched_image_kernel(fake, cudump_run, bare_run,
                                                                   tmp_path):
    program = [str(fake.programs["zed"]), "2", "--size", f"{W}x{H}"]
    commands = batch(tmp_path, "info args", "x/8xb arg0", "p arg5", "dump arg2 left-before.npy",
                     "step", "dump arg2 left-after.npy", "diff arg2", "continue")
    ran = cudump_run(program, "--break", "device::FrP0k5607tPV*", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout

    uyvy, left, _ = pipeline(W, H, 0)
    before = np.load(ran.run_dir / "left-before.npy")
    after = np.load(ran.run_dir / "left-after.npy")
    assert not before.any()  # the program zeroes its outputs first
    assert np.array_equal(after, left.reshape(H, -1))  # exactly what the kernel wrote

    lines = transcript(ran.stderr)
    first_bytes = "  ".join(f"0x{b:02x}" for b in uyvy.reshape(-1)[:8])
    changed = int((left.reshape(H, -1) != 0).sum())
    assert lines[:12] == [
        f"cudump: writing to {ran.run_dir}",
        f"Breakpoint 1, launch 2 (occurrence 1) of {FRP0K}",
        "  pid N thread N device 0 grid (2,6,1) block (32,8,1) smem 0 stream 0x0",
        "  arg0  uchar4*         = 0xADDR  -> pitched 0xADDR size 24576 pitch 512 width 256 B "
        "height 48, offset 0",
        "  arg1  int             = 512",
        "  arg2  device::uchar8* = 0xADDR  -> pitched 0xADDR size 24576 pitch 512 width 256 B "
        "height 48, offset 0",
        "  arg3  device::uchar8* = 0xADDR  -> pitched 0xADDR size 24576 pitch 512 width 256 B "
        "height 48, offset 0",
        "  arg4  int             = 512",
        "  arg5  int             = 64",
        "  arg6  int             = 48",
        "  arg7  float           = 1",
        "(cudump) info args",
    ]
    assert f"0xADDR:  {first_bytes}" in lines
    at = lines.index("(cudump) p arg5")
    assert lines[at + 1] == "arg5 = 64"
    at = lines.index("(cudump) step")
    assert lines[at + 1] == f"Step, after launch 2 (occurrence 1) of {FRP0K}"
    assert f"arg2 (device::uchar8*): {changed} of {H * W * 4} elements changed" in lines
    at = lines.index("(cudump) continue")
    assert lines[at + 1:at + 3] == ["Continuing.",
                                    f"Breakpoint 1, launch 4 (occurrence 2) of {FRP0K}"]
    assert ("cudump: end of batch file: detaching, the program runs to its end without "
            "stopping") in lines
    dumps = [r for r in manifest(ran.run_dir) if r.get("source") == "dump"]
    assert [(r["file"], r["phase"], r["arg"]) for r in dumps] == [
        ("left-before.npy", "before", 2), ("left-after.npy", "after", 2)]


def test_breakpoints_set_at_the_prompt_hit_kernels_registered_earlier(fake, cudump_run,
                                                                       tmp_path):
    """nv12_to_uyvy launched (and had its wants cached) before the first stop; a tbreak on
    it with an ignore count set there takes effect at its next launches."""
    program = [str(fake.programs["zed"]), "4", "--size", f"{W}x{H}"]
    commands = batch(tmp_path, "tbreak nv12_to_uyvy", "ignore 2 1", "disable 1",
                     "info breakpoints", "continue", "info launch", "info breakpoints",
                     "continue")
    ran = cudump_run(program, "--break", "FrP0k5607tPV", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    lines = transcript(ran.stderr)
    stops = [ln for ln in lines
             if re.match(r"^(Breakpoint|Temporary breakpoint|Interrupt|Step) .*, launch ", ln)]
    # launch 2: FrP0k; launch 3 (nv12 occurrence 2) ignored; launch 5 (occurrence 3) stops,
    # in gdb's words for a tbreak.
    assert [s.split(" of ")[0] for s in stops] == [
        "Breakpoint 1, launch 2 (occurrence 1)",
        "Temporary breakpoint 2, launch 5 (occurrence 3)"]
    assert stops[1].endswith("nv12_to_uyvy(unsigned char const*, unsigned int, unsigned char*, "
                             "unsigned int, unsigned int, unsigned int)")
    # The temporary breakpoint is gone after its stop; the disabled one stays.
    last = len(lines) - 1 - lines[::-1].index("(cudump) info breakpoints")
    assert "tbreak" not in " ".join(lines[last + 1:last + 4])


def test_display_is_shown_at_every_stop(fake, cudump_run, tmp_path):
    program = [str(fake.programs["zed"]), "2", "--size", f"{W}x{H}"]
    commands = batch(tmp_path, "display arg7", "display/x arg5", "continue", "info display")
    ran = cudump_run(program, "--break", "FrP0k5607tPV", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    lines = transcript(ran.stderr)
    at = lines.index("(cudump) continue")
    assert lines[at - 4:at] == ["(cudump) display arg7", "1: arg7 = 1",
                                "(cudump) display/x arg5", "2: /x arg5 = 0x40"]
    second = lines.index(f"Breakpoint 1, launch 4 (occurrence 2) of {FRP0K}")
    assert lines[second + 10:second + 12] == ["1: arg7 = 1.25", "2: /x arg5 = 0x40"]
    assert lines[second + 12:second + 16] == [
        "(cudump) info display", "Auto-display expressions now in effect:",
        "Num Enb Expression", "1:   y  arg7"]


def test_set_var_writes_the_memory_the_kernel_reads(fake, cudump_run, tmp_path):
    """set var at a stop writes device memory through the shim (MSG_WRITE): read back, and
    seen by the kernel, whose output the program checks pixel by pixel."""
    program = [str(fake.programs["zed"]), "1", "--size", f"{W}x{H}"]
    commands = batch(tmp_path, "set var arg0[0] = {255, 254, 253, 252}", "p arg0[0]@2",
                     "x/4xb arg0", "set var arg0[0] = {256, 0, 0, 0}", "continue")
    ran = cudump_run(program, "--break", "FrP0k5607tPV", "--batch", str(commands))
    lines = transcript(ran.stderr)
    uyvy, _, _ = pipeline(W, H, 0)
    second = ", ".join(str(int(v)) for v in uyvy.reshape(-1)[4:8])
    assert f"arg0[0]@2 = {{{{255, 254, 253, 252}}, {{{second}}}}}" in lines
    assert "0xADDR:  0xff  0xfe  0xfd  0xfc" in lines
    assert ("error: set: 256 does not fit in arg0[0] (uint8: 0..255)") in lines
    assert ran.returncode != 0
    assert "frame 0 pixel (0, 0) differs" in ran.stderr


def test_a_condition_decides_per_launch(fake, cudump_run, tmp_path):
    program = [str(fake.programs["zed"]), "4", "--size", f"{W}x{H}"]
    commands = batch(tmp_path, "continue", "continue", "continue")
    # arg7 is the gain: 1.00 on even frames, 1.25 on odd ones. Stop only where it is not 1.
    ran = cudump_run(program, "--break", "FrP0k5607tPV if arg7 > 1 && arg5 == 64", "--batch",
                     str(commands))
    assert ran.returncode == 0, ran.stderr
    stops = [ln.split(" of ")[0] for ln in transcript(ran.stderr) if ln.startswith("Breakpoint")]
    assert stops == ["Breakpoint 1, launch 4 (occurrence 2)",
                     "Breakpoint 1, launch 8 (occurrence 4)"]


def test_eight_threads_launching_while_one_is_stopped(fake, cudump_run, bare_run, tmp_path):
    """All-stop: the other seven threads wait at their next launch; nothing is lost or
    counted twice, and nothing deadlocks."""
    program = [str(fake.programs["threads"]), "200"]
    commands = batch(tmp_path, *(["continue"] * 20), "delete", "continue")
    ran = cudump_run(program, "--break", "vecAdd", "--batch", str(commands), timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout  # each thread verified its own sums
    stops = [ln for ln in ran.stderr.splitlines() if ln.startswith("Breakpoint 1, launch")]
    assert len(stops) == 21
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert summary["launches"] == 8 * 200
    assert list(summary["kernels"].values()) == [8 * 200]


def test_info_threads_marks_the_thread_holding_the_launch(fake, cudump_run, tmp_path):
    program = [str(fake.programs["threads"]), "3"]
    commands = batch(tmp_path, "info threads", "delete", "continue")
    ran = cudump_run(program, "--break", "vecAdd", "--batch", str(commands), timeout=60)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stderr.splitlines()
    pid, tid = map(int, re.search(r"pid (\d+) thread (\d+)", ran.stderr).groups())
    # Eight threads launch at once: whichever launch reaches the breakpoint first is held.
    launch = int(re.search(r"Breakpoint 1, launch (\d+) ", ran.stderr).group(1))
    at = lines.index("(cudump) info threads")
    assert lines[at + 1].split() == ["Id", "Thread", "Name", "State"]
    table = lines[at + 2:lines.index("(cudump) delete")]
    assert tid != pid                    # a worker launches; the main thread waits for it
    assert table[0].split()[:4] == ["1", "LWP", str(pid), '"threads"']
    held = [line.split(maxsplit=5) for line in table if line.startswith("*")]
    assert held == [["*", held[0][1], "LWP", str(tid), '"threads"',
                     f"holds launch {launch} (vecAdd)"]]


@pytest.mark.parametrize("ending", [(), ("detach",)])
def test_processes_that_wait_for_each_other_run_on_after_a_detach(fake, cudump_run, bare_run,
                                                                  tmp_path, ending):
    """Two processes meet before every launch, as the ranks of a collective do, so both
    get stopped at once: letting one go with detach (typed, or the batch running out)
    lets the other go too. Before, the other's stop kept every process held for good."""
    program = [str(fake.programs["procs"]), "4"]
    commands = batch(tmp_path, "info args", "continue", "continue", *ending)
    ran = cudump_run(program, "--break", "vecAdd", "--batch", str(commands), timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout == "verified 2 processes x 4 launches\n"


def test_break_rule_action_stops_like_a_breakpoint(fake, cudump_run, tmp_path):
    rule = tmp_path / "stop.yaml"
    rule.write_text('rules:\n  - kernel: "nv12_to_uyvy"\n    match: base\n    action: break\n'
                    '    skip: 1\n    count: 1\n')
    commands = batch(tmp_path, "info launch", "continue")
    ran = cudump_run([str(fake.programs["zed"]), "3", "--size", f"{W}x{H}"], "--rule", str(rule),
                     "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    stops = [ln for ln in transcript(ran.stderr) if " launch " in ln and " of " in ln
             and ln.startswith("Rule")]
    assert len(stops) == 1 and "launch 3 (occurrence 2)" in stops[0]


def test_kill_at_the_prompt_ends_the_program_with_sigkill(fake, cudump_run, tmp_path):
    commands = batch(tmp_path, "kill")
    ran = cudump_run([str(fake.programs["zed"]), "2", "--size", f"{W}x{H}"], "--break",
                     "FrP0k5607tPV", "--batch", str(commands))
    assert ran.returncode == 128 + 9
    assert "was killed by SIGKILL" in ran.stderr
    summary = json.loads((ran.run_dir / "summary.json").read_text())
    assert summary["exit_status"] == 137


# ---------------------------------------------------------------- a terminal


pexpect = pytest.importorskip("pexpect")


@pytest.fixture
def spawn(shim_lib, fake, tmp_path):
    def start(*args: str, timeout: float = 30, history: Path | None = None):
        env = fake.env()
        env["CUDUMP_SHIM"] = str(shim_lib)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env["CUDUMP_HISTORY"] = str(history or tmp_path / "history")
        env["TERM"] = "dumb"
        child = pexpect.spawn(sys.executable, ["-m", "cudump", "--out", str(tmp_path / "run"),
                                               *args], env=env, cwd=str(tmp_path),
                              encoding="utf-8", timeout=timeout, dimensions=(50, 250))
        return child

    return start


def test_terminal_session_on_a_breakpoint(spawn, fake, tmp_path):
    child = spawn("--break", "FrP0k5607tPV", "--", str(fake.programs["zed"]), "2", "--size",
                  f"{W}x{H}")
    child.expect(r"Breakpoint 1, launch 2 \(occurrence 1\)")
    child.expect_exact("(cudump)")
    child.sendline("x/2xw arg0")
    child.expect(r"0x[0-9a-f]+:\s+0x[0-9a-f]{8}\s+0x[0-9a-f]{8}")
    child.sendline("dump arg2")
    child.expect(r"-> .*dump-000002-\d+-FrP0k5607tPV-arg2-before\.npy")
    child.sendline("step")
    child.expect(r"arg2 \(device::uchar8\*\): \d+ of 12288 elements changed")
    child.sendline("delete")
    child.sendline("continue")
    child.expect(r"cudump: 1 process, 4 launches")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_a_history_path_that_is_no_regular_file_warns_and_the_terminal_works(spawn, fake,
                                                                            tmp_path, kind):
    # A directory gave prompt_toolkit's traceback and "Press ENTER"; a FIFO or /dev/full
    # hung the prompt after the first command.
    history = {"directory": tmp_path, "fifo": tmp_path / "fifo",
               "device": Path("/dev/full")}[kind]
    if kind == "fifo":
        os.mkfifo(history)
    child = spawn("--break", "FrP0k5607tPV", "--", str(fake.programs["zed"]), "1", "--size",
                  f"{W}x{H}", history=history)
    child.expect_exact(f"warning: history file {history}: ")
    child.expect_exact("(cudump)")
    child.sendline("p arg1")
    child.expect(r"arg1 = \d+")
    child.expect_exact("(cudump)")
    child.sendline("continue")
    child.expect(r"cudump: 1 process")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "Traceback" not in child.before and "Press ENTER" not in child.before


def test_enter_repeats_x_from_the_next_address_in_a_terminal(spawn, fake):
    child = spawn("--break", "FrP0k5607tPV", "--", str(fake.programs["zed"]), "1", "--size",
                  f"{W}x{H}")
    child.expect(r"arg0  uchar4\*\s+= 0x([0-9a-f]+)")
    arg0 = int(child.match.group(1), 16)
    child.expect_exact("(cudump)")
    child.sendline("x/2xw arg0")
    child.expect(rf"0x{arg0:x}:\s+0x[0-9a-f]{{8}}\s+0x[0-9a-f]{{8}}")
    child.expect_exact("(cudump)")
    child.sendline("")                 # Enter: the next two words
    child.expect(rf"0x{arg0 + 8:x}:\s+0x[0-9a-f]{{8}}\s+0x[0-9a-f]{{8}}")
    child.expect_exact("(cudump)")
    child.sendline("")
    child.expect(rf"0x{arg0 + 16:x}:\s+0x[0-9a-f]{{8}}\s+0x[0-9a-f]{{8}}")
    child.expect_exact("(cudump)")
    child.sendline("continue")
    child.expect(r"cudump: 1 process")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_stops_the_running_program_and_at_the_prompt_only_cancels(spawn, fake):
    import time

    child = spawn("--break", "never_launched_kernel", "--", str(fake.programs["zed"]),
                  "1000000", "--size", "16x8", timeout=60)
    child.expect(r"frame 3 ")          # the program is well under way
    child.sendintr()
    child.expect(r"Interrupt, launch \d+ \(occurrence \d+\) of \S")
    child.expect_exact("(cudump)")
    child.sendintr()                   # at the prompt: cancels the line, the target lives
    child.sendline("info launch")
    child.expect(r"launch\s+\d+")
    child.sendline("continue")
    child.expect("Continuing.")
    child.expect(r"frame \d+ ")        # running again
    time.sleep(0.3)
    child.sendintr()
    child.expect(r"Interrupt, launch \d+")
    child.expect_exact("(cudump)")
    child.sendline("kill")
    child.expect_exact("Kill the program being debugged? (y or n)")
    child.sendline("y")
    child.expect(r"killed by SIGKILL")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 128 + 9


def test_ctrl_c_after_detach_goes_to_the_program(spawn, fake):
    """After detach the program runs on its own, and, as after gdb's detach, the terminal's
    Ctrl-C is the program's: cudump passes it on to the program's process group (before,
    cudump ignored it and the program ran on)."""
    child = spawn("--break", "FrP0k5607tPV", "--", str(fake.programs["zed"]), "1000000",
                  "--size", "16x8", timeout=60)
    child.expect(r"Breakpoint 1, launch 2 \(occurrence 1\)")
    child.expect_exact("(cudump)")
    child.sendline("detach")
    child.expect("Detaching: the program runs to its end without stopping.")
    child.expect(r"frame \d+ ")        # running on its own
    child.sendintr()
    child.expect(r"was killed by SIGINT \(signal 2\)")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 128 + 2


def _wait_until_dead(pid: int) -> None:
    """Until the process is gone or a zombie (a condition, not a time)."""
    import time

    from cudump.launches.process import process_lives

    deadline = time.monotonic() + 20
    while process_lives(pid):
        assert time.monotonic() < deadline, f"process {pid} still lives"
        time.sleep(0.01)


@pytest.mark.parametrize("command", ["info launch", "p arg5"])
def test_a_program_killed_at_a_stop_is_not_being_run(spawn, fake, command):
    """The program is killed from outside while a launch is held: the next command says
    that it is not being run, and how it ended, instead of answering from the stop."""
    import signal

    child = spawn("--break", "FrP0k5607tPV", "--", str(fake.programs["zed"]), "2", "--size",
                  f"{W}x{H}")
    child.expect(r"pid (\d+) thread")
    pid = int(child.match.group(1))
    child.expect_exact("(cudump)")
    os.kill(pid, signal.SIGKILL)
    _wait_until_dead(pid)
    child.sendline(command)
    child.expect_exact(f"The program is not being run: process {pid} was killed by SIGKILL.")
    child.expect(r"was killed by SIGKILL \(signal 9\)")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 128 + 9


def test_a_second_ctrl_c_while_running_ends_the_run(spawn, tmp_path):
    """No launch comes to take the first Ctrl-C: the second one ends the run cleanly."""
    script = tmp_path / "idle.sh"
    script.write_text("#!/bin/sh\necho started\nexec sleep 60\n")
    script.chmod(0o755)
    child = spawn("--break", "anything", "--", str(script), timeout=30)
    child.expect("started")
    child.sendintr()
    child.expect("stopping at the next launch")
    child.sendintr()
    child.expect("ending the run")
    child.expect(r"killed by SIGTERM")
    child.expect(r"cudump: 1 process|cudump: 0 processes")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 128 + 15
    assert (tmp_path / "run" / "summary.json").is_file()


def test_cudump_without_a_terminal_reads_plain_lines(fake, shim_lib, tmp_path):
    env = fake.env()
    env["CUDUMP_SHIM"] = str(shim_lib)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-m", "cudump", "--out", str(tmp_path / "run"),
                           "--break", "FrP0k5607tPV", "--", str(fake.programs["zed"]), "1",
                           "--size", f"{W}x{H}"], input="info launch\ncontinue\n", env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr
    assert "(cudump) info launch" in done.stderr
