"""XLA's dumped modules read back (cudump/rundir/xla.py): each kernel's name to the JAX
operation and line behind it. tests/data/xla holds two modules as a GPU build dumps them (one
with source_file/source_line, one with newer XLA's stack-frame tables); with jax installed, a
jitted function with named scopes is dumped on the CPU under --layers' XLA_FLAGS and read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cudump.controller.compiled_ops import op_where
from cudump.controller.target_env import layers_env
from cudump.launches.process import FuncInfo, ProcessState
from cudump.launches.scopes import ScopeKind, ScopeNode
from cudump.rundir.layout import XLA_DIR
from cudump.rundir.xla import HloBuffer, XlaOp, kernel_name, run_xla_ops, xla_ops, xla_ops_by_module

DATA = Path(__file__).resolve().parent / "data" / "xla"


def test_kernel_names_are_sanitized_as_xla_names_its_ptx_entries():
    assert kernel_name("loop_add_fusion.1") == "loop_add_fusion_1"
    assert kernel_name("custom-call.2") == "custom_call_2"
    assert kernel_name("7up") == "_7up"
    assert kernel_name("_") == "__"


def test_each_kernel_names_its_operation_and_line():
    modules = xla_ops_by_module(DATA)
    train = modules["jit_train"]
    # A fusion without metadata of its own takes its fused computation's root's.
    assert train["loop_add_fusion"] == XlaOp("jit_train", "jit(train)/jit(main)/layer1/add",
                                             "train.py:12", "/home/u/train.py",
                                             (HloBuffer("f32", 8),), (HloBuffer("f32", 8),),
                                             ("jit(train)/jit(main)/layer1/add",))
    assert train["input_reduce_fusion_1"].op_name == "jit(train)/jit(main)/layer2/reduce_sum"
    assert train["input_reduce_fusion_1"].source == "train.py:15"
    assert train["custom_call_2"].op_name.endswith("layer1/dot_general")
    # A tuple's leaves are outputs each; a scalar is one element.
    assert train["custom_call_2"].outputs == (HloBuffer("f32", 64), HloBuffer("s8", 4))
    assert train["input_reduce_fusion_1"].outputs == (HloBuffer("f32", 1),)
    # Inside a kernel (a fusion's computation, a reduction's), parameters, tuples: no kernel.
    assert set(train) == {"loop_add_fusion", "input_reduce_fusion_1", "custom_call_2"}
    evaluated = modules["jit_eval"]
    assert evaluated["wrapped_exp_2"] == XlaOp("jit_eval", "jit(eval)/head/exp", "eval.py:40",
                                               "/home/u/eval.py", (HloBuffer("f32", 8),),
                                               (HloBuffer("f32", 8),), ("jit(eval)/head/mul",))


def test_a_fusion_of_several_named_scopes_names_them_all():
    """As an H100's XLA dumped jit(f) of a program: tanh(x @ x.T) in "encoder" and
    log(h - 2) in "head", one Triton fusion named after the dot; the NaN is head's."""
    (op,) = xla_ops_by_module(DATA)["jit_f"].values()
    assert op.fused == ("jit(f)/encoder/dot_general", "jit(f)/encoder/tanh",
                        "jit(f)/head/sub", "jit(f)/head/log")
    assert (op.operands, op.outputs) == ((HloBuffer("f32", 4096),) * 2,
                                         (HloBuffer("f32", 4096),))
    where = op_where(op)
    assert where.layer == "encoder/dot_general, fused with head/sub, head/log"
    assert where.source == "jax_nan.py:11"


def test_xlas_own_annotations_give_way_to_the_operation():
    """XLA's NVTX ranges ("TSL:XlaModule:#..#", "TSL:Thunk:#..#") name its instructions; a
    kernel whose operation the dump gives is named by that, under the program's own
    ranges."""
    op = XlaOp("jit_f", "jit(f)/head/log", "prog.py:12", None)
    proc = ProcessState(pid=1, ppid=0, exe="python3")
    proc.add_func(FuncInfo(7, 0, "loop_log_fusion", "loop_log_fusion", None, op=op_where(op)))
    for node in (ScopeNode(1, 0, ScopeKind.RANGE, "epoch"),
                 ScopeNode(2, 1, ScopeKind.RANGE, "TSL:XlaModule:#hlo_module=jit_f#"),
                 ScopeNode(3, 2, ScopeKind.RANGE, "TSL:Thunk:#hlo_op=loop_log_fusion#"),
                 ScopeNode(4, 0, ScopeKind.RANGE, "Thunk:#hlo_op=loop_log_fusion#")):
        proc.scopes.add(node)
    where = proc.where(7, 3)
    assert (where.layer, where.scopes, where.source) == (
        "head/log", ("epoch", "jit(f)", "head", "log"), "prog.py:12")
    assert proc.where(7, 4).layer == "head/log"          # older XLA's, without "TSL:"
    # A range of the program's own is its layer still.
    assert proc.where(7, 1).layer == "epoch"


def test_a_name_two_modules_give_different_operations_is_left_out():
    ops = xla_ops(DATA)
    assert "loop_add_fusion" not in ops
    assert ops["wrapped_exp_2"].module == "jit_eval"
    assert ops["input_reduce_fusion_1"].module == "jit_train"


def test_no_dump_is_no_operations(tmp_path):
    assert run_xla_ops(tmp_path) == {}
    (tmp_path / XLA_DIR).mkdir()
    (tmp_path / XLA_DIR / "module_0001.x.after_optimizations.txt").write_bytes(b"\xff\x00junk")
    assert run_xla_ops(tmp_path) == {}


JAX_PROGRAM = """\
import jax
import jax.numpy as jnp

def train(x, w):
    with jax.named_scope("layer1"):
        y = jnp.tanh(x @ w) + 1.0
    with jax.named_scope("layer2"):
        return jnp.sum(jnp.exp(y) * 2.0, axis=1)

print(jax.jit(train)(jnp.ones((8, 8)), jnp.ones((8, 8)))[0])
"""


def test_a_jax_programs_dump_names_its_named_scopes(tmp_path):
    pytest.importorskip("jax")
    program = tmp_path / "prog.py"
    program.write_text(JAX_PROGRAM)
    run_dir = tmp_path / "run"
    env = layers_env({k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, run_dir)
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run([sys.executable, str(program)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    ops = run_xla_ops(run_dir)
    train = xla_ops_by_module(run_dir / XLA_DIR)["jit_train"]
    # Every fusion of the jitted function's entry computation is found, with its operation.
    dumped = next((run_dir / XLA_DIR).glob("*jit_train*after_optimizations.txt")).read_text()
    entry = dumped[dumped.index("\nENTRY"):]
    fusions = {kernel_name(n) for n in re.findall(r"%?([\w.\-]+) = [^=]* fusion\(", entry)}
    assert fusions and fusions <= set(train), (fusions, train)
    scopes = {op.op_name.split("/")[-2]: op.source for op in train.values()}
    assert scopes.get("layer1") == "prog.py:6" and scopes.get("layer2") == "prog.py:8", train
    # Every array of this program is float32, of 64, 8 or 1 elements: its operands, written
    # by name alone in newer XLA, are found through the instructions they name.
    assert all(b.type == "f32" and b.elements in (64, 8, 1)
               for op in train.values() for b in op.operands + op.outputs), train
    assert all(ops[name] == op for name, op in train.items() if name in ops)
