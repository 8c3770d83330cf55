"""Tab completion of the prompt."""

from __future__ import annotations

from pathlib import Path

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from test_prompt_fakes import FakeDebugger, make_stop

from cudump.prompt.completion import PromptCompleter, complete
from cudump.prompt.context import Context


def _ctx(tmp_path: Path) -> Context:
    ctx = Context(FakeDebugger(tmp_path), [].append)
    ctx.set_stop(make_stop())
    return ctx


def test_command_names(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    assert complete(ctx, "")[1] == 0
    assert "break" in complete(ctx, "")[0]
    assert complete(ctx, "d") == (
        ["d", "delete", "detach", "diff", "disable", "display", "down", "dump"], 1)
    assert complete(ctx, "  ti") == ([], 2)
    assert complete(ctx, "tb") == (["tbreak"], 2)


def test_subcommands(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    assert complete(ctx, "info ") == (
        ["allocs", "args", "breakpoints", "display", "graph", "kernels", "launch",
         "locals", "scope", "threads"], 0)
    assert complete(ctx, "info b") == (["breakpoints"], 1)
    assert complete(ctx, "i k") == (["kernels"], 1)


def test_kernel_names(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    assert complete(ctx, "break ") == (["fill", "fill<int>", "scale"], 0)
    assert complete(ctx, "b fi") == (["fill", "fill<int>"], 2)
    assert complete(ctx, "tbreak fill<") == (["fill<int>"], 5)


def test_arguments(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    assert complete(ctx, "p ") == (["arg0", "arg1", "arg2", "arg3", "arg4"], 0)
    assert complete(ctx, "print *arg") == (["arg0", "arg1", "arg2", "arg3", "arg4"], 3)
    assert complete(ctx, "x/4xw arg2") == (["arg2"], 4)
    assert complete(ctx, "dump a") == (["arg0", "arg1", "arg2", "arg3", "arg4"], 1)
    assert complete(ctx, "diff arg1") == (["arg1"], 4)
    ctx.set_stop(None)
    assert complete(ctx, "p a") == ([], 1)


def test_breakpoint_numbers_and_help(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ctx.debugger.breakpoints.add("scale")
    ctx.debugger.breakpoints.add("fill")
    assert complete(ctx, "delete ") == (["1", "2"], 0)
    assert complete(ctx, "disable 1 ") == (["1", "2"], 0)
    assert complete(ctx, "help st") == (["step"], 2)
    assert complete(ctx, "nosuch a") == ([], 0)


def test_prompt_toolkit_completer(tmp_path: Path) -> None:
    completer = PromptCompleter(_ctx(tmp_path))
    got = list(completer.get_completions(Document("info ar"), CompleteEvent()))
    assert [(c.text, c.start_position) for c in got] == [("args", -2)]
