"""Modules' declared outputs (--module-outputs, outputs.jsonl) in diff and bisect, on synthetic
runs laid out as PyTorch's caching allocator lays them out: each record runs from a kernel's
pointer to the end of a block holding other tensors, and its bytes have no element type (a
cuBLAS or Triton kernel declares none). Eager block0 writes its matmul's result, then its
ReLU's; compiled block0 writes one fused result at the matmul's place. By size alone the
matmul's result pairs with the fused one and block0 seems to differ; by what block0
returned, it does not."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from clirun import run_cli
from pytargets import DRIVER_START

from cudump.analysis.bisect.scopes import judge_snapshots, parts_of_digests
from cudump.analysis.diff.by_scope import align_scopes, compare_output
from cudump.analysis.diff.declared import PART_OF_DIGEST, UNDECIDED, OutputSnapshot
from cudump.analysis.diff.metrics import Tolerance
from cudump.commands.diff import DiffCommand
from cudump.launches.scopes import Where
from cudump.rundir.outputs import OutputRecord, OutputWriter
from cudump.rundir.runs import Run
from cudump.wire.digest import ALGORITHM, digest, digest_hex

MATMUL = 0x7F0000000040          # 64 bytes into a block, as the GPU run had it
RELU = 0x7F0000100040
ADD = 0x7F0000200040
X = np.linspace(-1, 1, 64, dtype=np.float32)


def _block(head: np.ndarray, size: int, fill: float) -> np.ndarray:
    """A record's bytes: the tensor, then the rest of its block (other tensors)."""
    rest = np.full((size - head.nbytes) // 4, fill, np.float32)
    return np.concatenate([head, rest]).view(np.uint8)


def write_run(root: Path, compiled: bool, change: float = 0.0, declared: bool = True,
              digests: bool = False) -> Path:
    root.mkdir(parents=True)
    lines: list[dict] = []
    seen: dict[str, int] = {}
    relu = np.maximum(X * 2, 0)
    added = relu + 1
    added[0] += change
    # (chain, kernel, address, bytes after), eager or compiled; the rest of each block
    # holds other values on each side
    work = [(("Net", "block0"), "triton_fused", MATMUL, _block(relu, 512, 7.0))] if compiled \
        else [(("Net", "block0"), "gemm", MATMUL, _block(X * 2, 512, 3.0)),
              (("Net", "block0"), "relu", RELU, _block(relu, 1024, 5.0))]
    work.append((("Net", "block1"), "add", ADD, _block(added, 512, 9.0 if compiled else 1.0)))
    for launch, (chain, kernel, address, after) in enumerate(work, 1):
        seen[kernel] = seen.get(kernel, 0) + 1
        for phase, data in (("before", np.zeros_like(after)), ("after", after)):
            line = {"kernel": kernel, "mangled": kernel, "launch": launch,
                    "occurrence": seen[kernel], "pid": 7, "grid": [1, 1, 1],
                    "block": [32, 1, 1], "stream": "0x0", "arg": 1, "type": "void*",
                    "phase": phase, "address": hex(address), "dtype": "uint8",
                    "shape": [data.nbytes], "file": None, "png": None, "status": "ok",
                    "reason": None, "device": 0, "scope": list(chain), "layer": chain[-1],
                    "pass": "forward", "step": 0}
            if digests:
                line.update(digest=digest_hex(digest(data, None)), bytes=data.nbytes,
                            row_bytes=data.nbytes, rows=1, algorithm=ALGORITHM,
                            rule="--digest", file=None)
            else:
                name = f"{launch:04d}_{phase}.npy"
                np.save(root / name, data)
                line["file"] = name
            lines.append(line)
    (root / "manifest.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if declared:
        writer = OutputWriter(root, lambda why: pytest.fail(why))
        where = {chain: Where(chain, chain[-1], "forward", 0)
                 for chain in (("Net",), ("Net", "block0"), ("Net", "block1"))}
        block0 = 1 if compiled else 2
        # each module's return, the innermost first, as the hooks tell them
        for chain, made, address in ((("Net", "block0"), block0, MATMUL if compiled else RELU),
                                     (("Net", "block1"), block0 + 1, ADD),
                                     (("Net",), block0 + 1, ADD)):
            assert writer.append(OutputRecord(7, made, 0, address, 256, "float32", (64,),
                                              where[chain]))
    return root


def diff(argv: list[str], capsys) -> tuple[int, str, str]:
    return run_cli(DiffCommand(), argv, capsys)


def first_line(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("first difference:"))


def test_without_declared_outputs_the_matmul_pairs_with_the_fused_result(tmp_path, capsys):
    """What the GPU run showed, kept as the reason for the rest: by size, block0 differs."""
    a = write_run(tmp_path / "a", False, declared=False)
    b = write_run(tmp_path / "b", True, declared=False)
    code, out, _ = diff([str(a), str(b)], capsys)
    assert code == 1 and first_line(out).startswith("first difference: block0 "), out


def test_declared_outputs_name_the_module_that_differs(tmp_path, capsys):
    a = write_run(tmp_path / "a", False)
    b = write_run(tmp_path / "b", True, change=0.5)
    code, out, err = diff([str(a), str(b)], capsys)
    assert code == 1, out + err
    assert first_line(out) == ("first difference: block1 (forward, step 0): output 0 "
                               "float32[64] max abs 0.5 > tolerance (atol 0, rtol 0), 1 of 64 "
                               "elements differ")
    assert "block0 (forward, step 0)  same" in out
    # typed by the declaration: no note that the pairing was a guess
    assert "may name the wrong scope" not in out


def test_declared_outputs_with_no_change_match(tmp_path, capsys):
    a = write_run(tmp_path / "a", False)
    b = write_run(tmp_path / "b", True)
    code, out, err = diff([str(a), str(b)], capsys)
    assert code == 0, out + err
    assert "no divergence beyond the tolerance" in out


def test_a_part_of_a_digest_is_settled_by_its_elements(tmp_path):
    """Digest runs: block0's outputs are parts of records whose digests differ (the rest of
    the blocks differ), so the digests cannot tell; bisect then judges by snapshots, where
    block0's elements match and block1's do not."""
    da = Run.open(write_run(tmp_path / "da", False, digests=True))
    db = Run.open(write_run(tmp_path / "db", True, change=0.5, digests=True))
    aligned = align_scopes(da, db)
    assert parts_of_digests(aligned)
    block0, block1 = (next(p for p in aligned.pairs if p.key.name == name)
                      for name in ("block0", "block1"))
    for pair in (block0, block1):
        (out,) = pair.outputs.pairs
        assert isinstance(out.a, OutputSnapshot) and isinstance(out.b, OutputSnapshot)
        compare_output(out, Tolerance())
        assert (out.status, out.reason, out.sums) == ("undecided", PART_OF_DIGEST, None)
    sa = Run.open(write_run(tmp_path / "sa", False))
    sb = Run.open(write_run(tmp_path / "sb", True, change=0.5))
    verdicts = judge_snapshots([block0, block1], (sa, sb), Tolerance())
    assert (verdicts[id(block0)], verdicts[id(block1)]) == (False, True)


def test_equal_records_settle_their_parts_by_digest(tmp_path):
    da = Run.open(write_run(tmp_path / "da", False, digests=True))
    db = Run.open(write_run(tmp_path / "db", False, digests=True))
    aligned = align_scopes(da, db)
    aligned.compare_all(Tolerance())
    assert {p.key.name: p.status for p in aligned.pairs if p.both} == {
        "Net": "equal", "block0": "equal", "block1": "equal"}


def test_a_damaged_outputs_file_is_one_line_naming_it(tmp_path, capsys):
    a = write_run(tmp_path / "a", False)
    b = write_run(tmp_path / "b", True)
    with (b / "outputs.jsonl").open("a") as f:
        f.write('{"pid": 7, "launches": "many"}\n{"pid": 7}\n')
    code, out, err = diff([str(a), str(b)], capsys)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "outputs.jsonl:4:" in lines[0] and "launches" in lines[0], err


def test_diff_of_digest_runs_says_which_scopes_only_elements_can_tell(tmp_path, capsys):
    """`cudump diff` of digest runs: outputs that are parts of larger digests that differ are
    neither a difference nor a match, and the verdict says so."""
    a = write_run(tmp_path / "a", False, digests=True)
    b = write_run(tmp_path / "b", True, change=0.5, digests=True)
    code, out, err = diff([str(a), str(b)], capsys)
    assert code == 0, out + err
    assert "  block0 (forward, step 0)  ?  1 output is part of a larger digest that differs" \
        in out
    assert "3 scopes compared, 0 differ, 3 that only their elements can tell" in out
    assert "but 3 scopes could not be told by digests" in out
    assert "first difference" not in out
    aligned = align_scopes(Run.open(a), Run.open(b))
    aligned.compare_all(Tolerance())
    assert {p.status for p in aligned.pairs} == {UNDECIDED}


# Two implementations of a model, on the stand-in driver through the real shim: block0 eager
# scales a temporary by 3 (at 64 bytes into a block) and then its result by 2 (in another
# block); compiled, one launch makes the result at the temporary's place. block1 scales its
# input (by 1.5 in B with CHANGE). Each module's returned tensor is told where cudump asks,
# as the PyTorch hook tells it.
PROGRAM = DRIVER_START + """
import os
import sys

compiled, change = sys.argv[1] == "compiled", len(sys.argv) > 2


def block(size):
    buf = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(buf), size))
    check(cuda.cuMemsetD32_v2(buf, 0x3F800000, size // 4))      # 1.0f
    return buf.value


def scale(address, factor):
    ptr, s, n = ctypes.c_uint64(address), ctypes.c_float(factor), ctypes.c_int(64)
    args = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                   for v in (ptr, s, n)])
    check(cuda.cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, None, args, None))


def returned(address):
    # as the PyTorch hook does: only where cudump asks (--module-outputs)
    if os.environ.get("CUDUMP_MODULE_OUTPUTS") == "1":
        assert shim.cudump_scope_output(address, 256, 0, b"float32[64]") == 0


shim.cudump_scope_step(1)
shim.cudump_scope_push(2, b"Net")
shim.cudump_scope_push(2, b"block0")
first = block(512) + 64
if compiled:
    out = first
    scale(out, 2.0)
else:
    scale(first, 3.0)                   # the temporary
    out = block(1024) + 64
    scale(out, 2.0)
returned(out)
shim.cudump_scope_pop()
shim.cudump_scope_push(2, b"block1")
last = block(256)
scale(last, 1.5 if change else 1.0)
returned(last)
shim.cudump_scope_pop()
returned(last)
shim.cudump_scope_pop()
check(cuda.cuCtxSynchronize())
"""

SNAPSHOTS = "rules:\n  - kernel: scale\n    when: after\n    format: npy\n"


def test_eager_against_compiled_through_the_shim(cudump_run, tmp_path, capsys):
    """Runs made by cudump on the stand-in driver, each module's returned tensor told:
    `cudump diff` names the block that changed; without the tensors told, the eager
    temporary pairs with the compiled result and the first block is named."""
    program = tmp_path / "model.py"
    program.write_text(PROGRAM)
    rules = tmp_path / "snapshots.yaml"
    rules.write_text(SNAPSHOTS)
    runs = {}
    for name, argv, told in (("a", ["eager"], True), ("b", ["compiled", "change"], True),
                             ("a0", ["eager"], False), ("b0", ["compiled", "change"], False)):
        options = ["--layers", "--rule", str(rules)] + (["--module-outputs"] if told else [])
        ran = cudump_run([sys.executable, str(program), *argv], *options,
                         run_dir=tmp_path / name)
        assert ran.returncode == 0, ran.stderr
        assert (ran.run_dir / "outputs.jsonl").exists() == told
        runs[name] = ran.run_dir
    code, out, err = diff([str(runs["a"]), str(runs["b"])], capsys)
    assert code == 1, out + err
    assert first_line(out).startswith("first difference: block1 (forward, step 0): output 0 "
                                      "float32[64] max abs 0.5"), out
    assert "  block0 (forward, step 0)  same" in out
    code, out, err = diff([str(runs["a0"]), str(runs["b0"])], capsys)
    assert code == 1 and first_line(out).startswith("first difference: block0 "), out
