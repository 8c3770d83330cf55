"""Runs compared scope by scope (synthetic manifests whose records name the scopes they were
made in): two implementations of one model launching other kernels, aligned by module; the
first module that differs named, not its parents; differences within the tolerance left
out; runs without scopes compared in launch order, saying so."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from clirun import run_cli

from cudump.analysis.bisect.errors import BisectError
from cudump.analysis.bisect.scopes import TolerantJudge, find_scope, judge_snapshots
from cudump.analysis.diff.by_scope import align_scopes, pair_outputs
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.scope_tree import scope_tree
from cudump.commands.diff import DiffCommand
from cudump.rundir.runs import Run
from cudump.wire.digest import ALGORITHM, digest, digest_hex

Array = np.ndarray


@dataclass(frozen=True)
class Op:
    """A module's work: the scopes it runs in, its kernels in eager (A) and compiled (B)
    form, and what it computes from the previous op's output."""

    chain: tuple[str, ...]
    eager: tuple[str, ...]          # A's kernels: all but the last write a temporary
    compiled: tuple[str, ...]       # B's
    fn: Callable[[Array], Array]


OPS = [
    Op(("Net", "block1", "block1.conv"), ("im2col", "sgemm_conv"), ("triton_conv",),
       lambda x: x * 2),
    Op(("Net", "block1", "block1.relu"), ("relu_kernel",), ("triton_relu",),
       lambda x: np.maximum(x - 3, 0)),
    Op(("Net", "block1", "block1.bn"), ("bn_fwd",), ("triton_bn",), lambda x: x + 1),
    Op(("Net", "block1", "block1.relu"), ("relu_kernel",), ("triton_relu",),
       lambda x: np.maximum(x - 5, 0)),
    Op(("Net", "head"), ("linear",), ("triton_linear",),
       lambda x: np.array([x.sum(), x.mean()], dtype=np.float32)),
]


def write_model(root: Path, side: str = "a", change: dict[int, float] | None = None, *,
                digests: bool = False, scopes: bool = True, temp: int | None = None,
                untyped: bool = False) -> Path:
    """One forward step of the model, as side `side` launches it ("a" eager, "b" compiled,
    "b-eager": B with A's kernels); `change`: op index -> a value added to its output's
    first element. Each launch reads its input (arg 0) and writes its output (arg 1),
    both recorded before and after, as .npy files or digests; an eager temporary holds
    `temp` elements (default: twice the input's); `untyped`: every buffer recorded as bytes,
    as a kernel whose signature gives no element type (a Triton or cuBLAS kernel) is."""
    root.mkdir(parents=True)
    lines: list[dict] = []
    occurrence: dict[str, int] = {}
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    address = 0x1000
    launch = 0

    def record(kernel: str, arg: int, phase: str, addr: int, data: Array, op: Op) -> dict:
        line = {"kernel": kernel, "mangled": kernel, "launch": launch,
                "occurrence": occurrence[kernel], "pid": 7, "grid": [1, 1, 1],
                "block": [32, 1, 1], "stream": "0x0", "arg": arg, "type": "float*",
                "phase": phase, "address": hex(addr), "dtype": "float32",
                "shape": list(data.shape), "file": None, "png": None, "status": "ok",
                "reason": None, "device": 0}
        if scopes:
            line.update(scope=list(op.chain), layer=op.chain[-1], step=0)
            line["pass"] = "forward"
        if digests:
            line.update(digest=digest_hex(digest(data, None)), bytes=data.nbytes,
                        row_bytes=data.nbytes, rows=1, algorithm=ALGORITHM, rule="--digest")
        else:
            name = f"{launch:04d}_{arg}_{phase}.npy"
            np.save(root / name, data.reshape(-1).view(np.uint8) if untyped else data)
            line["file"] = name
        if untyped:
            line.update(dtype="uint8", shape=[data.nbytes], type="void*")
        return line

    for index, op in enumerate(OPS):
        kernels = op.compiled if side == "b" else op.eager
        out = op.fn(x).astype(np.float32)
        if change and index in change:
            out = out.copy()
            out.flat[0] += change[index]
        source = x
        for k, kernel in enumerate(kernels):
            launch += 1
            occurrence[kernel] = occurrence.get(kernel, 0) + 1
            last = k == len(kernels) - 1
            # a temporary of another size than the output: only the eager side has it
            written = out if last else np.full(temp or source.size * 2, float(k + 1),
                                               np.float32)
            address += 0x100
            lines.append(record(kernel, 0, "before", 0x100 + index, source, op))
            lines.append(record(kernel, 1, "before", address, np.zeros_like(written), op))
            lines.append(record(kernel, 0, "after", 0x100 + index, source, op))
            lines.append(record(kernel, 1, "after", address, written, op))
        x = out
    (root / "manifest.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def diff(argv: list[str], capsys) -> tuple[int, str, str]:
    return run_cli(DiffCommand(), argv, capsys)


# ---------------------------------------------------------------------------------------
# The alignment


def test_scope_occurrences_and_their_outputs(tmp_path: Path) -> None:
    run = Run.open(write_model(tmp_path / "a"))
    tree = scope_tree(run)
    names = [(o.key.name, o.key.nth, o.key.depth) for o in tree.walk()]
    assert names == [("Net", 0, 1), ("block1", 0, 2), ("block1.conv", 0, 3),
                     ("block1.relu", 0, 3), ("block1.bn", 0, 3), ("block1.relu", 1, 3),
                     ("head", 0, 2)]
    conv = tree.roots[0].children[0].children[0]
    # both its launches wrote (the temporary, then the output); the inputs were only read
    assert [(s.record.kernel, s.record.arg) for s in conv.outputs()] == [
        ("im2col", 1), ("sgemm_conv", 1)]
    block = tree.roots[0].children[0]
    assert [s.record.kernel for s in block.outputs()][-1] == "relu_kernel"
    assert len(block.outputs()) == 5


def test_outputs_pair_by_size_from_the_last_write(tmp_path: Path) -> None:
    a = Run.open(write_model(tmp_path / "a"))
    b = Run.open(write_model(tmp_path / "b", "b"))
    conv_a = scope_tree(a).roots[0].children[0].children[0]
    conv_b = scope_tree(b).roots[0].children[0].children[0]
    paired = pair_outputs(conv_a.outputs(), conv_b.outputs())
    assert [(p.a.record.kernel, p.b.record.kernel) for p in paired.pairs] == [
        ("sgemm_conv", "triton_conv")]
    assert [s.record.kernel for s in paired.unpaired_a] == ["im2col"]
    assert paired.places == [1] and not paired.unpaired_b


def test_a_temporary_of_the_output_s_size_is_left_unpaired(tmp_path: Path, capsys) -> None:
    """The eager conv writes a temporary as large as its output before the output: the
    outputs pair from the last write backwards, so the output pairs with the output."""
    a = write_model(tmp_path / "a", temp=16)
    b = write_model(tmp_path / "b", "b")
    code, out, _ = diff([str(a), str(b)], capsys)
    assert code == 0, out
    assert "  block1.conv (forward, step 0)  same  1 output match; unpaired: A 1, B 0" in out


def test_eager_against_compiled_align_by_scope(tmp_path: Path, capsys) -> None:
    a = write_model(tmp_path / "a")
    b = write_model(tmp_path / "b", "b")
    code, out, err = diff([str(a), str(b)], capsys)
    assert code == 0, out + err
    assert "aligned by scope" in out.splitlines()[0]
    assert "no divergence beyond the tolerance (atol 0, rtol 0)" in out
    assert "  block1.conv (forward, step 0)  same  1 output match; unpaired: A 1, B 0" in out
    assert "block1.relu (forward, step 0, call 2)  same" in out
    assert "7 scopes compared, 0 differ, 0 only in A, 0 only in B" in out
    # In launch order the two have no kernel in common.
    code, out, _ = diff([str(a), str(b), "--by", "launch"], capsys)
    assert code == 1 and "no kernel in common" in out


def test_a_change_in_a_nested_module_names_that_module(tmp_path: Path, capsys) -> None:
    a = write_model(tmp_path / "a")
    b = write_model(tmp_path / "b", "b", {3: 0.5})     # the second call of block1.relu
    code, out, err = diff([str(a), str(b)], capsys)
    assert code == 1, out + err
    first = [ln for ln in out.splitlines() if ln.startswith("first difference:")]
    assert first == ["first difference: block1.relu (forward, step 0, call 2): output 0 "
                     "float32[4,4] max abs 0.5 > tolerance (atol 0, rtol 0), 1 of 16 "
                     "elements differ"]
    # its parents differ too (it is their output), and what follows it
    assert "Net (forward, step 0)  DIFF" in out and "\n  head (forward, step 0)  DIFF" in out
    assert ("  its launches do not line up (1 launch each, of other kernels: A relu_kernel, "
            "B triton_relu): its outputs are what compares") in out
    assert "7 scopes compared, 4 differ" in out


def test_outputs_known_only_as_bytes_of_other_kernels_are_said_to_be_a_guess(
        tmp_path: Path, capsys) -> None:
    """Where both sides' first differing output has no element type and the sides launch
    other kernels, the pairing was by size and order alone: the finding says it may name the
    wrong scope (eager against torch.compile inside PyTorch's caching allocator did so)."""
    a = write_model(tmp_path / "a", untyped=True)
    b = write_model(tmp_path / "b", "b", {3: 0.5}, untyped=True)
    code, out, err = diff([str(a), str(b)], capsys)
    assert code == 1, out + err
    lines = out.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("first difference:"))
    assert lines[first].startswith("first difference: block1.relu (forward, step 0, call 2): "
                                   "output 0 uint8[64]"), lines[first]
    assert lines[first + 1] == (
        "  note: this output is known on each side only as an allocation from its pointer on "
        "(64 bytes and 64 bytes; its kernels give no element type), and the two sides launch "
        "other kernels, so outputs were paired by those sizes and the order of their last "
        "writes: inside a caching allocator's block, a temporary of one side can be paired "
        "with the other's result, and this finding may name the wrong scope")
    # Typed outputs, or launches that line up, are paired with no such doubt.
    typed = write_model(tmp_path / "b2", "b", {3: 0.5})
    code, out, _ = diff([str(write_model(tmp_path / "a2")), str(typed)], capsys)
    assert code == 1 and "note: this output is known" not in out
    same = write_model(tmp_path / "b3", "b-eager", {3: 0.5}, untyped=True)
    code, out, _ = diff([str(a), str(same)], capsys)
    assert code == 1 and "note: this output is known" not in out


def test_launches_that_line_up_name_the_first_that_differs(tmp_path: Path, capsys) -> None:
    a = write_model(tmp_path / "a")
    b = write_model(tmp_path / "b", "b-eager", {0: 2.0})
    code, out, _ = diff([str(a), str(b)], capsys)
    assert code == 1
    assert "first difference: block1.conv (forward, step 0): output 1 float32[4,4]" in out
    assert ("  first launch inside it that differs (2 launches line up): launch 2 of "
            "sgemm_conv (occurrence 1), arg 1 after") in out


def test_html_report_of_the_scope_outputs(tmp_path: Path, capsys) -> None:
    a = write_model(tmp_path / "a")
    b = write_model(tmp_path / "b", "b", {3: 0.5})
    code, out, err = diff([str(a), str(b), "--html", str(tmp_path / "report")], capsys)
    assert code == 1, out + err
    page = (tmp_path / "report" / "index.html").read_text()
    assert "relu_kernel" in page and "linear" in page


def test_a_difference_within_the_tolerance_is_not_reported(tmp_path: Path, capsys) -> None:
    a = write_model(tmp_path / "a")
    b = write_model(tmp_path / "b", "b", {1: 1e-4})
    code, out, _ = diff([str(a), str(b), "--atol", "1e-3"], capsys)
    assert code == 0, out
    assert "no divergence beyond the tolerance (atol 0.001, rtol 0)" in out
    assert "first difference" not in out
    code, out, _ = diff([str(a), str(b)], capsys)
    assert code == 1 and "first difference: block1.relu (forward, step 0): " in out


def test_a_run_without_scopes_falls_back_to_launch_order(tmp_path: Path, capsys) -> None:
    a = write_model(tmp_path / "a")
    b = write_model(tmp_path / "b", "b-eager", {0: 2.0}, scopes=False)
    code, out, _ = diff([str(a), str(b)], capsys)
    assert code == 1
    assert out.splitlines()[0] == "run B has no scopes: comparing in launch order"
    assert "first divergent: launch 2 of sgemm_conv" in out
    assert "aligned by scope" not in out


def test_by_scope_on_a_run_without_scopes_is_trouble(tmp_path: Path, capsys) -> None:
    a = write_model(tmp_path / "a", scopes=False)
    b = write_model(tmp_path / "b", "b")
    code, out, err = diff([str(a), str(b), "--by", "scope"], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [err.strip()]
    assert "--by scope: run A has no scopes" in err


def test_modules_in_one_run_only_are_listed_not_a_difference(tmp_path: Path, capsys) -> None:
    a = write_model(tmp_path / "a")
    b = tmp_path / "b"
    write_model(b, "b")
    manifest = b / "manifest.jsonl"
    lines = [json.loads(x) for x in manifest.read_text().splitlines()]
    for line in lines:       # the compiled side fused bn into the relu after it
        if line["scope"][-1] == "block1.bn":
            line["scope"][-1] = "block1.fused"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out, _ = diff([str(a), str(b)], capsys)
    assert code == 0, out
    assert "block1.bn (forward, step 0)  only A  no such scope in B" in out
    assert "block1.fused (forward, step 0)  only B  no such scope in A" in out


def test_runs_with_no_scope_in_common_compare_in_launch_order(tmp_path: Path,
                                                               capsys) -> None:
    a = write_model(tmp_path / "a")
    b = tmp_path / "b"
    write_model(b, "b-eager", {0: 2.0})
    manifest = b / "manifest.jsonl"
    lines = [json.loads(x) for x in manifest.read_text().splitlines()]
    for line in lines:
        line["scope"] = ["Other"]
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out, _ = diff([str(a), str(b)], capsys)
    assert code == 1
    assert out.splitlines()[0] == "the runs have no scope in common: comparing in launch order"
    assert "first divergent: launch 2 of sgemm_conv" in out


# ---------------------------------------------------------------------------------------
# bisect's step 2 on digest runs


def test_bisect_finds_the_first_module_in_digest_runs(tmp_path: Path) -> None:
    a = Run.open(write_model(tmp_path / "a", digests=True))
    b = Run.open(write_model(tmp_path / "b", "b", {3: 0.5}, digests=True))
    found = find_scope(a, b, Tolerance())
    assert found.first is not None
    assert (found.first.key.name, found.first.key.nth) == ("block1.relu", 1)
    assert found.inside is not None and not found.inside.lined_up
    same = Run.open(write_model(tmp_path / "same", "b", digests=True))
    assert find_scope(a, same, Tolerance()).first is None


def test_bisect_with_a_tolerance_judges_by_snapshots(tmp_path: Path) -> None:
    """Digests that differ cannot say whether elements are within a tolerance: the
    snapshot re-runs (here: runs of the same model with files) decide."""
    tol = Tolerance(atol=1e-3)
    a = Run.open(write_model(tmp_path / "a", digests=True))
    snap_a = Run.open(write_model(tmp_path / "sa"))
    for name, change, expected in (("small", {1: 1e-4}, None),
                                   ("large", {1: 1e-4, 3: 0.5}, ("block1.relu", 1))):
        b = Run.open(write_model(tmp_path / name, "b", change, digests=True))
        snap_b = Run.open(write_model(tmp_path / f"s{name}", "b", change))
        batches: list[list[str]] = []

        def snapshot(batch, snap_b=snap_b, batches=batches):
            batches.append([p.key.text() for p in batch])
            return judge_snapshots(batch, (snap_a, snap_b), tol)

        found = find_scope(a, b, tol, lambda d, s=snapshot: TolerantJudge(d, s, batch=2))
        got = None if found.first is None else (found.first.key.name, found.first.key.nth)
        assert got == expected, name
        assert batches and len(batches[0]) == 2      # two scopes a re-run
    # exactly, the small change is the first difference
    b = Run.open(write_model(tmp_path / "exact", "b", {1: 1e-4}, digests=True))
    first = find_scope(a, b, Tolerance()).first
    assert first is not None and first.key.name == "block1.relu" and first.key.nth == 0


def _shift(run: Path, field: str, by: int) -> Path:
    """The run's records with `field` (launch or occurrence) moved by `by`: what a re-run
    whose other launches came more or less often records."""
    manifest = run / "manifest.jsonl"
    lines = [json.loads(x) for x in manifest.read_text().splitlines()]
    for line in lines:
        line[field] += by
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run


def test_a_re_runs_records_are_found_by_occurrence_not_launch_number(tmp_path: Path) -> None:
    """A compiled program's autotuning launches kernels as often as its timings say: the
    re-run's launch numbers move, its kernels' occurrences (what its rules take) do not."""
    tol = Tolerance(atol=1e-3)
    a = Run.open(write_model(tmp_path / "a", digests=True))
    b = Run.open(write_model(tmp_path / "b", "b", {3: 0.5}, digests=True))
    snap_a = Run.open(write_model(tmp_path / "sa"))
    snap_b = Run.open(_shift(write_model(tmp_path / "sb", "b", {3: 0.5}), "launch", 40))

    def snapshot(batch):
        return judge_snapshots(batch, (snap_a, snap_b), tol)

    found = find_scope(a, b, tol, lambda d: TolerantJudge(d, snapshot, batch=2))
    assert found.first is not None and found.first.key.name == "block1.relu"
    # Occurrences moved too: the re-run took other launches, and the error says which.
    moved = Run.open(_shift(write_model(tmp_path / "sm", "b", {3: 0.5}), "occurrence", 3))
    with pytest.raises(BisectError) as err:
        find_scope(a, b, tol, lambda d: TolerantJudge(
            d, lambda batch: judge_snapshots(batch, (snap_a, moved), tol), batch=2))
    assert "the programs do not run the same launches each time (B's launch" in str(err.value)
    assert "its re-run recorded occurrence 4 arg 0 (after)" in str(err.value)


def test_alignment_is_per_occurrence(tmp_path: Path) -> None:
    a = Run.open(write_model(tmp_path / "a"))
    b = Run.open(write_model(tmp_path / "b", "b"))
    pairs = align_scopes(a, b).pairs
    relu = [p for p in pairs if p.key.name == "block1.relu"]
    assert [p.key.nth for p in relu] == [0, 1]
    assert all(p.a is not None and p.b is not None for p in pairs)
    assert relu[0].a.launches[0].record.launch == 3 and relu[0].b.launches[0].record.launch == 2


# ---------------------------------------------------------------------------------------
# bisect's steps by scope, each side's runs made here (the full bisect runs the shim)


def fake_sides(monkeypatch, change: dict[int, float]) -> list[tuple[str, list[dict]]]:
    """bisect's side runs replaced: A runs the eager model, B the compiled one with
    `change`; a digest run records every buffer, a snapshot run only the launches its
    rules name (kernel and occurrence). Returns each run's (name, rules) as made."""
    import yaml

    import cudump.analysis.bisect.steps as steps_mod
    from cudump.analysis.bisect.side_run import SideRun

    made: list[tuple[str, list[dict]]] = []

    def run_side(side, run_dir: Path, log: Path, options: list[str], watch=None,
                 caches=None) -> SideRun:
        label = "a" if side.label == "A" else "b"
        digests = options == ["--digest"]
        write_model(run_dir, label, change if label == "b" else None, digests=digests)
        rules: list[dict] = []
        if not digests:
            rules = yaml.safe_load(Path(options[1]).read_text())["rules"]
            taken = {(r["kernel"], r["skip"] + 1) for r in rules}
            manifest = run_dir / "manifest.jsonl"
            lines = [json.loads(x) for x in manifest.read_text().splitlines()]
            kept = [x for x in lines if (x["mangled"], x["occurrence"]) in taken
                    and (x["phase"] == "after" or rules[0]["when"] == "both")]
            manifest.write_text("".join(json.dumps(x) + "\n" for x in kept))
        made.append((run_dir.name, rules))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        return SideRun(side, run_dir, log, 0, 0)

    monkeypatch.setattr(steps_mod, "run_side", run_side)
    return made


def bisect_lines(tmp_path: Path, tol: Tolerance) -> tuple[int, list[str]]:
    from cudump.analysis.bisect.options import BisectOptions
    from cudump.analysis.bisect.sides import Side
    from cudump.analysis.bisect.steps import bisect

    said: list[str] = []
    options = BisectOptions(sides=(Side("A", ("eager",)), Side("B", ("compiled",))),
                            out=tmp_path / "work", tol=tol, batch=2, jobs=1)
    return bisect(options, said.append), said


def test_bisect_names_the_module_and_snapshots_its_launches(tmp_path: Path,
                                                            monkeypatch) -> None:
    made = fake_sides(monkeypatch, {3: 0.5})
    code, said = bisect_lines(tmp_path, Tolerance())
    text = "\n".join(said)
    assert code == 1, text
    assert ("  first difference: block1.relu (forward, step 0, call 2): output 0 "
            "float32[4,4] digest differs") in text
    assert "step 3: snapshots of the launches in block1.relu (forward, step 0, call 2) " \
           "(1 in A, 1 in B), before and after" in text
    # each side's own launch: A's 5th launch is relu_kernel's 2nd, B's 4th triton_relu's 2nd
    snaps = {name: rules for name, rules in made if name.endswith("-snap")}
    assert [(r["kernel"], r["skip"]) for r in snaps["a-snap"]] == [("relu_kernel", 1)]
    assert [(r["kernel"], r["skip"]) for r in snaps["b-snap"]] == [("triton_relu", 1)]
    assert "step 4: the outputs of block1.relu (forward, step 0, call 2)" in text
    assert any(line.startswith("    largest difference: 0.5") for line in said), text


def test_bisect_by_scope_with_no_change_beyond_the_tolerance(tmp_path: Path,
                                                              monkeypatch) -> None:
    made = fake_sides(monkeypatch, {1: 1e-4})
    code, said = bisect_lines(tmp_path, Tolerance(atol=1e-3))
    assert code == 0, said
    assert said[-2] == ("no divergence beyond the tolerance (atol 0.001, rtol 0): every "
                        "aligned scope's outputs match")
    # the scopes whose digests differ were snapshotted (their outputs only, after)
    assert any(name.startswith("a-snapout") for name, _ in made)
    assert all(r["when"] == "after" for name, rules in made if "snapout" in name
               for r in rules)


def test_launch_rules_narrow_the_users_rules_to_each_launch(tmp_path: Path) -> None:
    from cudump.analysis.bisect.rules import UserRules
    from cudump.analysis.bisect.scopes import launch_rules

    run = Run.open(write_model(tmp_path / "a"))
    records = [ln.record for ln in scope_tree(run).launches if ln.kernel == "relu_kernel"]
    assert [r.occurrence for r in records] == [1, 2]
    plain = launch_rules(records, "both", "npy")
    assert [(r["kernel"], r["skip"], r["count"], r["args"]) for r in plain] == [
        ("relu_kernel", 0, 1, "pointers"), ("relu_kernel", 1, 1, "pointers")]
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - kernel: 'relu*'\n    every: 3\n    args: [1]\n"
                    "    overrides: {1: {dtype: float32}}\n")
    user = UserRules.load([path]).snapshot_rules()
    narrowed = launch_rules(records[1:], "after", "npy", user)
    assert narrowed == [{"kernel": "relu_kernel", "args": [1],
                         "overrides": {1: {"dtype": "float32"}}, "match": "mangled",
                         "skip": 1, "count": 1, "when": "after", "format": "npy"}]


def ranked_run(root: Path, side: str, changes: dict[int, dict[int, float]],
               order: tuple[int, int]) -> Path:
    """Two processes of ranks 0 and 1 (in manifest order `order`), each one model step."""
    root.mkdir()
    lines: list[str] = []
    for rank in order:
        part = write_model(root / f"r{rank}", side, changes.get(rank))
        for text in (part / "manifest.jsonl").read_text().splitlines():
            line = json.loads(text)
            line.update(pid=100 + rank, rank=rank, file=f"r{rank}/{line['file']}")
            lines.append(json.dumps(line) + "\n")
    (root / "manifest.jsonl").write_text("".join(lines))
    return root


def test_ranks_align_rank_by_rank(tmp_path: Path, capsys) -> None:
    a = ranked_run(tmp_path / "a", "a", {}, (0, 1))
    b = ranked_run(tmp_path / "b", "b", {1: {3: 0.5}}, (1, 0))
    code, out, _ = diff([str(a), str(b)], capsys)
    assert code == 1, out
    assert "first difference: block1.relu (forward, step 0, call 2, rank 1): " in out
    assert "14 scopes compared, 4 differ, 0 only in A, 0 only in B" in out
