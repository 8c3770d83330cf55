"""The prompt's commands against an in-memory target: exact output."""

from __future__ import annotations

import argparse
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_prompt_fakes import (
    HEIGHT,
    KERNEL,
    PITCH,
    WIDTH_BYTES,
    A,
    B,
    C,
    FakeDebugger,
    FakeStop,
    make_info,
    make_memory,
    make_stop,
)

from cudump.kernels.args import decode_args
from cudump.kernels.geometry import Allocation
from cudump.kernels.signature import parse_signature
from cudump.launches.scopes import Where
from cudump.prompt.context import Context, Outcome
from cudump.prompt.display import banner
from cudump.prompt.registry import (
    STOPPED,
    Registry,
    command,
    execute,
    make_parser,
)
from cudump.rundir.imaging import read_png

BANNER = [
    f"Breakpoint 1, launch 2 (occurrence 1) of {KERNEL}",
    "  pid 4242 thread 4243 device 0 grid (4,1,1) block (128,1,1) smem 0 stream 0x0",
    "  arg0  float const* = 0x7f0000000000  -> linear 0x7f0000000000 size 64, offset 0",
    "  arg1  float*       = 0x7f0000001000  -> linear 0x7f0000001000 size 64, offset 0",
    "  arg2  uchar4*      = 0x7f0000100000  -> pitched 0x7f0000100000 size 192 pitch 64 "
    "width 32 B height 3, offset 0",
    "  arg3  int          = 16",
    "  arg4  float        = 0.5",
]


class Prompt:
    """A Context at a stop; `run` returns the lines one command printed."""

    def __init__(self, debugger: FakeDebugger, stop: FakeStop | None) -> None:
        self.lines: list[str] = []
        self.debugger = debugger
        self.ctx = Context(debugger, self.lines.append)
        self.ctx.set_stop(stop)
        self.outcomes: list[Outcome | None] = []

    def stopped_writes(self) -> list[tuple[int, bytes]]:
        return self.ctx.stopped.writes  # type: ignore[attr-defined]

    def run(self, line: str) -> list[str]:
        start = len(self.lines)
        self.outcomes.append(execute(self.ctx, line))
        return self.lines[start:]


@pytest.fixture
def debugger(tmp_path: Path) -> FakeDebugger:
    return FakeDebugger(tmp_path / "run")


@pytest.fixture
def prompt(debugger: FakeDebugger) -> Prompt:
    return Prompt(debugger, make_stop())


# ------------------------------------------------------------------ banner and info


def test_banner(prompt: Prompt) -> None:
    assert banner(prompt.ctx.stopped, prompt.ctx.allocation_for) == BANNER


def test_banner_of_the_stop_after_a_step(prompt: Prompt) -> None:
    stop = make_stop(reason="step")
    stop.info.phase = "after"
    assert banner(stop)[0] == f"Step, after launch 2 (occurrence 1) of {KERNEL}"


def test_info_args_and_its_shorthand(prompt: Prompt) -> None:
    assert prompt.run("info args") == BANNER[2:]
    assert prompt.run("args") == BANNER[2:]
    assert prompt.run("i ar") == BANNER[2:]


def test_banner_of_untyped_and_struct_arguments(debugger: FakeDebugger) -> None:
    sig = parse_signature("void k<3>(std::array<char*, 2ul>, int, device::uchar8*, float2, "
                          "float*, double**)")
    raw = [A.to_bytes(8, "little") + B.to_bytes(8, "little"), (3).to_bytes(4, "little"),
           (C + PITCH + 8).to_bytes(8, "little"), struct.pack("<ff", 1.5, -2),
           (0).to_bytes(8, "little"), (0x7F00DEADBEEF).to_bytes(8, "little")]
    info = replace(make_info(), kernel=sig.demangled, signature=sig,
                   args=decode_args(sig, raw),
                   pointers={(0, 0): Allocation(A, 64, "linear"),
                             (0, 8): Allocation(B, 64, "linear")})
    p = Prompt(debugger, FakeStop(info, make_memory()))
    assert p.run("info args") == [
        "  arg0  std::array<char*, 2ul> = <16 bytes: 00 00 00 00 00 7f 00 00 00 10 00 00 00 7f "
        "00 00>",
        "        +0                     = 0x7f0000000000  -> linear 0x7f0000000000 size 64, "
        "offset 0",
        "        +8                     = 0x7f0000001000  -> linear 0x7f0000001000 size 64, "
        "offset 0",
        "  arg1  int                    = 3",
        "  arg2  device::uchar8*        = 0x7f0000100048  -> pitched 0x7f0000100000 size 192 "
        "pitch 64 width 32 B height 3, offset 72 (row 1, byte 8)",
        "  arg3  float2                 = {1.5, -2}",
        "  arg4  float*                 = 0x0  -> null",
        "  arg5  double**               = 0x7f00deadbeef  -> not in any tracked allocation",
    ]
    assert p.run("p arg2[0]") == [
        "error: arg2 points to 'device::uchar8', a type cudump does not know; use x/FMT arg2, "
        "or dump arg2 as TYPE ..."]
    assert p.run("p arg4[0]") == ["error: arg4 is a null pointer"]
    assert p.run("p arg3") == ["arg3 = {1.5, -2}"]


def test_banner_without_a_signature(debugger: FakeDebugger) -> None:
    sig = parse_signature("scale_c")
    raw = [A.to_bytes(8, "little"), (7).to_bytes(4, "little")]
    info = replace(make_info(reason="interrupt", breakpoint=None), kernel="scale_c",
                   mangled="scale_c", signature=sig, args=decode_args(sig, raw),
                   pointers={(0, 0): Allocation(A, 64, "linear")})
    p = Prompt(debugger, FakeStop(info, make_memory()))
    assert banner(p.ctx.stopped)[0] == "Interrupt, launch 2 (occurrence 1) of scale_c"
    assert p.run("args") == [
        "  arg0  <8 bytes> = 0x7f0000000000  -> linear 0x7f0000000000 size 64, offset 0",
        "  arg1  <4 bytes> = 7",
    ]
    assert p.run("p arg0[0]") == [
        "error: arg0 has no type (the kernel has no signature); use x/FMT arg0 to see its memory"]
    assert p.run("x/2fw arg0+8") == ["0x7f0000000008:    1  1.5"]


def test_info_allocs(prompt: Prompt) -> None:
    assert prompt.run("info allocs") == [
        "base            size  kind     pitch  width  height  args",
        "0x7f0000000000    64  linear       -      -       -  arg0",
        "0x7f0000001000    64  linear       -      -       -  arg1",
        "0x7f0000100000   192  pitched     64     32       3  arg2",
        "3 allocations, 320 bytes",
    ]


def test_info_kernels(prompt: Prompt) -> None:
    assert prompt.run("info kernels") == [
        " pid  launches  kernel",
        f"4242         2  {KERNEL}",
        "4242         1  void fill<int>(int*, int, int)",
    ]
    prompt.debugger.seen = []
    assert prompt.run("info kernels") == ["no kernels seen yet"]


def test_info_launch(prompt: Prompt) -> None:
    assert prompt.run("info launch") == [
        f"kernel   {KERNEL}",
        "short    scale",
        "mangled  _Z5scalePKfPfP6uchar4if",
        "launch   2 (occurrence 1 of this kernel)",
        "phase    before (the kernel has not run yet)",
        "reason   breakpoint 1",
        "process  pid 4242 thread 4243",
        "device   0",
        "grid     (4,1,1) = 4 blocks",
        "block    (128,1,1) = 128 threads",
        "smem     0 bytes",
        "stream   0x0",
        "api      cuLaunchKernel",
    ]


def test_info_threads(prompt: Prompt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudump.prompt.commands import info

    for tid, name, state in [(4242, "app", "S"), (4243, "app", "R"), (4250, "worker (x)", "D"),
                             (4251, "cuda-EvtHandlr", "S")]:
        task = tmp_path / "proc" / "4242" / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "comm").write_text(name + "\n")
        (task / "stat").write_text(f"{tid} ({name}) {state} 1 2 3\n")
    monkeypatch.setattr(info, "PROC", tmp_path / "proc")
    assert prompt.run("info threads") == [
        "   Id  Thread    Name              State",
        "   1   LWP 4242  \"app\"             sleeping",
        "*  2   LWP 4243  \"app\"             holds launch 2 (scale)",
        "   3   LWP 4250  \"worker (x)\"      waiting (disk)",
        "   4   LWP 4251  \"cuda-EvtHandlr\"  sleeping",
    ]
    monkeypatch.setattr(info, "PROC", tmp_path / "none")
    assert prompt.run("info threads") == [
        f"error: cannot list the threads of process 4242 ({tmp_path}/none/4242/task cannot be "
        "read)"]


CONV = Where(scopes=("ResNet", "layer3", "layer3.0.conv1"), layer="layer3.0.conv1",
             pass_="forward", step=2, source="train.py:57")


def scoped_stop(where: Where = CONV) -> FakeStop:
    stop = make_stop()
    stop.info = replace(stop.info, where=where)
    return stop


def test_bt_shows_the_scopes_and_the_source_line_above_the_frames(prompt: Prompt) -> None:
    prompt.ctx.set_stop(scoped_stop())
    assert prompt.run("bt 1") == [
        "scope 0  layer3.0.conv1 (forward, step 2)",
        "scope 1  layer3",
        "scope 2  ResNet",
        "source   train.py:57",
        "#0  0x00007f1234500010 in cuLaunchKernel+0x10 (/usr/lib/libcuda.so.1)",
        "(more stack frames follow: 2)",
    ]
    prompt.ctx.set_stop(scoped_stop(Where(source="app.py:3")))
    assert prompt.run("bt")[0] == "source   app.py:3"


def test_the_scope_command_and_the_banner_name_where_the_launch_was_made(
        prompt: Prompt) -> None:
    assert prompt.run("scope") == [
        "launch 2 names no scope (the program opened none on its thread; a PyTorch program "
        "names its modules with --layers)"]
    stop = scoped_stop()
    prompt.ctx.set_stop(stop)
    lines = prompt.run("info scope")
    assert lines == [
        "launch 2 of scale in layer3.0.conv1 (forward, step 2) at train.py:57",
        "  scopes  ResNet > layer3 > layer3.0.conv1"]
    assert prompt.run("scope") == lines
    assert banner(stop)[:2] == [BANNER[0], "  in layer3.0.conv1 (forward, step 2) at "
                                           "train.py:57"]
    assert prompt.run("info launch")[-1] == (
        "where    in layer3.0.conv1 (forward, step 2) at train.py:57")


def test_bt(prompt: Prompt) -> None:
    assert prompt.run("bt") == [
        "#0  0x00007f1234500010 in cuLaunchKernel+0x10 (/usr/lib/libcuda.so.1)",
        "#1  0x0000000000401136 in run_scale(float*, int)+0x26 (/home/u/app)",
        "#2  0x00007f12345ff000 in ?? (/lib/libfoo.so+0x1f000)",
    ]
    assert prompt.run("where 1") == [
        "#0  0x00007f1234500010 in cuLaunchKernel+0x10 (/usr/lib/libcuda.so.1)",
        "(more stack frames follow: 2)",
    ]
    stop = make_stop(launch=3)
    stop.frames.clear()
    prompt.ctx.set_stop(stop)          # the stack is unwound once per stop
    assert prompt.run("backtrace") == ["no host frames (the stack could not be unwound)"]
    assert prompt.run("up") == ["error: no host frames (the stack could not be unwound)"]


def test_frame_up_and_down_walk_the_host_stack(prompt: Prompt) -> None:
    f0 = "#0  0x00007f1234500010 in cuLaunchKernel+0x10 (/usr/lib/libcuda.so.1)"
    f1 = "#1  0x0000000000401136 in run_scale(float*, int)+0x26 (/home/u/app)"
    f2 = "#2  0x00007f12345ff000 in ?? (/lib/libfoo.so+0x1f000)"
    assert prompt.run("frame") == [f0]
    assert prompt.run("up") == [f1]
    assert prompt.run("frame") == [f1]
    assert prompt.run("up") == [f2]
    assert prompt.run("up") == ["error: Initial frame selected; you cannot go up."]
    assert prompt.run("down 2") == [f0]
    assert prompt.run("down") == ["error: Bottom (innermost) frame selected; you cannot go "
                                  "down."]
    assert prompt.run("up 10") == [f2]              # as far as the stack goes, as gdb
    assert prompt.run("f 1") == [f1]
    assert prompt.run("frame 3") == ["error: No frame at level 3 (frames 0..2)."]
    assert prompt.run("frame") == [f1]
    assert prompt.ctx.stopped.reads == []  # type: ignore[attr-defined]
    prompt.ctx.set_stop(make_stop(launch=3))  # a new stop starts at frame 0
    assert prompt.run("frame") == [f0]


# ------------------------------------------------------------------ print


@pytest.mark.parametrize(("line", "expected"), [
    ("print arg0", "arg0 = (float const*) 0x7f0000000000"),
    ("p arg3", "arg3 = 16"),
    ("p arg4", "arg4 = 0.5"),
    ("p arg0[3]", "arg0[3] = 1.5"),
    ("p arg0[arg3 - 15]", "arg0[1] = 0.5"),
    ("p *arg0", "*arg0 = 0"),
    ("p arg0[1]@4", "arg0[1]@4 = {0.5, 1, 1.5, 2}"),
    ("p arg0@2", "arg0[0]@2 = {0, 0.5}"),
    ("p arg2[1]", "arg2[1] = {0, 1, 1, 255}"),
    ("p arg2@2", "arg2[0]@2 = {{0, 0, 0, 255}, {0, 1, 1, 255}}"),
    ("p arg2[16]", "arg2[16] = {1, 0, 10, 255}"),     # row 1: pointer arithmetic over pitch
    ("p arg3 * 2 + 1", "arg3 * 2 + 1 = 33"),
    ("p -arg3 + 1", "-arg3 + 1 = -15"),
    ("p arg4 * 3", "arg4 * 3 = 1.5"),
    ("p arg3[1]", "error: arg3 is not a pointer to data (its type is int)"),
    ("p arg9", "error: the kernel has no arg9 (arguments: arg0..arg4)"),
    ("p arg0[16]", "error: arg0[16] (0x7f0000000040..0x7f0000000044) is outside the allocation "
                   "of arg0 (0x7f0000000000, 64 bytes)"),
    ("p arg0[10]@7", "error: arg0[10]@7 (0x7f0000000028..0x7f0000000044) is outside the "
                     "allocation of arg0 (0x7f0000000000, 64 bytes)"),
    ("p arg0@0", "error: count '0' is 0; it must be >= 1"),
    ("p arg0[1.5]", "error: index '1.5' is 1.5, not a whole number"),
    ("p arg1 +", "error: expression 'arg1 +': expected a number, argN or '(', found end of "
                 "expression at column 7"),
    ("print", "error: print: the following arguments are required: EXPR"),
])
def test_print(prompt: Prompt, line: str, expected: str) -> None:
    assert prompt.run(line) == [expected]


@pytest.mark.parametrize(("line", "expected"), [
    ("p/x arg3", "arg3 = 0x10"),
    ("p/d arg3", "arg3 = 16"),
    ("p/o arg3", "arg3 = 020"),
    ("p/t arg3", "arg3 = 10000"),
    ("p/z arg3", "arg3 = 0x00000010"),
    ("p/c arg3 + 49", "arg3 + 49 = 65 'A'"),
    ("p/f arg3", "arg3 = 16"),
    ("p/x arg4", "arg4 = 0x3f000000"),           # a float's bits, as gdb
    ("p/d arg4", "arg4 = 1056964608"),
    ("p/f arg4", "arg4 = 0.5"),
    ("p/x arg0", "arg0 = 0x7f0000000000"),
    ("p/d arg0", "arg0 = 139637976727552"),
    ("p/x arg0[1]@3", "arg0[1]@3 = {0x3f000000, 0x3f800000, 0x3fc00000}"),
    ("p/x arg2[1]", "arg2[1] = {0x0, 0x1, 0x1, 0xff}"),
    ("p/d arg2[1]", "arg2[1] = {0, 1, 1, -1}"),     # the bits as signed, as gdb's /d
    ("p/u arg2[1]", "arg2[1] = {0, 1, 1, 255}"),
    ("p/x -1", "-1 = 0xffffffffffffffff"),
    ("p/d -arg3", "-arg3 = -16"),
    ("p/x arg3 * 2", "arg3 * 2 = 0x20"),
    ("p/x arg4 * 3", "arg4 * 3 = 0x3ff8000000000000"),   # a double's bits
    ("p/q arg3", "error: print: bad format '/q' (one of the letters x d u o t z c f: p/x "
                 "arg3)"),
    ("p/xx arg3", "error: print: bad format '/xx' (one of the letters x d u o t z c f: p/x "
                  "arg3)"),
])
def test_print_formats(prompt: Prompt, line: str, expected: str) -> None:
    assert prompt.run(line) == [expected]


@pytest.mark.parametrize(("line", "expected"), [
    ("p arg0 + 4", "arg0 + 4 = (float const*) 0x7f0000000010"),   # 4 floats on: 16 bytes
    ("p 4 + arg0", "4 + arg0 = (float const*) 0x7f0000000010"),
    ("p arg0 + arg3 - 1", "arg0 + arg3 - 1 = (float const*) 0x7f000000003c"),
    ("p arg2 + 1", "arg2 + 1 = (uchar4*) 0x7f0000100004"),
    ("p arg1 - arg0", "arg1 - arg0 = 1024"),                      # elements apart
    ("p arg0 + 4 == arg0 + 4", "arg0 + 4 == arg0 + 4 = 1"),
    ("p/x arg0 + 4", "arg0 + 4 = 0x7f0000000010"),
    ("p *(arg0 + 3)", "*(arg0 + 3) = 1.5"),
    ("p *(arg2 + 17)", "*(arg2 + 17) = {1, 1, 11, 255}"),
    ("p/x *(arg0 + 1)", "*(arg0 + 1) = 0x3f000000"),
    ("p *(arg0 + 16)", "error: *(arg0 + 16) (0x7f0000000040..0x7f0000000044) is outside the "
                       "allocation of arg0 (0x7f0000000000, 64 bytes)"),
    ("p *(arg3 + 1)", "error: print: '(arg3 + 1)' is not a pointer: * reads what a pointer "
                      "expression points to"),
    ("p arg0 + arg1", "error: expression 'arg0 + arg1': cannot add two pointers (arg0 and "
                      "arg1) at column 6"),
    ("p arg0 + 0.5", "error: expression 'arg0 + 0.5': pointer arithmetic on arg0 needs a "
                     "whole number, not 0.5 at column 6"),
])
def test_print_pointer_arithmetic_is_typed(prompt: Prompt, line: str, expected: str) -> None:
    assert prompt.run(line) == [expected]


def test_pointer_arithmetic_on_a_type_of_unknown_size(debugger: FakeDebugger) -> None:
    sig = parse_signature("void k(device::uchar8*, void*, double**)")
    raw = [C.to_bytes(8, "little"), A.to_bytes(8, "little"), B.to_bytes(8, "little")]
    info = replace(make_info(), kernel=sig.demangled, signature=sig,
                   args=decode_args(sig, raw), pointers={})
    p = Prompt(debugger, FakeStop(info, make_memory()))
    assert p.run("p arg0 + 1") == ["error: expression 'arg0 + 1': arg0 points to a type of "
                                   "unknown size: no pointer arithmetic at column 6"]
    assert p.run("p arg1 + 3") == ["arg1 + 3 = (void*) 0x7f0000000003"]   # as GNU C
    assert p.run("p arg2 + 1") == ["arg2 + 1 = (double**) 0x7f0000001008"]


def test_print_shows_at_most_200_elements(debugger: FakeDebugger) -> None:
    memory = make_memory()
    memory.add(Allocation(0x7F0000200000, 4 * 300, "linear"),
               np.arange(300, dtype=np.int32).tobytes())
    sig = parse_signature("void k(int*)")
    info = replace(make_info(), kernel=sig.demangled, signature=sig,
                   args=decode_args(sig, [(0x7F0000200000).to_bytes(8, "little")]),
                   pointers={})
    p = Prompt(debugger, FakeStop(info, memory))
    out = p.run("p arg0@300")
    assert out == ["arg0[0]@300 = {" + ", ".join(str(i) for i in range(200)) + "...}"]
    assert p.ctx.stopped.reads == [(0x7F0000200000, 800)]  # type: ignore[attr-defined]


def test_display_undisplay_and_info_display(prompt: Prompt) -> None:
    assert prompt.run("info display") == ["There are no auto-display expressions now."]
    assert prompt.run("display arg3") == ["1: arg3 = 16"]
    assert prompt.run("display/x arg0[1]@2") == ["2: /x arg0[1]@2 = {0x3f000000, 0x3f800000}"]
    assert prompt.run("display arg0 + 1") == ["3: arg0 + 1 = (float const*) 0x7f0000000004"]
    assert prompt.run("display arg9") == ["error: the kernel has no arg9 (arguments: "
                                          "arg0..arg4)"]         # not kept
    assert prompt.run("display") == ["1: arg3 = 16", "2: /x arg0[1]@2 = {0x3f000000, "
                                      "0x3f800000}", "3: arg0 + 1 = (float const*) "
                                      "0x7f0000000004"]
    assert prompt.run("info display") == [
        "Auto-display expressions now in effect:",
        "Num Enb Expression",
        "1:   y  arg3",
        "2:   y  /x arg0[1]@2",
        "3:   y  arg0 + 1",
    ]
    assert prompt.run("undisplay 2") == []
    assert prompt.run("undisplay 2") == ["error: undisplay: no display number 2 (see 'info "
                                         "display')"]
    assert prompt.run("display/q arg3") == ["error: print: bad format '/q' (one of the "
                                            "letters x d u o t z c f: p/x arg3)"]
    assert prompt.run("display arg1[0]") == ["4: arg1[0] = 0"]
    # after a step: the displays again, read after the kernel
    out = prompt.run("step")
    assert out[-3:] == ["1: arg3 = 16", "3: arg0 + 1 = (float const*) 0x7f0000000004",
                        "4: arg1[0] = 0"]
    prompt.run("display arg1[1]")
    assert prompt.run("display")[-1] == "5: arg1[1] = 0.25"
    questions: list[str] = []
    prompt.ctx.confirm = lambda q: bool(questions.append(q))
    assert prompt.run("undisplay") == ["Not confirmed."]
    prompt.ctx.confirm = lambda q: True
    assert prompt.run("undisplay") == []
    assert prompt.run("info display") == ["There are no auto-display expressions now."]
    assert questions == ["Delete all auto-display expressions? (y or n) "]


def test_a_display_that_cannot_be_shown_at_a_stop_says_why(prompt: Prompt) -> None:
    prompt.run("display arg4")
    sig = parse_signature("void fill(int*, int)")
    info = replace(make_info(), kernel=sig.demangled, signature=sig, pointers={},
                   args=decode_args(sig, [A.to_bytes(8, "little"), (3).to_bytes(4, "little")]))
    prompt.ctx.set_stop(FakeStop(info, make_memory()))
    assert prompt.run("display") == ["1: arg4 = <error: the kernel has no arg4 (arguments: "
                                     "arg0..arg1)>"]


def test_set_var_writes_device_memory(prompt: Prompt) -> None:
    assert prompt.run("set var arg1[2] = 2.5") == []
    assert prompt.run("p arg1[1]@3") == ["arg1[1]@3 = {0, 2.5, 0}"]
    assert prompt.run("set var *arg1 = arg3 * 2 + 0.25") == []
    assert prompt.run("set arg1[15] = -1") == []                  # `var` may be left out
    assert prompt.run("set variable *(arg1 + 3) = 7") == []
    assert prompt.run("p arg1[0]@4") == ["arg1[0]@4 = {32.25, 0, 2.5, 7}"]
    assert prompt.run("p arg1[15]") == ["arg1[15] = -1"]
    assert prompt.run("set var arg2[1] = {9, 8, arg3, 255}") == []
    assert prompt.run("p arg2[0]@2") == ["arg2[0]@2 = {{0, 0, 0, 255}, {9, 8, 16, 255}}"]
    assert prompt.ctx.stopped.writes == [  # type: ignore[attr-defined]
        (B + 8, struct.pack("<f", 2.5)), (B, struct.pack("<f", 32.25)),
        (B + 60, struct.pack("<f", -1)), (B + 12, struct.pack("<f", 7)),
        (C + 4, bytes([9, 8, 16, 255]))]
    # a condition that compares is a value, not an assignment
    assert prompt.run("set var arg1[4] = arg3 == 16") == []
    assert prompt.run("p arg1[4]") == ["arg1[4] = 1"]


@pytest.mark.parametrize(("line", "expected"), [
    ("set var arg3 = 4", "error: set: arg3 is passed by value: the launch's parameters cannot "
                         "be changed, only the device memory they point to (set var arg3[I] = "
                         "VALUE)"),
    ("set var arg1[16] = 1", "error: set: arg1[16] (0x7f0000001040..0x7f0000001044) is outside "
                             "the allocation of arg1 (0x7f0000001000, 64 bytes)"),
    ("set var arg2[0] = 300", "error: set: the element takes 4 values in braces ({0, 0, 0, "
                              "0}), not 1"),
    ("set var arg2[0] = {300, 0, 0, 0}", "error: set: 300 does not fit in arg2[0] (uint8: "
                                         "0..255)"),
    ("set var arg1[0] = {1, 2}", "error: set: the element takes one value, not 2"),
    ("set var arg1[0]", "error: set: write set var LVALUE = VALUE (set var arg0[3] = 1.5)"),
    ("set var arg1[0] == 2", "error: set: write set var LVALUE = VALUE (set var arg0[3] = 1.5)"),
    ("set var arg3[0] = 1", "error: arg3 is not a pointer to data (its type is int)"),
    ("set var 5 = 1", "error: set: cannot write to '5' (write argN[I], *argN or *(argN + I))"),
    ("set var *(arg3 + 1) = 1", "error: set: cannot write to '*(arg3 + 1)' (write argN[I], "
                                "*argN or *(argN + I))"),
])
def test_set_var_errors(prompt: Prompt, line: str, expected: str) -> None:
    assert prompt.run(line) == [expected]
    assert prompt.ctx.stopped.writes == []  # type: ignore[attr-defined]


def test_set_var_converts_as_c_does(debugger: FakeDebugger) -> None:
    memory = make_memory()
    memory.add(Allocation(0x7F0000200000, 16, "linear"))
    sig = parse_signature("void k(int*, __nv_bfloat16*, bool*)")
    address = (0x7F0000200000).to_bytes(8, "little")
    info = replace(make_info(), kernel=sig.demangled, signature=sig, pointers={},
                   args=decode_args(sig, [address, address, address]))
    p = Prompt(debugger, FakeStop(info, memory))
    assert p.run("set var arg0[0] = -2.75") == []          # the fraction dropped
    assert p.run("p arg0[0]") == ["arg0[0] = -2"]
    assert p.run("set var arg0[1] = 4294967296") == [
        "error: set: 4294967296 does not fit in arg0[1] (int32: -2147483648..2147483647)"]
    assert p.run("set var arg1[4] = 1.5") == []
    assert p.run("p arg1[4]") == ["arg1[4] = 1.5"]
    assert p.run("x/2xb arg0+8") == ["0x7f0000200008:  0xc0  0x3f"]   # bfloat16 bits 0x3fc0


def test_set_var_refuses_overflow_and_takes_nan_and_inf(debugger: FakeDebugger) -> None:
    """A finite value too large for a floating element is refused (C would store inf);
    nan, inf and -inf are written as they are, into floating elements only."""
    memory = make_memory()
    memory.add(Allocation(0x7F0000200000, 16, "linear"))
    sig = parse_signature("void k(float*, __nv_bfloat16*, int*, double*)")
    address = (0x7F0000200000).to_bytes(8, "little")
    info = replace(make_info(), kernel=sig.demangled, signature=sig, pointers={},
                   args=decode_args(sig, [address] * 4))
    p = Prompt(debugger, FakeStop(info, memory))
    assert p.run("set var arg0[0] = 1e40") == [
        "error: set: 1e+40 does not fit in arg0[0] (float32: at most 3.40282e+38 in magnitude)"]
    assert p.run("set var arg0[0] = -1e40") == [
        "error: set: -1e+40 does not fit in arg0[0] (float32: at most 3.40282e+38 in "
        "magnitude)"]
    assert p.run("set var arg1[0] = 1e39") == [
        "error: set: 1e+39 does not fit in arg1[0] (bfloat16: at most 3.39e+38 in magnitude)"]
    assert p.stopped_writes() == []
    assert p.run("set var arg3[0] = 1e40") == []             # a double holds it
    assert p.run("set var arg0[0] = nan") == []
    assert p.run("set var arg0[1] = inf") == []
    assert p.run("set var arg0[2] = -inf") == []
    assert p.run("set var arg0[3] = 3e38") == []
    assert p.run("p arg0[0]@4") == ["arg0[0]@4 = {nan, inf, -inf, 3e+38}"]
    assert p.run("set var arg1[0] = NaN") == []
    assert p.run("x/2xb arg0") == ["0x7f0000200000:  0xc0  0x7f"]  # bfloat16 quiet NaN
    assert p.run("set var arg2[0] = nan") == [
        "error: set: nan is not a value of int32: nan and inf go only into floating elements "
        "(float, double, half)"]
    assert p.run("set var arg2[0] = -inf") == [
        "error: set: -inf is not a value of int32: nan and inf go only into floating "
        "elements (float, double, half)"]


# ------------------------------------------------------------------ x


def test_x_formats_and_units(prompt: Prompt) -> None:
    assert prompt.run("x arg0+4") == ["0x7f0000000004:  0x3f000000"]   # x/1xw by default
    assert prompt.run("x/4xw arg0") == [
        "0x7f0000000000:  0x00000000  0x3f000000  0x3f800000  0x3fc00000"]
    assert prompt.run("x") == ["0x7f0000000010:  0x40000000"]   # goes on after the last
    assert prompt.run("x/6xw arg0") == [
        "0x7f0000000000:  0x00000000  0x3f000000  0x3f800000  0x3fc00000",
        "0x7f0000000010:  0x40000000  0x40200000",
    ]
    assert prompt.run("x/10xb arg2") == [
        "0x7f0000100000:  0x00  0x00  0x00  0xff  0x00  0x01  0x01  0xff",
        "0x7f0000100008:  0x00  0x02",
    ]
    assert prompt.run("x/3dw arg0+4") == ["0x7f0000000004:  1056964608  1065353216  1069547520"]
    assert prompt.run("x/4fw arg0") == ["0x7f0000000000:    0  0.5    1  1.5"]
    assert prompt.run("x/2fg arg0") == [
        "0x7f0000000000:     3.0517578125e-05  0.12500002956949174"]
    assert prompt.run("x/2xg arg0") == ["0x7f0000000000:  0x3f00000000000000  0x3fc000003f800000"]
    assert prompt.run("x/3uh arg0+4") == ["0x7f0000000004:      0  16128      0"]
    assert prompt.run("x/2dh arg2+2") == ["0x7f0000100002:  -256   256"]
    assert prompt.run("x/4c arg2") == [
        "0x7f0000100000:  0 '\\000'  0 '\\000'  0 '\\000'  -1 '\\377'"]
    assert prompt.run("x/2c arg2+64+4*3+2") == ["0x7f000010004e:  13 '\\r'  -1 '\\377'"]
    assert prompt.run("x/2c arg2+64*2+4*6+2") == ["0x7f000010009a:  26 '\\032'  -1 '\\377'"]
    assert prompt.run(f"x/w {A + 8}") == ["0x7f0000000008:  1065353216 '\\000'"]
    assert prompt.run(f"x/xw {A + 8}") == ["0x7f0000000008:  0x3f800000"]
    assert prompt.run("x/2 0x7f0000000008") == ["0x7f0000000008:  0x3f800000  0x3fc00000"]


def test_x_remembers_format_and_unit(prompt: Prompt) -> None:
    prompt.run("x/2xb arg0")
    assert prompt.run("x/3 arg2") == ["0x7f0000100000:  0x00  0x00  0x00"]
    assert prompt.run("x/d arg2+3") == ["0x7f0000100003:  -1"]


@pytest.mark.parametrize(("line", "expected"), [
    ("x/zz arg0", "error: x: unknown format or unit 'z' in '/zz' (formats x d u f c s, units b "
                  "h w g)"),
    ("x/fb arg0", "error: x: floats need unit h, w or g"),
    ("x/4q arg0", "error: x: unknown format or unit 'q' in '/4q' (formats x d u f c s, units b "
                  "h w g)"),
    ("x/xx arg0", "error: x: two formats in '/xx'"),
    ("x/4xw 0x10", "error: x: address 0x10 is not in any allocation ('info allocs' lists them)"),
    ("x/8xb 4096", "error: x: address 0x1000 is not in any allocation ('info allocs' lists "
                   "them)"),
    ("x/s 4096", "error: x: address 0x1000 is not in any allocation ('info allocs' lists them)"),
    ("x/4xw", "error: x: give an address: argN, argN+OFFSET or a number"),
    ("x/4xw arg7", "error: address 'arg7': arg7 has no numeric value in this launch at column 1"),
    ("x/300000xg arg0", "error: x: 2400000 bytes asked for; at most 1048576 at a time (dump "
                        "writes whole buffers to files)"),
    ("x/5217s arg0", "error: x: 5217 strings asked for; at most 5216 at a time (each reads up "
                     "to 201 bytes, and x reads at most 1048576)"),
    ("x/99999999999s arg0", "error: x: 99999999999 strings asked for; at most 5216 at a time "
                            "(each reads up to 201 bytes, and x reads at most 1048576)"),
    ("info/x args", "error: info takes no /FMT suffix"),
    ("bt/x", "error: bt takes no /FMT suffix (x/FMT does)"),
])
def test_x_errors(prompt: Prompt, line: str, expected: str) -> None:
    assert prompt.run(line) == [expected]


def test_x_past_the_end_of_an_allocation_warns_and_shows_what_can_be_read(
        prompt: Prompt) -> None:
    # arg0's allocation is 64 bytes (16 floats): the bytes past it are not asked for.
    stop = prompt.ctx.stopped
    out = prompt.run("x/20fw arg0+48")
    assert out == [
        "warning: x: the 80 bytes from 0x7f0000000030 run 64 bytes past the end of the "
        "allocation at 0x7f0000000000 (64 bytes)",
        "x: 0x7f0000000040 is not in any allocation; showing the 4 units before it",
        "0x7f0000000030:    6  6.5    7  7.5",
    ]
    assert stop.reads[-1] == (A + 48, 16)  # type: ignore[attr-defined]
    reads = len(stop.reads)  # type: ignore[attr-defined]
    assert prompt.run("x/1xw") == ["error: x: address 0x7f0000000040 is not in any allocation "
                                   "('info allocs' lists them)"]
    assert prompt.run("x/1xw arg0+62") == ["warning: x: the 4 bytes from 0x7f000000003e run 2 "
                                           "bytes past the end of the allocation at "
                                           "0x7f0000000000 (64 bytes)",
                                           "error: x: 0x7f0000000040 is not in any allocation, "
                                           "so not even one unit of 4 bytes can be shown"]
    assert len(stop.reads) == reads  # type: ignore[attr-defined]


def test_x_past_the_end_is_never_read_even_where_a_driver_would(prompt: Prompt) -> None:
    # A driver may read past the end where the next bytes are mapped (the same page), or,
    # as the stand-in does, fault: either way they are not the program's, and not read.
    stop = prompt.ctx.stopped
    stop.allocation = lambda address: (  # type: ignore[method-assign]
        Allocation(A, 32, "linear") if A <= address < A + 32 else None)
    assert prompt.run("x/12fw arg0") == [
        "warning: x: the 48 bytes from 0x7f0000000000 run 16 bytes past the end of the "
        "allocation at 0x7f0000000000 (32 bytes)",
        "x: 0x7f0000000020 is not in any allocation; showing the 8 units before it",
        "0x7f0000000000:    0  0.5    1  1.5",
        "0x7f0000000010:    2  2.5    3  3.5",
    ]
    assert stop.reads == [(A, 32)]  # type: ignore[attr-defined]


def test_x_reads_on_into_an_allocation_that_follows_without_a_gap(prompt: Prompt) -> None:
    stop = prompt.ctx.stopped
    first, second = Allocation(A, 32, "linear"), Allocation(A + 32, 32, "linear")
    stop.allocation = lambda address: next(  # type: ignore[method-assign]
        (a for a in (first, second) if a.base <= address < a.end), None)
    assert prompt.run("x/12fw arg0") == [
        "warning: x: the 48 bytes from 0x7f0000000000 run 16 bytes past the end of the "
        "allocation at 0x7f0000000000 (32 bytes)",
        "0x7f0000000000:    0  0.5    1  1.5",
        "0x7f0000000010:    2  2.5    3  3.5",
        "0x7f0000000020:    4  4.5    5  5.5",
    ]


def test_reads_outside_allocations_are_refused_by_every_command(prompt: Prompt) -> None:
    stop = prompt.ctx.stopped
    stop.allocation = lambda address: None  # type: ignore[method-assign]
    before = len(stop.reads)  # type: ignore[attr-defined]
    for line in ("x/4xb arg0", "x/s arg0", "p arg0[0]@2", "dump arg2"):
        (out,) = prompt.run(line)
        assert out.startswith("error: ") and "not in any allocation" in out, (line, out)
    assert len(stop.reads) == before  # type: ignore[attr-defined]


def test_x_s_shows_c_strings(debugger: FakeDebugger) -> None:
    memory = make_memory()
    text = b"hello\n\"q'\x00world\x00" + b"z" * 16
    memory.add(Allocation(0x7F0000300000, 32, "linear"), text)
    memory.add(Allocation(0x7F0000400000, 300, "linear"), b"a" * 299 + b"\x00")
    sig = parse_signature("void k(char*, char const*)")
    info = replace(make_info(), kernel=sig.demangled, signature=sig, pointers={},
                   args=decode_args(sig, [(0x7F0000300000).to_bytes(8, "little"),
                                          (0x7F0000400000).to_bytes(8, "little")]))
    p = Prompt(debugger, FakeStop(info, memory))
    assert p.run("x/s arg0") == ['0x7f0000300000:  "hello\\n\\"q\'"']
    assert p.run("x") == ['0x7f000030000a:  "world"']                  # the next string
    assert p.run("x") == ['0x7f0000300010:  "' + "z" * 16 + '" (no NUL before the end of '
                          'the allocation at 0x7f0000300000, 32 bytes)']
    assert p.run("x/2s arg0") == ['0x7f0000300000:  "hello\\n\\"q\'"',
                                  '0x7f000030000a:  "world"']
    assert p.run("x/s arg1") == ['0x7f0000400000:  "' + "a" * 200 + '"...']
    assert p.run("x/2xb arg0") == ["0x7f0000300000:  0x68  0x65"]
    assert p.run("x/sw arg0") == ["error: x: strings are of bytes (unit b)"]


def test_reads_never_exceed_max_read(prompt: Prompt) -> None:
    stop = prompt.ctx.stopped
    stop.max_read_bytes = 12  # type: ignore[attr-defined]
    assert prompt.run("x/4xw arg0") == [
        "0x7f0000000000:  0x00000000  0x3f000000  0x3f800000  0x3fc00000"]
    assert stop.reads == [(A, 12), (A + 12, 4)]  # type: ignore[attr-defined]


# ------------------------------------------------------------------ dump


def _pixels() -> np.ndarray:
    want = np.zeros((HEIGHT, 8, 4), dtype=np.uint8)
    for row in range(HEIGHT):
        for col in range(8):
            want[row, col] = [row, col, row * 10 + col, 255]
    return want


def test_dump_default_names_npy_png_and_manifest(prompt: Prompt) -> None:
    run = prompt.debugger.run_dir
    stem = "dump-000002-4242-scale-arg2-before"
    assert prompt.run("dump arg2") == [
        f"arg2: uint8 [3, 8, 4], 96 bytes from 0x7f0000100000 -> {run}/{stem}.npy and "
        f"{run}/{stem}.png"]
    np.testing.assert_array_equal(np.load(run / f"{stem}.npy"), _pixels())
    np.testing.assert_array_equal(read_png(run / f"{stem}.png"), _pixels())
    (record,) = prompt.debugger.records
    assert record.to_json() == (
        '{"kernel":"void scale(float const*, float*, uchar4*, int, float)",'
        '"mangled":"_Z5scalePKfPfP6uchar4if","launch":2,"occurrence":1,"pid":4242,'
        '"grid":[4,1,1],"block":[128,1,1],"stream":"0x0","arg":2,"type":"uchar4*",'
        '"phase":"before","address":"0x7f0000100000","dtype":"uint8","shape":[3,8,4],'
        f'"file":"{stem}.npy","png":"{stem}.png","status":"ok","reason":null,"range":null,'
        '"device":0,"source":"dump"}')
    # A second dump of the same argument never overwrites the first.
    out = prompt.run("dump arg0")
    assert out == [f"arg0: float32 [16], 64 bytes from 0x7f0000000000 -> "
                   f"{run}/dump-000002-4242-scale-arg0-before.npy"]
    assert prompt.run("dump arg2")[0].endswith(f"{stem}-2.npy and {run}/{stem}-2.png")
    np.testing.assert_array_equal(np.load(run / "dump-000002-4242-scale-arg0-before.npy"),
                                  np.arange(16, dtype=np.float32) * 0.5)
    assert [r.file for r in prompt.debugger.records] == [
        f"{stem}.npy", "dump-000002-4242-scale-arg0-before.npy", f"{stem}-2.npy"]


def test_dump_default_names_never_write_through_a_planted_symlink(prompt: Prompt,
                                                                   tmp_path: Path) -> None:
    """Dangling symlinks under the names dump would choose: the names are taken (the next
    free ones are used) and nothing appears where the links point."""
    run = prompt.debugger.run_dir
    run.mkdir(parents=True, exist_ok=True)
    stem = "dump-000002-4242-scale-arg2-before"
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / f"{stem}.npy").symlink_to(outside / "a.npy")
    (run / f"{stem}.png").symlink_to(outside / "a.png")
    assert prompt.run("dump arg2")[0].endswith(f"{stem}-2.npy and {run}/{stem}-2.png")
    assert list(outside.iterdir()) == []
    assert not (run / f"{stem}-2.npy").is_symlink()
    np.testing.assert_array_equal(np.load(run / f"{stem}-2.npy"), _pixels())


def test_dump_as_type_geometry_and_pitch(prompt: Prompt) -> None:
    run = prompt.debugger.run_dir
    out = prompt.run("dump arg2 as uint8 32x2 pitch 64")
    assert out == [f"arg2: uint8 [2, 32], 64 bytes from 0x7f0000100000 -> "
                   f"{run}/dump-000002-4242-scale-arg2-before.npy and "
                   f"{run}/dump-000002-4242-scale-arg2-before.png"]
    got = np.load(run / "dump-000002-4242-scale-arg2-before.npy")
    np.testing.assert_array_equal(got, _pixels()[:2].reshape(2, 32))
    # Whole rows, padding included, from argument values (arg3 = 16).
    out = prompt.run("dump arg2 as uchar4 arg3x3 pitch arg3*4")
    assert out == [f"arg2: uint8 [3, 16, 4], 192 bytes from 0x7f0000100000 -> "
                   f"{run}/dump-000002-4242-scale-arg2-before-2.npy and "
                   f"{run}/dump-000002-4242-scale-arg2-before-2.png"]
    padded = np.frombuffer(bytes(prompt.ctx.stopped.memory.data[C]), dtype=np.uint8)
    np.testing.assert_array_equal(np.load(run / "dump-000002-4242-scale-arg2-before-2.npy"),
                                  padded.reshape(3, 16, 4))
    out = prompt.run("dump arg1 as float 2x4")
    assert out[0].startswith("arg1: float32 [4, 2], 32 bytes from 0x7f0000001000 -> ")
    out = prompt.run("dump arg0 as unsigned short 4")
    assert out[0].startswith("arg0: uint16 [4], 8 bytes from 0x7f0000000000 -> ")
    record = prompt.debugger.records[-1]
    assert (record.dtype, record.shape, record.type) == ("uint16", [4], "float const*")


def test_dump_to_a_named_file(prompt: Prompt, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "frame.npy"
    target.parent.mkdir()
    assert prompt.run(f"dump arg2 {target}") == [
        f"arg2: uint8 [3, 8, 4], 96 bytes from 0x7f0000100000 -> {target}"]
    np.testing.assert_array_equal(np.load(target), _pixels())
    # Outside the run: written where asked, named under `path` (the manifest's `file`
    # only ever names files inside the run).
    assert prompt.debugger.records[-1].file is None
    assert prompt.debugger.records[-1].extra["path"] == str(target.resolve())
    assert prompt.debugger.records[-1].png is None
    prompt.run("dump arg2 sub/right.npy")
    assert prompt.debugger.records[-1].file == "sub/right.npy"
    assert (prompt.debugger.run_dir / "sub" / "right.npy").is_file()
    inside = prompt.debugger.run_dir / "left.png"
    inside.parent.mkdir(parents=True, exist_ok=True)
    prompt.run(f"dump arg0 {inside}")
    record = prompt.debugger.records[-1]
    assert (record.file, record.png, record.range) == (None, "left.png", [0.0, 7.5])


@pytest.mark.parametrize("name", ["taken/frame.npy", "taken/deeper/frame.png"])
def test_dump_under_a_file_is_an_error_not_a_crash(prompt: Prompt, tmp_path: Path,
                                                   name: str) -> None:
    (tmp_path / "taken").write_text("a file where a folder would go\n")
    target = tmp_path / name
    assert prompt.run(f"dump arg2 {target}") == [
        f"error: dump: cannot write {target}: {tmp_path / 'taken'} is a file, not a folder"]
    assert prompt.debugger.records == []
    assert prompt.run("dump arg2 ok.npy")[0].endswith("ok.npy")    # the next dump works


@pytest.mark.parametrize(("line", "expected"), [
    ("dump arg3", "error: dump: arg3: pointer 0x10 is not in any tracked allocation"),
    ("dump arg4", "error: dump: arg4: argument 4 has no pointer value"),
    ("dump foo", "error: dump: 'foo' is not an argument (write argN, e.g. arg0)"),
    ("dump arg0 out.txt", "error: dump: out.txt: the file name must end in .npy or .png"),
    ("dump arg0 as", "error: dump: expected 'as TYPE [WxH|N] [pitch P]' after the file name"),
    ("dump arg0 as quux 4", "error: dump: unknown type 'quux' (a numpy name such as uint8 or "
                            "float32, or a CUDA type such as uchar4 or unsigned short)"),
    ("dump arg0 as float 4x5", "error: dump: arg0: 5 rows of 16 bytes at pitch 16 need 80 "
                               "bytes from 0x7f0000000000, but the allocation has 64 left"),
    ("dump arg0 as float 4 pitch 16", "error: dump: a count of elements takes no pitch; "
                                      "write WxH pitch P"),
    ("dump arg0 as float 4xarg3-1", "error: dump: '4xarg3-1' is not WxH or a count N (numbers "
                                    "or argN, e.g. 256x48 or arg5xarg6)"),
    ("dump arg0 as float 2x2 4", "error: dump: unexpected '4'"),
    ("dump", "error: dump: the following arguments are required: argN, ..."),
])
def test_dump_errors(prompt: Prompt, line: str, expected: str) -> None:
    assert prompt.run(line) == [expected]
    assert prompt.debugger.records == []


# ------------------------------------------------------------------ step and diff


def test_step_lists_changed_buffers_and_diff_compares(prompt: Prompt) -> None:
    assert prompt.run("diff arg1") == [
        "error: diff: nothing to compare yet: no copy of arg1 from before launch 2 ran; 'step' "
        "at a breakpoint keeps the buffers before the kernel and stops after it"]
    assert prompt.run("step") == [
        f"Step, after launch 2 (occurrence 1) of {KERNEL}",
        "  pid 4242 thread 4243 device 0 grid (4,1,1) block (128,1,1) smem 0 stream 0x0",
        "arg1 (float*): 15 of 16 elements changed",
        "arg2 (uchar4*): 8 of 24 elements changed",
        "unchanged: arg0",
    ]
    assert prompt.outcomes[-1] is None          # still stopped: after the kernel
    assert prompt.debugger.resumes == [(2, "step")]
    assert prompt.ctx.stopped.info.phase == "after"
    assert prompt.run("p arg1@4") == ["arg1[0]@4 = {0, 0.25, 0.5, 0.75}"]
    assert prompt.run("diff arg1") == [
        "A: arg1 at 0x7f0000001000 before launch 2",
        "B: arg1 at 0x7f0000001000 after launch 2",
        "data: float32 [16], 16 elements",
        "differing elements: 15 of 16 (93.8%)  [atol 0, rtol 0]",
        "largest difference: 3.75 at (15) (A=0, B=3.75)",
        "mean absolute difference: 1.875",
        "RMSE: 2.201",
        "PSNR: -",
        "different",
    ]
    assert prompt.run("diff arg2") == [
        "A: arg2 at 0x7f0000100000 before launch 2",
        "B: arg2 at 0x7f0000100000 after launch 2",
        "data: uint8 [3, 8, 4], 96 elements",
        "differing elements: 8 of 96 (8.33%)  [atol 0, rtol 0]",
        "  channel 0 (r): 8 (33.3%)",
        "  channel 1 (g): 0 (0%)",
        "  channel 2 (b): 0 (0%)",
        "  channel 3 (a): 0 (0%)",
        "differing pixels: 8 of 24 (33.3%)",
        "largest difference: 253 at (1,0,0) (A=1, B=254)",
        "mean absolute difference: 21.08",
        "RMSE: 73.03",
        "PSNR: 10.86 dB (peak 255)",
        "different",
    ]
    assert prompt.run("diff arg1 --atol 4")[-1] == "equal within tolerance"
    assert prompt.run("diff arg0")[-1] == "equal within tolerance"
    assert prompt.run("diff arg3") == [
        "error: diff: arg3 does not point into a tracked allocation; nothing was kept"]
    assert prompt.run("step") == [
        "error: step: launch 2 has already run (this is the stop after it); 'continue' goes on "
        "to the next stop"]
    assert prompt.run("finish") == [
        "error: finish: launch 2 has already run (this is the stop after it); 'continue' goes "
        "on to the next stop"]


def test_step_reads_in_chunks_and_respects_the_keep_limit(
        prompt: Prompt, monkeypatch: pytest.MonkeyPatch) -> None:
    import cudump.prompt.commands.step as step_module

    stop = prompt.ctx.stopped
    stop.max_read_bytes = 40  # type: ignore[attr-defined]
    monkeypatch.setattr(step_module, "KEEP_LIMIT", 150)
    assert prompt.run("finish") == [
        f"Step, after launch 2 (occurrence 1) of {KERNEL}",
        "  pid 4242 thread 4243 device 0 grid (4,1,1) block (128,1,1) smem 0 stream 0x0",
        "arg1 (float*): 15 of 16 elements changed",
        "unchanged: arg0",
        "arg2 (uchar4*): not compared: 96 bytes would pass the limit of 150 bytes kept across a "
        "step",
    ]
    assert all(n <= 40 for _, n in stop.reads)  # type: ignore[attr-defined]
    assert prompt.run("diff arg2") == [
        "error: diff: arg2 was not kept: 96 bytes would pass the limit of 150 bytes kept across "
        "a step"]


def test_step_whose_launch_does_not_come_back(prompt: Prompt) -> None:
    prompt.debugger.step_returns_none = True
    assert prompt.run("s") == [
        "launch 2 gave no stop after it (the launch failed or the process ended); continuing"]
    assert prompt.outcomes[-1] is Outcome.RESUMED
    assert prompt.ctx.stop is None
    assert prompt.run("args") == ["error: info args: the program is not stopped at a launch"]


def test_step_pitched_rows_wider_than_max_read(prompt: Prompt) -> None:
    stop = prompt.ctx.stopped
    stop.max_read_bytes = 24  # type: ignore[attr-defined]
    out = prompt.run("step")
    assert "arg2 (uchar4*): 8 of 24 elements changed" in out
    assert (C + WIDTH_BYTES - 8, 8) in stop.reads  # type: ignore[attr-defined]


# ------------------------------------------------------------------ breakpoints


def test_breakpoint_commands(prompt: Prompt) -> None:
    d = prompt.debugger
    assert prompt.run("info breakpoints") == ["No breakpoints."]
    assert prompt.run("break scale") == ["Breakpoint 1: scale"]
    assert prompt.run("tbreak fill if arg2 - 3") == ["Temporary breakpoint 2: fill if arg2 - 3"]
    assert prompt.run("b re:^void nothing") == [
        "Breakpoint 3: re:^void nothing",
        "  (no kernel seen so far matches; it stops when one does)"]
    assert d.changes == 3
    assert prompt.run("info breakpoints") == [
        "Num  Type    Enb  Hits  Ignore  What",
        "1    break   y       0       0  scale",
        "2    tbreak  y       0       0  fill if arg2 - 3",
        "3    break   y       0       0  re:^void nothing",
    ]
    assert prompt.run("ignore 1 3") == ["Will ignore next 3 crossings of breakpoint 1."]
    assert prompt.run("ignore 1 1") == ["Will ignore next crossing of breakpoint 1."]
    assert prompt.run("ignore 1 0") == ["Will stop next time breakpoint 1 is reached."]
    assert d.changes == 6
    assert prompt.run("disable") == ["Disabled breakpoints 1, 2, 3."]
    assert prompt.run("enable 2") == ["Enabled breakpoint 2."]
    assert [bp.enabled for bp in d.breakpoints] == [False, True, False]
    assert prompt.run("enable 1 3") == ["Enabled breakpoints 1, 3."]
    assert prompt.run("disable 3") == ["Disabled breakpoint 3."]
    assert d.changes == 10
    assert prompt.run("delete 1 9") == [
        "error: no breakpoint number 9 (see 'info breakpoints')"]
    assert len(d.breakpoints) == 3 and d.changes == 10
    assert prompt.run("delete 1 2 1") == ["Deleted breakpoints 1, 2."]
    assert prompt.run("info breakpoints") == [
        "Num  Type   Enb  Hits  Ignore  What",
        "3    break  n       0       0  re:^void nothing",
    ]
    assert prompt.run("d") == ["Deleted breakpoint 3."]
    assert prompt.run("delete") == ["No breakpoints to delete."]
    assert d.changes == 13


@pytest.mark.parametrize(("line", "expected"), [
    ("break", "error: break: the following arguments are required: PATTERN [if EXPR]"),
    ("break k if arg1 >", "error: bad condition 'arg1 >': expected a number, argN or '(', found "
                          "end of expression at column 7"),
    ("break k if arg1 =< 2", "error: bad condition 'arg1 =< 2': unexpected character '=' at "
                             "column 6"),
    ("break re:(a+)+", "error: regular expression '(a+)+' repeats a group that itself repeats "
                       "or has alternatives (like '(a+)+' or '(a|aa)+'), which can take "
                       "exponential time; drop the inner or the outer repetition, or use a glob"),
    ("break re:.*.*.*.*.*.*.*.*.*.*.*.*Q",
     "error: regular expression '.*.*.*.*.*.*.*.*.*.*.*.*Q' has too many repetitions that can "
     "match the same text (like '.*.*.*'), which can take minutes per kernel name; use at most "
     "two unbounded repetitions ('*', '+', '{n,}') and few optional parts, or a glob"),
    ("break re:x{4294967296}", "error: invalid regular expression 'x{4294967296}': the "
                               "repetition number is too large"),
    pytest.param("break re:" + "(" * 1500 + "k" + ")" * 1500,
                 "error: regular expression '" + "(" * 60 + "'... (3001 characters) is nested "
                 "too deeply", id="break-nested-too-deeply"),
    ("ignore 1", "error: ignore: the following arguments are required: COUNT"),
    ("ignore 7 2", "error: no breakpoint number 7 (see 'info breakpoints')"),
    ("ignore x 2", "error: 'x' is not a breakpoint number (see 'info breakpoints')"),
    ("ignore 1 -2", "error: the ignore count must be a whole number >= 0"),
    ("enable 0", "error: '0' is not a breakpoint number (they start at 1)"),
])
def test_breakpoint_errors(prompt: Prompt, line: str, expected: str) -> None:
    assert prompt.run(line) == [expected]
    assert prompt.debugger.changes == 0


# ------------------------------------------------------------------ resuming


def test_continue_detach_kill_quit(debugger: FakeDebugger) -> None:
    p = Prompt(debugger, make_stop())
    assert p.run("c") == ["Continuing."]
    assert p.outcomes[-1] is Outcome.RESUMED and p.ctx.stop is None
    p = Prompt(debugger, make_stop(launch=3))
    assert p.run("detach") == ["Detaching: the program runs to its end without stopping."]
    assert p.outcomes[-1] is Outcome.ENDED
    p = Prompt(debugger, make_stop(launch=4))
    assert p.run("kill") == ["Killed the program; what was captured is kept."]
    p = Prompt(debugger, make_stop(launch=5))
    assert p.run("q") == ["Killed the program; what was captured is kept."]
    assert p.outcomes[-1] is Outcome.ENDED
    assert debugger.resumes == [(2, "continue"), (3, "detach"), (4, "kill"), (5, "kill")]


@pytest.mark.parametrize("line", ["info launch", "p arg3", "info args", "x/4xw arg0", "bt",
                                  "continue", "step", "detach", "display arg3", "info threads",
                                  "frame", "set var arg1[0] = 1"])
def test_a_program_gone_at_a_stop_is_not_being_run(debugger: FakeDebugger, line: str) -> None:
    """The program ended while a launch was held (killed from outside, or exit() on another
    thread): commands no longer answer from the stop's cached state."""
    p = Prompt(debugger, make_stop())
    debugger.gone = "process 4242 exited with status 3"
    debugger._finished = True
    assert p.run(line) == ["The program is not being run: process 4242 exited with status 3."]
    assert p.outcomes[-1] is Outcome.RESUMED and p.ctx.stop is None
    assert debugger.resumes == [(2, "continue")]      # nothing of the run stays held
    assert p.run("info launch") == ["error: info launch: the program is not being run"]
    assert p.run("info breakpoints") == ["No breakpoints."]


def test_a_process_gone_at_a_stop_while_others_run_on(debugger: FakeDebugger) -> None:
    p = Prompt(debugger, make_stop())
    debugger.gone = "process 4242 was killed by SIGKILL"
    assert p.run("p arg3") == ["Launch 2 is no longer held: process 4242 was killed by "
                               "SIGKILL; the program's other processes run on to the next stop."]
    assert p.outcomes[-1] is Outcome.RESUMED and p.ctx.stop is None


@pytest.mark.parametrize("line", ["kill", "quit"])
def test_kill_and_quit_once_the_program_is_gone(debugger: FakeDebugger, line: str) -> None:
    p = Prompt(debugger, make_stop())
    p.ctx.confirm = lambda q: pytest.fail("nothing is left to kill: no question")
    debugger.gone = "process 4242 exited with status 3"
    debugger._finished = True
    assert p.run(line) == ["The program is not being run: process 4242 exited with status 3."]
    assert p.outcomes[-1] is Outcome.ENDED and debugger.ends == 0


def test_kill_asks_when_interactive(debugger: FakeDebugger) -> None:
    p = Prompt(debugger, make_stop())
    questions: list[str] = []
    p.ctx.confirm = lambda q: bool(questions.append(q))
    assert p.run("kill") == ["Not confirmed."]
    assert p.outcomes[-1] is None and debugger.resumes == []
    assert questions == ["Kill the program being debugged? (y or n) "]


# ------------------------------------------------------------------ errors and help


@pytest.mark.parametrize(("line", "expected"), [
    ("foo", "error: unknown command 'foo' (try 'help')"),
    ("de 1", "error: ambiguous command 'de': delete, detach"),
    ("info", "error: info needs a subcommand: allocs, args, breakpoints, display, graph, "
             "kernels, launch, locals, scope, threads"),
    ("info zork", "error: info: unknown subcommand 'zork' (one of allocs, args, breakpoints, "
                  "display, graph, kernels, launch, locals, scope, threads)"),
    ("info a", "error: info: ambiguous subcommand 'a': allocs, args"),
    ("bt x", "error: bt: argument N: invalid int value: 'x'"),
    ("continue now", "error: continue: unrecognized arguments: now"),
    ("diff arg1 --bogus", "error: diff: unrecognized arguments: --bogus"),
    ("break 'unbalanced", "Breakpoint 1: 'unbalanced"),
    ("delete 'unbalanced", "error: delete: No closing quotation"),
])
def test_bad_commands_give_one_line(prompt: Prompt, line: str, expected: str) -> None:
    assert prompt.run(line)[:1] == [expected]


def test_blank_and_comment_lines_do_nothing(prompt: Prompt) -> None:
    assert prompt.run("   ") == []
    assert prompt.run("# a comment") == []


def test_guards_are_declared_once(debugger: FakeDebugger) -> None:
    p = Prompt(debugger, None)
    for line in ("args", "info allocs", "info launch", "bt", "p arg0", "x arg0", "dump arg0",
                 "diff arg0", "step", "finish", "continue", "detach"):
        name = line.split()[0] if not line.startswith("info") else line
        name = {"args": "info args", "p": "print"}.get(name, name)
        assert p.run(line) == [f"error: {name}: the program is not stopped at a launch"], line
    assert p.run("info breakpoints") == ["No breakpoints."]


def test_a_failing_command_never_escapes(debugger: FakeDebugger) -> None:
    registry = Registry()
    parser = make_parser("boom", "Fails.")

    @command(parser, requires=(STOPPED,), registry=registry)
    def boom(ctx: Context, args: argparse.Namespace) -> None:
        raise RuntimeError("kaput")

    p = Prompt(debugger, make_stop())
    assert execute(p.ctx, "boom", registry) is None
    assert p.lines == ["error: internal error in 'boom': RuntimeError: kaput"]


def test_gdb_habits_next_run_whatis_info_locals(debugger: FakeDebugger) -> None:
    """The gdb commands people type do the nearest thing, or say in one line what to type."""
    p = Prompt(debugger, make_stop())
    assert p.run("whatis arg0") == ["type = float const*"]
    assert p.run("ptype arg0[3]") == ["type = float const"]
    assert p.run("whatis *arg2") == ["type = uchar4"]
    assert p.run("whatis arg3") == ["type = int"]
    assert p.run("whatis arg3[0]") == [
        "error: whatis: arg3 is not a pointer to data (its type is int)"]
    assert p.run("whatis arg9") == ["error: the kernel has no arg9 (arguments: arg0..arg4)"]
    assert p.run("whatis 1 + 2") == ["error: whatis: write argN, argN[I] or *argN, not '1 + 2'"]
    assert p.run("info locals") == [
        "A kernel's local variables live on the GPU and are not visible from outside it; "
        "'info args' shows its arguments, 'p argN[I]' what they point to."]
    running = ["The program is already running (cudump started it): 'continue' lets it go on, "
               "'next' stops at the next launch, 'kill' ends it."]
    assert p.run("r") == running and p.run("run ./app --flag") == running
    assert debugger.resumes == [] and debugger.interrupts == 0
    assert p.run("n") == ["Continuing to the next launch."]
    assert p.outcomes[-1] is Outcome.RESUMED
    # the next launch of any kernel stops (as Ctrl-C asks), asked before the launch goes
    assert debugger.interrupts == 1 and debugger.resumes == [(2, "continue")]
    assert p.run("next") == ["error: next: the program is not stopped at a launch"]
    debugger.wait_for_stop()
    assert p.run("run") == ["The program has ended; cudump runs it once: start cudump again "
                            "to run it again."]


def test_help(prompt: Prompt) -> None:
    out = prompt.run("help")
    assert out[0] == "Commands (help CMD for more; a unique prefix of a name works too):"
    assert "Running:" in out and "Breakpoints:" in out and "Inspecting:" in out
    assert "  x                     Examine device memory: x/NFU ADDRESS." in out
    assert "  print, p, inspect     Print an argument or the typed elements it points to." in out
    assert out[-1] == "Shorthands: args = info args, scope = info scope"
    assert all(len(line) <= 100 for line in out)
    x_help = prompt.run("help x")
    assert x_help[0] == "usage: x[/NFU] [ADDRESS]"
    assert prompt.run("x -h") == x_help
    assert prompt.run("help info args")[0] == "usage: info args [-h]"
    assert prompt.run("help args")[0] == "usage: info args [-h]"
    info_help = prompt.run("help info")
    assert info_help[0] == "usage: info SUBCOMMAND"
    assert info_help[-10:] == [
        "  allocs       The process's live device allocations.",
        "  args         The launch's arguments and the allocations they point into.",
        "  breakpoints  The breakpoint table.",
        "  display      The expressions 'display' shows at every stop.",
        "  graph        At a graph launch: its kernels in run order.",
        "  kernels      Kernels seen so far, with launch counts per process.",
        "  launch       Where and why the program stopped.",
        "  locals       A kernel's locals are not visible: see 'info args'.",
        "  scope        Where the launch was made: its layer, pass, step and source line.",
        "  threads      The host threads of the stopped process; * marks the one holding "
        "the launch.",
    ]
    assert prompt.run("info -h") == info_help
    assert prompt.run("help nothing") == ["error: unknown command 'nothing' (try 'help')"]
