"""The prompt's loop: batch files, piped stdin, a terminal, Ctrl-C and Ctrl-D."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from test_prompt_commands import BANNER
from test_prompt_fakes import KERNEL, FakeDebugger, make_stop

from cudump.console import console
from cudump.errors import UsageError
from cudump.prompt import run_prompt
from cudump.prompt.batch_file import load_batch
from cudump.prompt.context import Context
from cudump.prompt.repl import (
    CTRL_D_HINT,
    END_MESSAGE,
    INTERRUPT_MESSAGE,
    TerminalReader,
    drive,
)

BATCH = """\
# a batch file: comments and blank lines are skipped

info breakpoints
p arg0[1]@2
step
diff arg9
continue
x/2xw arg0
"""

SECOND = [line.replace("launch 2 (occurrence 1)", "launch 7 (occurrence 2)") for line in BANNER]


def test_batch_transcript(tmp_path: Path) -> None:
    batch = tmp_path / "cmds.txt"
    batch.write_text(BATCH)
    debugger = FakeDebugger(tmp_path / "run", [make_stop(), make_stop(launch=7, occurrence=2)])
    debugger.breakpoints.add("scale")
    lines: list[str] = []
    run_prompt(debugger, batch=batch, stdin_is_tty=True, out=lines.append)
    assert lines == [
        *BANNER,
        "(cudump) info breakpoints",
        "Num  Type   Enb  Hits  Ignore  What",
        "1    break  y       0       0  scale",
        "(cudump) p arg0[1]@2",
        "arg0[1]@2 = {0.5, 1}",
        "(cudump) step",
        f"Step, after launch 2 (occurrence 1) of {KERNEL}",
        "  pid 4242 thread 4243 device 0 grid (4,1,1) block (128,1,1) smem 0 stream 0x0",
        "arg1 (float*): 15 of 16 elements changed",
        "arg2 (uchar4*): 8 of 24 elements changed",
        "unchanged: arg0",
        "(cudump) diff arg9",
        "error: the kernel has no arg9 (arguments: arg0..arg4)",
        "(cudump) continue",
        "Continuing.",
        *SECOND,
        "(cudump) x/2xw arg0",
        "0x7f0000000000:  0x00000000  0x3f000000",
        "cudump: end of batch file: detaching, the program runs to its end without stopping",
    ]
    assert debugger.resumes == [(2, "step"), (2, "continue"), (7, "detach")]


def test_displays_are_shown_at_every_stop(tmp_path: Path) -> None:
    debugger = FakeDebugger(tmp_path / "run", [make_stop(), make_stop(launch=7, occurrence=2)])
    lines: list[str] = []
    run_prompt(debugger, batch=["display/x arg3", "continue"], out=lines.append)
    assert lines == [*BANNER, "(cudump) display/x arg3", "1: /x arg3 = 0x10",
                     "(cudump) continue", "Continuing.", *SECOND, "1: /x arg3 = 0x10",
                     "cudump: end of batch file: detaching, the program runs to its end "
                     "without stopping"]


def test_batch_quit_kills_without_asking(tmp_path: Path) -> None:
    debugger = FakeDebugger(tmp_path, [make_stop(), make_stop(launch=3)])
    lines: list[str] = []
    run_prompt(debugger, batch=["quit", "info args"], out=lines.append)
    assert lines == [*BANNER, "(cudump) quit", "Killed the program; what was captured is kept."]
    assert debugger.resumes == [(2, "kill")]


def test_load_batch(tmp_path: Path) -> None:
    batch = tmp_path / "b"
    batch.write_text("  # comment\n\n  break k  \np arg0\n")
    assert load_batch(batch) == ["break k", "p arg0"]
    with pytest.raises(UsageError, match="no such file"):
        load_batch(tmp_path / "missing")


@pytest.mark.parametrize("where", ["big", "/dev/zero"])
def test_a_batch_file_over_1_mib_is_refused(tmp_path: Path, where: str) -> None:
    # /dev/zero was read until memory ran out.
    path = Path(where) if where.startswith("/") else tmp_path / "big"
    if where == "big":
        path.write_text("p arg0\n" * ((1 << 20) // 7 + 1))
    with pytest.raises(UsageError, match="more than 1 MiB"):
        load_batch(path)


def test_piped_stdin_echoes_commands_and_detaches_at_eof(tmp_path: Path) -> None:
    debugger = FakeDebugger(tmp_path, [make_stop()])
    lines: list[str] = []
    run_prompt(debugger, stdin=io.StringIO("p arg3\nbogus\n"), stdin_is_tty=False,
               out=lines.append)
    assert lines == [
        *BANNER,
        "(cudump) p arg3",
        "arg3 = 16",
        "(cudump) bogus",
        "error: unknown command 'bogus' (try 'help')",
        "cudump: end of input: detaching, the program runs to its end without stopping",
    ]
    assert debugger.resumes == [(2, "detach")]


def test_a_run_that_never_stops(tmp_path: Path) -> None:
    debugger = FakeDebugger(tmp_path, [])
    lines: list[str] = []
    run_prompt(debugger, batch=["info args"], out=lines.append)
    assert lines == [] and debugger.finished


def test_step_whose_launch_does_not_come_back_waits_for_the_next_stop(tmp_path: Path) -> None:
    debugger = FakeDebugger(tmp_path, [make_stop(), make_stop(launch=7, occurrence=2)])
    debugger.step_returns_none = True
    lines: list[str] = []
    run_prompt(debugger, batch=["step", "kill"], out=lines.append)
    assert lines == [
        *BANNER,
        "(cudump) step",
        "launch 2 gave no stop after it (the launch failed or the process ended); continuing",
        *SECOND,
        "(cudump) kill",
        "Killed the program; what was captured is kept.",
    ]


def test_ctrl_c_while_running_interrupts_then_ends(tmp_path: Path) -> None:
    debugger = FakeDebugger(tmp_path, [make_stop()])
    debugger.on_wait = [KeyboardInterrupt(), None]
    lines: list[str] = []
    run_prompt(debugger, batch=["continue"], out=lines.append)
    assert debugger.interrupts == 1 and debugger.ends == 0
    assert lines[0] == INTERRUPT_MESSAGE
    assert lines[1:] == [*BANNER, "(cudump) continue", "Continuing."]

    debugger = FakeDebugger(tmp_path, [])
    debugger.on_wait = [KeyboardInterrupt(), None, KeyboardInterrupt()]
    lines = []
    run_prompt(debugger, batch=[], out=lines.append)
    assert (debugger.interrupts, debugger.ends) == (1, 1)
    assert lines == [INTERRUPT_MESSAGE, END_MESSAGE]
    assert INTERRUPT_MESSAGE == ("cudump: interrupt: stopping at the next launch (Ctrl-C again "
                                 "to end the run)")


def test_a_ctrl_c_before_the_prompt_counts_as_the_first(tmp_path: Path) -> None:
    """The session's early handler took the first Ctrl-C (the prompt was still loading): the
    prompt's first is the second, and ends the run."""
    debugger = FakeDebugger(tmp_path, [])
    debugger.interrupted = True
    debugger.on_wait = [KeyboardInterrupt()]
    lines: list[str] = []
    run_prompt(debugger, batch=[], out=lines.append)
    assert (debugger.interrupts, debugger.ends) == (0, 1)
    assert lines == [END_MESSAGE]


class InterruptedOnce(FakeDebugger):
    """A second Ctrl-C comes while the first is being acted on (inside `interrupt`)."""

    def interrupt(self) -> None:
        super().interrupt()
        if self.interrupts == 1:
            raise KeyboardInterrupt


def test_a_ctrl_c_while_the_first_is_acted_on_ends_the_run(tmp_path: Path) -> None:
    debugger = InterruptedOnce(tmp_path, [])
    debugger.on_wait = [KeyboardInterrupt(), None]
    lines: list[str] = []
    run_prompt(debugger, batch=[], out=lines.append)
    assert (debugger.interrupts, debugger.ends) == (1, 1)
    assert lines == [INTERRUPT_MESSAGE, END_MESSAGE]


def test_stops_after_the_run_was_ended_are_killed(tmp_path: Path) -> None:
    debugger = FakeDebugger(tmp_path, [make_stop()])
    debugger.on_wait = [KeyboardInterrupt(), KeyboardInterrupt()]
    lines: list[str] = []
    run_prompt(debugger, batch=["info args"], out=lines.append)
    assert lines == [INTERRUPT_MESSAGE, END_MESSAGE]
    assert debugger.resumes == [(2, "kill")]


def _terminal(tmp_path: Path, keys: str, stops: int = 1
              ) -> tuple[FakeDebugger, list[str], Path]:
    debugger = FakeDebugger(tmp_path / "run",
                            [make_stop(launch=2 + i) for i in range(stops)])
    lines: list[str] = []
    ctx = Context(debugger, lines.append)
    history = tmp_path / "history"
    with create_pipe_input() as pipe:
        reader = TerminalReader(ctx, lines.append, pt_input=pipe, pt_output=DummyOutput(),
                                history_path=str(history))
        pipe.send_text(keys)
        drive(ctx, reader)
    return debugger, lines, history


def test_terminal_ctrl_c_cancels_the_line_and_ctrl_d_gives_a_hint(tmp_path: Path) -> None:
    debugger, lines, history = _terminal(tmp_path, "p arg3\rhalf-typed\x03\x04kill\rn\rq\ry\r")
    assert lines == [*BANNER, "arg3 = 16", CTRL_D_HINT, "Not confirmed.",
                     "Killed the program; what was captured is kept."]
    assert debugger.resumes == [(2, "kill")]
    entries = [line[1:] for line in history.read_text().splitlines() if line.startswith("+")]
    assert entries == ["p arg3", "kill", "q"]       # answers are not history


def test_terminal_enter_repeats_the_last_command(tmp_path: Path) -> None:
    # x goes on from the next address; p repeats as typed; an error repeats nothing;
    # break does not repeat; continue does (and its second stop is the last: the run
    # ends, and the kill after it is never read).
    debugger, lines, _ = _terminal(tmp_path, "x/2xw arg0\r\r\rp arg3\r\rp arg9\r\r"
                                   "break k\r\rc\r\rkill\ry\r", stops=2)
    assert lines == [
        *BANNER,
        "0x7f0000000000:  0x00000000  0x3f000000",
        "0x7f0000000008:  0x3f800000  0x3fc00000",
        "0x7f0000000010:  0x40000000  0x40200000",
        "arg3 = 16",
        "arg3 = 16",
        "error: the kernel has no arg9 (arguments: arg0..arg4)",
        "Breakpoint 1: k",
        "  (no kernel seen so far matches; it stops when one does)",
        "Continuing.",
        *[line.replace("launch 2 ", "launch 3 ") for line in BANNER],
        "Continuing.",
    ]
    assert debugger.resumes == [(2, "continue"), (3, "continue")]


def test_enter_repeats_nothing_in_a_batch_or_from_a_pipe(tmp_path: Path) -> None:
    debugger = FakeDebugger(tmp_path, [make_stop()])
    lines: list[str] = []
    run_prompt(debugger, stdin=io.StringIO("x/2xw arg0\n\n"), stdin_is_tty=False,
               out=lines.append)
    assert lines[len(BANNER):] == [
        "(cudump) x/2xw arg0", "0x7f0000000000:  0x00000000  0x3f000000", "(cudump) ",
        "cudump: end of input: detaching, the program runs to its end without stopping"]


def test_terminal_redirects_the_console_while_reading(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    from prompt_toolkit import PromptSession

    original = PromptSession.prompt

    def prompt(self: PromptSession[str], *args: object, **kw: object) -> str:
        seen.append(console._sink)
        return original(self, *args, **kw)

    monkeypatch.setattr(PromptSession, "prompt", prompt)
    debugger, lines, _ = _terminal(tmp_path, "c\r")
    assert debugger.resumes == [(2, "continue")]
    assert len(seen) == 1 and seen[0] is not None
    assert console._sink is None


def test_history_file_from_the_environment(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hist"
    monkeypatch.setenv("CUDUMP_HISTORY", str(path))
    debugger = FakeDebugger(tmp_path / "run", [make_stop()])
    ctx = Context(debugger, [].append)
    with create_pipe_input() as pipe:
        reader = TerminalReader(ctx, ctx.out, pt_input=pipe, pt_output=DummyOutput())
        pipe.send_text("detach\r")
        drive(ctx, reader)
    assert "+detach" in path.read_text()


def _history_at(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A history path that cannot be used, and why cudump says it cannot."""
    if kind == "directory":
        path = tmp_path / "a-directory"
        path.mkdir()
        return path, "Is a directory"
    if kind == "fifo":
        path = tmp_path / "a-fifo"
        os.mkfifo(path)
        return path, "not a regular file"
    if kind == "device":
        return Path("/dev/full"), "not a regular file"
    return tmp_path / "no-such-directory" / "history", "No such file or directory"


@pytest.mark.parametrize("kind", ["directory", "fifo", "device", "missing-directory"])
def test_a_history_path_that_is_not_a_regular_file_is_one_warning_and_the_prompt_works(
        tmp_path: Path, kind: str) -> None:
    # A directory gave prompt_toolkit's traceback and "Press ENTER"; a FIFO or /dev/full
    # hung the prompt at its first read or write of the history.
    path, why = _history_at(tmp_path, kind)
    debugger = FakeDebugger(tmp_path / "run", [make_stop()])
    lines: list[str] = []
    ctx = Context(debugger, lines.append)
    with create_pipe_input() as pipe:
        reader = TerminalReader(ctx, lines.append, pt_input=pipe, pt_output=DummyOutput(),
                                history_path=str(path))
        pipe.send_text("p arg3\rp arg3\rkill\ry\r")
        drive(ctx, reader)
    assert lines == [f"warning: history file {path}: {why}; commands are not kept after this "
                     "run", *BANNER, "arg3 = 16", "arg3 = 16",
                     "Killed the program; what was captured is kept."]
    assert debugger.resumes == [(2, "kill")]


def test_a_history_file_that_stops_being_usable_is_one_warning(tmp_path: Path) -> None:
    # The file is replaced by a FIFO with no reader after the prompt opened it: writing
    # it without O_NONBLOCK would wait for a reader forever.
    path = tmp_path / "history"
    debugger = FakeDebugger(tmp_path / "run", [make_stop()])
    lines: list[str] = []
    ctx = Context(debugger, lines.append)
    with create_pipe_input() as pipe:
        reader = TerminalReader(ctx, lines.append, pt_input=pipe, pt_output=DummyOutput(),
                                history_path=str(path))
        path.unlink()
        os.mkfifo(path)
        pipe.send_text("p arg3\rp arg3\rkill\ry\r")
        drive(ctx, reader)
    warning = [line for line in lines if line.startswith("warning: history file")]
    assert len(warning) == 1 and str(path) in warning[0]
    assert lines.count("arg3 = 16") == 2 and debugger.resumes == [(2, "kill")]


def test_a_long_history_file_is_read_from_its_newest_megabyte(tmp_path: Path) -> None:
    from cudump.prompt.history import MAX_HISTORY_BYTES, SafeFileHistory

    path = tmp_path / "history"
    entry = "\n# 2026-01-01\n+p arg" + "3" * 50 + "\n"
    count = MAX_HISTORY_BYTES // len(entry) + 100
    path.write_text(entry * count + "\n# now\n+two\n+lines\n")
    strings = list(SafeFileHistory(str(path)).load_history_strings())
    assert strings[0] == "two\nlines"
    assert len(strings) < count and set(strings[1:]) == {"p arg" + "3" * 50}
