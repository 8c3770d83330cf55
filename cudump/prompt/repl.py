"""The prompt's loop: wait for a stop, show it, read commands until one lets the launch go.

Input comes from one of three readers:
- a terminal: prompt_toolkit with history (~/.cudump_history or $CUDUMP_HISTORY) and
  completion; cudump's other messages are printed above the line being typed;
- a pipe or file on stdin: plain lines, each echoed after the prompt text;
- `--batch FILE`: the file's lines (blank ones and `#` comments skipped), echoed likewise.
When the input runs out, the launch is let go with `detach`: the program runs to its end
without stopping, and a line says so.

Ctrl-C while the program runs asks it to stop at the next launch; a second Ctrl-C ends
the run. Ctrl-C at the prompt only cancels the line; Ctrl-D there prints a hint. At a
terminal, Enter on an empty line repeats the last command if it is one that repeats (x goes
on after the memory it showed), as gdb does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import cudump.prompt.commands  # noqa: F401  (registers the commands)
from cudump.console import console
from cudump.controller.ctrl_c import END_MESSAGE, INTERRUPT_MESSAGE
from cudump.launches.stop import StoppedLaunch
from cudump.prompt.batch_file import load_batch
from cudump.prompt.commands.detach import detach_now
from cudump.prompt.commands.display import show_displays
from cudump.prompt.context import Context, Out, Outcome
from cudump.prompt.debugger import Debugger
from cudump.prompt.display import banner
from cudump.prompt.registry import execute

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.input import Input
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
    from prompt_toolkit.output import Output

PROMPT = "(cudump) "
POLL_SECONDS = 0.2
CTRL_D_HINT = "(use 'continue', 'step', 'detach' or 'kill'; 'help' lists the commands)"


class Reader:
    """Where commands come from. `read` returns a line, or None when input has ended."""

    end_message = "cudump: end of input: detaching, the program runs to its end without stopping"
    repeats = False      # Enter on an empty line runs the last command again (gdb, at a tty)

    def read(self) -> str | None:
        raise NotImplementedError

    def confirm(self, question: str) -> bool:
        return True


class LinesReader(Reader):
    """Batch-file lines, echoed after the prompt text as if typed."""

    end_message = ("cudump: end of batch file: detaching, the program runs to its end "
                   "without stopping")

    def __init__(self, lines: list[str], out: Out) -> None:
        self._lines: Iterator[str] = iter(lines)
        self.out = out

    def read(self) -> str | None:
        line = next(self._lines, None)
        if line is not None:
            self.out(f"{PROMPT}{line}")
        return line


class StreamReader(Reader):
    """Plain lines from a pipe or a file (no terminal): no escape sequences, each echoed."""

    def __init__(self, stream: TextIO, out: Out) -> None:
        self.stream = stream
        self.out = out

    def read(self) -> str | None:
        while True:
            try:
                line = self.stream.readline()
            except KeyboardInterrupt:
                continue          # cancels the line, never the target
            if not line:
                return None
            text = line.rstrip("\r\n")
            self.out(f"{PROMPT}{text}")
            return text


def _escape_proof_bindings() -> KeyBindings:
    """Key bindings that keep typed escape sequences from breaking the prompt.

    prompt_toolkit reads `ESC [ ... m`, `ESC [ < ... M` and `ESC [ M` followed by three bytes
    as mouse reports, whatever sent them, and its handler fails on the ones no terminal would
    send (`ESC [ 31 m`, a colour code pasted from a program's output): a traceback, then
    "Press ENTER to continue" eats the next line. cudump never turns mouse reporting on, so
    a mouse report can only be typed text: it goes to prompt_toolkit's handler, and is
    dropped where that handler cannot read it.
    """
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.key_binding.bindings.mouse import load_mouse_bindings
    from prompt_toolkit.keys import Keys

    original = next(b.handler for b in load_mouse_bindings().bindings
                    if b.keys == (Keys.Vt100MouseEvent,))
    keys = KeyBindings()

    @keys.add(Keys.Vt100MouseEvent)
    def _mouse(event: KeyPressEvent) -> object:
        try:
            return original(event)
        except Exception:   # not a mouse report any terminal sends: typed, so ignored
            return None

    return keys


class TerminalReader(Reader):
    """prompt_toolkit on a terminal: history, completion, messages above the input line."""

    repeats = True

    def __init__(self, ctx: Context, out: Out, *, pt_input: Input | None = None,
                 pt_output: Output | None = None, history_path: str | None = None) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory
        from prompt_toolkit.output import create_output

        from cudump.prompt.completion import PromptCompleter
        from cudump.prompt.history import open_history

        self.out = out
        if history_path is None:
            history_path = (os.environ.get("CUDUMP_HISTORY")
                            or str(Path.home() / ".cudump_history"))
        self.history_path = history_path
        history, warning = open_history(history_path)
        if warning is not None:
            out(warning)
        self.history = history
        self.history_warned = warning is not None
        # cudump's lines go to stderr (the program's stdout is its own); so does the prompt.
        output = pt_output
        if output is None and sys.stderr.isatty():
            output = create_output(stdout=sys.stderr)
        keys = _escape_proof_bindings()
        self.session: PromptSession[str] = PromptSession(
            history=history, completer=PromptCompleter(ctx), complete_while_typing=False,
            input=pt_input, output=output, key_bindings=keys)
        # Answers to questions (y or n) stay out of the command history.
        self.asking: PromptSession[str] = PromptSession(
            history=InMemoryHistory(), input=self.session.input, output=self.session.output,
            key_bindings=keys)

    def _prompt(self, session: PromptSession[str], message: str) -> str:
        from prompt_toolkit.application import create_app_session
        from prompt_toolkit.patch_stdout import StdoutProxy

        with create_app_session(input=session.input, output=session.output), \
                StdoutProxy(raw=True) as proxy:
            def sink(line: str) -> None:
                proxy.write(line + "\n")
                proxy.flush()

            console.redirect(sink)
            try:
                return session.prompt(message)
            finally:
                console.redirect(None)

    def read(self) -> str | None:
        while True:
            try:
                line = self._prompt(self.session, PROMPT)
            except KeyboardInterrupt:
                continue                  # Ctrl-C cancels the line only
            except EOFError:
                self.out(CTRL_D_HINT)     # Ctrl-D never lets the target go by itself
                continue
            finally:
                self._warn_history()
            return line

    def _warn_history(self) -> None:
        """Once, when the history file failed after it was opened (a full disk)."""
        problem = getattr(self.history, "problem", None)
        if problem is not None and not self.history_warned:
            self.history_warned = True
            self.out(f"warning: history file {self.history_path}: {problem}; commands are "
                     "not kept after this run")

    def confirm(self, question: str) -> bool:
        try:
            answer = self._prompt(self.asking, question)
        except (KeyboardInterrupt, EOFError):
            return False
        return answer.strip().lower() in ("y", "yes")


def wait_for_stop(debugger: Debugger, out: Out, poll: float = POLL_SECONDS
                  ) -> StoppedLaunch | None:
    """The next stop, or None when the run has ended. Ctrl-C (KeyboardInterrupt in this
    thread) asks for a stop at the next launch; a second one ends the run, also where the
    first came before the prompt was ready (the session's early handler took it)."""
    interrupts = 0
    while True:
        try:
            _take_ctrl_c()
            stop = debugger.wait_for_stop(timeout=poll)
            if stop is not None:
                if interrupts >= 2:         # the run is ending: nothing more to inspect
                    debugger.resume(stop, "kill")
                    continue
                return stop
            if debugger.finished:
                return None
        except KeyboardInterrupt:
            interrupts = _ctrl_c(debugger, out, interrupts)


def _ctrl_c(debugger: Debugger, out: Out, interrupts: int) -> int:
    """One more Ctrl-C while waiting, acted on: the first asks for a stop at the next launch,
    the second ends the run. A first may have been the session's early handler's (the
    prompt was loading): the debugger still waits for the stop it asked for. A Ctrl-C that
    comes while one is acted on (a user pressing it twice) counts too: it ends the run, and
    an end it cut short is made again. Returns the Ctrl-Cs counted."""
    interrupts = max(interrupts, int(debugger.interrupted)) + 1
    while True:
        try:
            if interrupts == 1:
                out(INTERRUPT_MESSAGE)
                debugger.interrupt()
            elif interrupts == 2:
                out(END_MESSAGE)
                debugger.end()
            return interrupts
        except KeyboardInterrupt:
            interrupts = max(interrupts, 2)


def run_prompt(debugger: Debugger, *, batch: Path | list[str] | None = None,
               stdin_is_tty: bool | None = None, stdin: TextIO | None = None,
               out: Callable[[str], None] | None = None) -> None:
    """Drive a run from the prompt until it ends, or until detach, kill or quit.

    `batch`: a batch file (or its lines) to read commands from instead of stdin.
    `stdin_is_tty`: use the interactive prompt (default: whether stdin is a terminal).
    `stdin`, `out`: where lines come from and go to (default sys.stdin, and console.say).
    """
    # By default through the console: whole lines under its lock, on stderr (the program's
    # stdout is its own), never failing on a closed stderr.
    write: Out = out or console.say
    source = stdin if stdin is not None else sys.stdin
    if stdin_is_tty is None:
        stdin_is_tty = stdin is None and source.isatty()
    ctx = Context(debugger, write)
    reader: Reader
    if batch is not None:
        lines = batch if isinstance(batch, list) else load_batch(batch)
        reader = LinesReader(lines, write)
    elif stdin_is_tty:
        reader = TerminalReader(ctx, write)
    else:
        reader = StreamReader(source, write)
    drive(ctx, reader)


def _take_ctrl_c() -> None:
    """From here Ctrl-C is the prompt's (KeyboardInterrupt in this thread); until now the
    session's early handler took it (the program was already running). Done inside
    wait_for_stop's try, so that a Ctrl-C right after the switch is one it counts, not a
    KeyboardInterrupt out of the prompt."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def drive(ctx: Context, reader: Reader) -> None:
    """Stops and commands until the run ends or a command ends the prompt."""
    ctx.confirm = reader.confirm
    while True:
        stop = wait_for_stop(ctx.debugger, ctx.out)
        if stop is None:
            return
        ctx.set_stop(stop)
        try:
            for line in banner(stop, ctx.allocation_for):
                ctx.say(line)
            show_displays(ctx)
        except KeyboardInterrupt:
            pass
        except Exception as err:  # the stop is still there to inspect
            ctx.say(f"error: cannot show the stop: {type(err).__name__}: {err}")
        if command_loop(ctx, reader) is Outcome.ENDED:
            return


def command_loop(ctx: Context, reader: Reader) -> Outcome:
    """Commands at one stop, until one lets the launch go (or input ends: detach)."""
    while True:
        line = reader.read()
        if line is None:
            if ctx.check_gone():   # a next stop, of another process, is let go at once
                return Outcome.ENDED if ctx.debugger.finished else Outcome.RESUMED
            if ctx.stop is not None:
                detach_now(ctx, None)
            ctx.say(reader.end_message)
            return Outcome.ENDED
        if reader.repeats and not line.strip() and ctx.repeat:
            line = ctx.repeat
        outcome = execute(ctx, line)
        if outcome is not None:
            return outcome
        if getattr(ctx.stop, "resumed", False):
            return Outcome.RESUMED  # a Ctrl-C cut the command short after it let the launch go
        if ctx.stop is None:   # a step whose launch did not come back
            return Outcome.RESUMED
