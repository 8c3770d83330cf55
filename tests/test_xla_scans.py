"""XLA's kernels scanned for NaN/Inf: their parameters are untyped pointers, so the element
type of each comes from XLA's own dump of the module (cudump/rundir/xla.py), made under
--check-nan with or without --layers. The stand-in program `xla` writes its module's HLO
where XLA_FLAGS says, as XLA does, and launches the fusion (f32 x, s32 index, f32 y) once:
x holds a negative, so y gets log's NaN; index holds -1s, a NaN's bits if read as float; y's
allocation holds NaNs after the array, which only XLA's element count keeps out. cudump asks
for the dump once a Python program imports jax: the stand-in runs behind a Python launcher
that imports a stand-in jax package, then executes it."""

from __future__ import annotations

import sys
from pathlib import Path

from records import manifest, nan_lines

from cudump.controller.compiled_ops import arg_overrides
from cudump.rundir.xla import HloBuffer, XlaOp

BAD = 77

LAUNCHER = """\
import os, sys
import jax
os.execv(sys.argv[1], sys.argv[1:])
"""


def xla_program(fake, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """The stand-in behind a Python launcher that imports jax first, and its environment."""
    lib = tmp_path / "lib"
    (lib / "jax").mkdir(parents=True)
    (lib / "jax" / "__init__.py").write_text("")
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    return ([sys.executable, str(launcher), str(fake.programs["xla"]), str(BAD)],
            {"PYTHONPATH": str(lib)})


def test_an_xla_fusions_nan_is_found_named_and_its_int_operand_not_read_as_float(
        fake, cudump_run, tmp_path):
    argv, env = xla_program(fake, tmp_path)
    ran = cudump_run(argv, "--check-nan", env_extra=env)
    assert ran.returncode == 0, ran.stderr
    assert "launches loop_log_fusion=1" in ran.stdout
    (report,) = nan_lines(ran.stderr)
    assert "loop_log_fusion" in report and "head/log" in report and "prog.py:12" in report, \
        report
    found = [r for r in manifest(ran.run_dir) if "nonfinite" in r]
    # Only y (argument 2) is non-finite: the s32 index is not scanned as float.
    assert [(r["arg"], r["nonfinite"], r["first_nonfinite"], r["origin"]) for r in found] == [
        (2, 1, BAD, "produced")], found
    # y read as XLA's f32[1024]: its 1024 elements, not the NaNs after it in its allocation.
    assert found[0]["elements"] == 1024


def test_without_the_dump_xla_kernels_are_not_guessed_at(fake, cudump_run, tmp_path):
    """The program's own --xla_dump_to is kept: cudump has no types, says so, and scans
    nothing rather than read the s32 operand as float."""
    elsewhere = tmp_path / "theirs"
    argv, env = xla_program(fake, tmp_path)
    ran = cudump_run(argv, "--check-nan",
                     env_extra={**env, "XLA_FLAGS": f"--xla_dump_to={elsewhere}"})
    assert ran.returncode == 0, ran.stderr
    assert "XLA_FLAGS has its own --xla_dump_to" in ran.stderr
    assert any(elsewhere.iterdir())        # the program dumped where it was told
    assert nan_lines(ran.stderr) == []
    assert [r for r in manifest(ran.run_dir) if "nonfinite" in r] == []


def test_argument_types_and_counts_by_position_or_one_type_for_all():
    op = XlaOp("jit_f", "jit(f)/head/log", None, None,
               (HloBuffer("f32", 1024), HloBuffer("s32", 1024)), (HloBuffer("f32", 4),))
    read = arg_overrides(op, [(0, 8), (8, 8), (16, 8)])
    assert {i: (o.dtype, o.count.text if o.count else None) for i, o in read.items()} == {
        0: ("float32", "1024"), 1: ("int32", "1024"), 2: ("float32", "4")}
    # Two arguments for three buffers: XLA passed one slice once; with mixed types the
    # positions are not known, so nothing is said.
    assert arg_overrides(op, [(0, 8), (8, 8)]) == {}
    same = XlaOp("jit_f", "jit(f)/add", None, None,
                 (HloBuffer("bf16", 8), HloBuffer("bf16", 8)), (HloBuffer("bf16", 8),))
    bf16 = arg_overrides(same, [(0, 8), (8, 8)])
    # The type alone: the count of a merged argument's buffer is not known.
    assert set(bf16) == {0, 1} and bf16[0].dtype == "uint16" and bf16[0].count is None
    assert "bfloat16" in (bf16[0].note or "")
    # A parameter that is not a pointer: not an XLA kernel's layout. fp8: numpy has no type.
    assert arg_overrides(op, [(0, 8), (8, 8), (16, 4)]) == {}
    assert arg_overrides(op, None) == {}
    fp8 = XlaOp("jit_f", "jit(f)/cast", None, None, (HloBuffer("f8e4m3fn", 8),),
                (HloBuffer("f32", 8),))
    assert set(arg_overrides(fp8, [(0, 8), (8, 8)])) == {1}
