"""Diffing digest runs (synthetic manifests): pairs compared by digest, a digest against an
.npy by digesting the array, and the first divergent launch with the launches matched
before it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from clirun import run_cli

import cudump.analysis.diff.parallel as parallel_mod
from cudump.analysis.diff.align import align
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.parallel import compare_pairs
from cudump.analysis.diff.runs import diff_runs
from cudump.analysis.report.html_page import HtmlReport
from cudump.analysis.report.text import divergent_line
from cudump.commands.diff import DiffCommand
from cudump.commands.ls import LsCommand
from cudump.rundir.runs import Run, Snapshot
from cudump.wire.digest import ALGORITHM, abs_sum, digest, digest_hex
from cudump.wire.protocol import ToolMode

RNG = np.random.default_rng(77)
FILL = "void fill<int>(int*, int, int)"
ADD = "vecAdd(float const*, float const*, float*, int)"
SCALE = "scale"
MANGLED = {FILL: "_Z4fillIiEvPT_S0_i", ADD: "_Z6vecAddPKfS0_Pfi", SCALE: "scale"}




def record(kernel: str, launch: int, occ: int, arg: int, phase: str, data: np.ndarray, *,
           pid: int = 100, row_bytes: int | None = None, npy: str | None = None,
           **extra) -> dict:
    """A manifest line: a digest of `data` (rows of row_bytes, default one row) or, with
    `npy`, the name of the file that holds it."""
    raw = np.ascontiguousarray(data)
    width = raw.nbytes if row_bytes is None else row_bytes
    line = {
        "kernel": kernel, "mangled": MANGLED.get(kernel, "_Z1kv"), "launch": launch,
        "occurrence": occ, "pid": pid, "grid": [4, 1, 1], "block": [256, 1, 1],
        "stream": "0x0", "arg": arg, "type": None, "phase": phase, "address": "0x7f0000",
        "dtype": str(raw.dtype), "shape": list(raw.shape), "file": npy, "png": None,
        "status": "ok", "reason": None, "device": 0,
    }
    if npy is None:
        line.update(digest=digest_hex(digest(raw, width or None)), bytes=raw.nbytes,
                    row_bytes=width, rows=raw.nbytes // width if width else 0,
                    algorithm=ALGORITHM, rule="--digest")
    line.update(extra)
    return line


def write_run(root: Path, lines: list[dict], arrays: dict[str, np.ndarray] | None = None
              ) -> Path:
    root.mkdir(parents=True)
    for name, array in (arrays or {}).items():
        np.save(root / name, array)
    (root / "manifest.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


class Program:
    """The records of a program run on rounds of fill, vecAdd, scale, vecAdd (as
    tests/fakecuda/progs/diverge.c), with one element of one launch changed on request."""

    def __init__(self, rounds: int = 6, n: int = 64) -> None:
        self.rounds, self.n = rounds, n

    def lines(self, change: tuple[int, int, str] | None = None, pid: int = 100,
              first_launch: int = 1) -> list[dict]:
        """`change`: (launch, arg, phase) whose buffer gets one element changed."""
        out: list[dict] = []
        launch = first_launch - 1
        occ = {FILL: 0, ADD: 0, SCALE: 0}
        for _ in range(self.rounds):
            for kernel, args in ((FILL, 1), (ADD, 3), (SCALE, 1), (ADD, 3)):
                launch += 1
                occ[kernel] += 1
                for phase in ("before", "after"):
                    for arg in range(args):
                        data = np.arange(self.n, dtype=np.float32) * (launch + arg) + (
                            phase == "after")
                        if change == (launch, arg, phase):
                            data[5] += 1
                        out.append(record(kernel, launch, occ[kernel], arg, phase, data,
                                          pid=pid))
        return out


# ---------------------------------------------------------------------------------------
# Pairs of digests


def test_digest_pairs_compare_without_loading(tmp_path: Path, monkeypatch) -> None:
    x = np.arange(12, dtype=np.uint8)
    a = write_run(tmp_path / "a", [record(ADD, 1, 1, 0, "after", x)])
    b = write_run(tmp_path / "b", [record(ADD, 1, 1, 0, "after", x)])
    c = write_run(tmp_path / "c", [record(ADD, 1, 1, 0, "after", x + 1)])

    def no_loading(*args, **kwargs):
        raise AssertionError("a digest pair loaded an array")

    monkeypatch.setattr(Snapshot, "load", no_loading)
    same = diff_runs(Run.open(a), Run.open(b))
    assert [p.status for p in same.pairs] == ["equal"] and same.exit_code == 0
    assert same.pairs[0].metrics is None and same.first_divergent_launch is None
    differ = diff_runs(Run.open(a), Run.open(c))
    pair = differ.pairs[0]
    assert pair.status == "differ" and pair.reason == "digest differs"
    assert pair.digests is not None and pair.digests[0] != pair.digests[1]
    assert differ.exit_code == 1


def test_geometry_and_byte_count_mismatches(tmp_path: Path) -> None:
    x = np.zeros(16, np.float32)
    base = write_run(tmp_path / "a", [record(ADD, 1, 1, 0, "after", x)])
    shaped = write_run(tmp_path / "b", [record(ADD, 1, 1, 0, "after", x.reshape(4, 4))])
    shorter = write_run(tmp_path / "c", [record(ADD, 1, 1, 0, "after", x[:15], shape=[16])])
    rows = write_run(tmp_path / "d", [record(ADD, 1, 1, 0, "after", x, row_bytes=16)])
    for other, reason in ((shaped, "float32[16] vs float32[4, 4]"),
                          (shorter, "64 vs 60 bytes"), (rows, "rows of 64 vs 16 bytes")):
        pair = diff_runs(Run.open(base), Run.open(other)).pairs[0]
        assert (pair.status, pair.reason) == ("mismatch", reason)


def test_malformed_digest_is_trouble(tmp_path: Path, capsys) -> None:
    x = np.zeros(4, np.uint8)
    a = write_run(tmp_path / "a", [record(ADD, 1, 1, 0, "after", x)])
    b = write_run(tmp_path / "b", [record(ADD, 1, 1, 0, "after", x, digest="XYZ")])
    code, out, err = run_cli(DiffCommand(), [str(a), str(b)], capsys)
    assert code == 2 and "ERROR" in out
    assert err.startswith("cudump: error:") and "16 lowercase hex digits" in err


@pytest.mark.parametrize("dtype,shape,row_bytes", [
    (np.float32, (3, 7), 28),        # whole words per row
    (np.uint8, (5, 3, 3), 9),        # rows of 9 bytes: each padded to 12
    (np.uint16, (11,), None),        # one row of 22 bytes
])
def test_digest_against_npy_digests_the_array(tmp_path: Path, dtype, shape,
                                              row_bytes: int | None) -> None:
    data = (RNG.random(shape) * 200).astype(dtype)
    changed = data.copy()
    changed.reshape(-1)[-1] += 1
    digested = write_run(tmp_path / "d", [record(ADD, 1, 1, 0, "after", data,
                                                 row_bytes=row_bytes)])
    same = write_run(tmp_path / "same", [record(ADD, 1, 1, 0, "after", data, npy="x.npy")],
                     {"x.npy": data})
    other = write_run(tmp_path / "other", [record(ADD, 1, 1, 0, "after", data, npy="x.npy")],
                      {"x.npy": changed})
    for a, b in ((digested, same), (same, digested)):
        pair = diff_runs(Run.open(a), Run.open(b)).pairs[0]
        assert pair.status == "equal", pair.reason
        assert pair.digests is not None and pair.digests[0] == pair.digests[1]
    pair = diff_runs(Run.open(digested), Run.open(other)).pairs[0]
    assert pair.status == "differ" and pair.reason == "digest differs"
    wrong = write_run(tmp_path / "wrong", [record(ADD, 1, 1, 0, "after", data[:1],
                                                  npy="x.npy")], {"x.npy": data[:1]})
    assert diff_runs(Run.open(digested), Run.open(wrong)).pairs[0].status == "mismatch"


def test_digests_survive_worker_processes(tmp_path: Path, monkeypatch) -> None:
    data = np.arange(100, dtype=np.float32)
    a = write_run(tmp_path / "a", [record(ADD, i, i, 0, "after", data) for i in (1, 2)])
    b = write_run(tmp_path / "b", [record(ADD, i, i, 0, "after", data + (i == 2), npy=f"{i}.npy")
                                   for i in (1, 2)],
                  {"1.npy": data, "2.npy": data + 1})
    monkeypatch.setattr(parallel_mod, "PROCESS_MIN_BYTES", 0)
    pairs = align(Run.open(a), Run.open(b))
    assert parallel_mod.parallel_kind(pairs, 2) == "processes"
    done = list(compare_pairs(pairs, Tolerance(), 2))
    assert [p.status for p in done] == ["equal", "differ"]
    assert all(p.digests is not None for p in done)


# ---------------------------------------------------------------------------------------
# The first divergent launch


def test_one_kernel_changed_at_one_launch_is_found(tmp_path: Path, capsys) -> None:
    prog = Program(rounds=6)
    # Launch 14 is round 4's vecAdd (c = a + b): its output, arg 2 after.
    a = write_run(tmp_path / "a", prog.lines())
    b = write_run(tmp_path / "b", prog.lines(change=(14, 2, "after")))
    result = diff_runs(Run.open(a), Run.open(b))
    first = result.first_divergent_launch
    assert first is not None
    r = first.snapshot.record
    assert (r.launch, r.kernel, r.occurrence, r.arg, r.phase) == (14, ADD, 7, 2, "after")
    assert first.matched == 13 and (first.process, first.processes) == (1, 1)
    assert result.first_divergent is first.pair
    line = ("first divergent: launch 14 of vecAdd(float const*, float const*, float*, int) "
            "(occurrence 7), arg 2 after; 13 launches matched before it")
    assert divergent_line(first) == line

    code, out, _ = run_cli(DiffCommand(), [str(a), str(b), "-j", "1"], capsys)
    assert code == 1
    assert line in out.splitlines()
    assert "digest differs: A " in out
    assert "96 pairs compared, 1 differ" in out


def test_the_first_differing_pair_of_a_launch_is_named(tmp_path: Path) -> None:
    """Two pairs of a launch differ: the one that comes first (before ahead of after)."""
    prog = Program(rounds=3)
    a = write_run(tmp_path / "a", prog.lines())
    lines = prog.lines(change=(6, 2, "after"))
    changed = prog.lines(change=(6, 1, "before"))
    b = write_run(tmp_path / "b", [x if x["launch"] != 6 or x["arg"] != 1 else y
                                   for x, y in zip(lines, changed, strict=True)])
    first = diff_runs(Run.open(a), Run.open(b)).first_divergent_launch
    assert first is not None
    r = first.snapshot.record
    assert (r.launch, r.arg, r.phase, first.matched) == (6, 1, "before", 5)


def test_processes_in_the_order_they_first_appear(tmp_path: Path, capsys) -> None:
    """Process 2 of 2 diverges; process 1 has the higher pid but appears first."""
    prog = Program(rounds=2)
    a = write_run(tmp_path / "a", prog.lines(pid=900) + prog.lines(pid=300))
    b = write_run(tmp_path / "b", prog.lines(pid=70) + prog.lines(pid=40,
                                                                  change=(3, 0, "after")))
    result = diff_runs(Run.open(a), Run.open(b))
    first = result.first_divergent_launch
    assert first is not None
    assert (first.process, first.processes, first.matched) == (2, 2, 8 + 2)
    assert first.snapshot.record.pid == 300
    assert "scale (occurrence 1, process 2 of 2 (pid 300)), arg 0 after; 10 launches matched" \
        in divergent_line(first)
    assert [p.status for p in result.pairs].count("differ") == 1


def test_launches_seen_on_one_side_only_are_not_counted_as_matched(tmp_path: Path) -> None:
    prog = Program(rounds=2)
    lines = prog.lines()
    b_lines = [x for x in lines if x["launch"] != 2]      # B lacks launch 2
    b_lines = [dict(x, digest="0" * 16) if x["launch"] == 6 and x["phase"] == "after"
               and x["arg"] == 0 else x for x in b_lines]
    result = diff_runs(Run.open(write_run(tmp_path / "a", lines)),
                       Run.open(write_run(tmp_path / "b", b_lines)))
    first = result.first_divergent_launch
    assert first is not None and first.snapshot.record.launch == 6
    assert first.matched == 4            # launches 1, 3, 4 and 5


def test_graph_nodes_are_launches_of_their_own(tmp_path: Path) -> None:
    x = np.arange(8, dtype=np.float32)
    lines = [record(ADD, 5, n + 1, 0, "after", x + n, graph=1, replay=1, node=n)
             for n in range(3)]
    b_lines = [dict(line) for line in lines]
    b_lines[2] = record(ADD, 5, 3, 0, "after", x + 9, graph=1, replay=1, node=2)
    result = diff_runs(Run.open(write_run(tmp_path / "a", lines)),
                       Run.open(write_run(tmp_path / "b", b_lines)))
    first = result.first_divergent_launch
    assert first is not None and first.matched == 2
    assert divergent_line(first).startswith(
        "first divergent: launch 5 (graph 1 replay 1 node 2) of vecAdd(")


def test_equal_runs_name_no_launch(tmp_path: Path, capsys) -> None:
    prog = Program(rounds=2)
    a = write_run(tmp_path / "a", prog.lines())
    b = write_run(tmp_path / "b", prog.lines(pid=5))
    code, out, _ = run_cli(DiffCommand(), [str(a), str(b)], capsys)
    assert code == 0 and "first divergent" not in out
    assert "digest " in out                     # pairs say they compared by digest


# ---------------------------------------------------------------------------------------
# Reports


def test_html_report_of_digest_runs(tmp_path: Path) -> None:
    prog = Program(rounds=2)
    a = write_run(tmp_path / "a", prog.lines())
    b = write_run(tmp_path / "b", prog.lines(change=(3, 0, "after")))
    result = diff_runs(Run.open(a), Run.open(b))
    page = HtmlReport(tmp_path / "html", result, "a", "b", Tolerance()).write().read_text()
    assert "digest only: no image" in page and "<img" not in page
    assert "digest differs" in page
    assert "first divergent: launch 3 of scale (occurrence 1), arg 0 after; 2 launches " \
        "matched before it" in page
    assert not any((tmp_path / "html" / "img").iterdir())


def test_ls_shows_digests(tmp_path: Path, capsys) -> None:
    x = np.arange(4, dtype=np.uint8)
    a = write_run(tmp_path / "a", [record(ADD, 1, 1, 0, "after", x)])
    code, out, _ = run_cli(LsCommand(), [str(a)], capsys)
    assert code == 0
    assert f"digest {digest_hex(digest(x))}" in out and "unreadable" not in out


# ---------------------------------------------------------------------------------------
# Sums of |x| beside digests: a tolerance tells digests that differ apart


def summed(kernel: str, launch: int, data: np.ndarray, **extra) -> dict:
    """A digest record of float32 `data` with its sum of |x|, as a run with types writes."""
    fields = {"sum_of": "float32", "abs_sum": abs_sum(data, ToolMode.SCAN_F32)} | extra
    return record(kernel, launch, launch, 0, "after", data, **fields)


def test_sums_tell_rounding_from_a_difference(tmp_path: Path, capsys) -> None:
    data = RNG.random(1000).astype(np.float32) + 1
    rounded = data * np.float32(1 + 1e-6)
    changed = data.copy()
    changed[500] += 100
    a = write_run(tmp_path / "a", [summed(ADD, 1, data), summed(ADD, 2, data)])
    b = write_run(tmp_path / "b", [summed(ADD, 1, rounded), summed(ADD, 2, changed)])
    exact = diff_runs(Run.open(a), Run.open(b))
    assert [p.status for p in exact.pairs] == ["differ", "differ"]   # digests are exact
    assert all(p.sums is None for p in exact.pairs)
    tolerant = diff_runs(Run.open(a), Run.open(b), Tolerance(rtol=1e-4))
    close, beyond = tolerant.pairs
    assert close.status == "close" and beyond.status == "differ"
    assert close.sums is not None and beyond.sums is not None
    assert beyond.sums[1] - beyond.sums[0] == pytest.approx(100, rel=1e-4)
    code, out, _ = run_cli(DiffCommand(), ["--rtol", "1e-4", str(a), str(b)], capsys)
    assert code == 1
    assert "1 differ, 1 close (digests differ, sums of |x| within the tolerance)" in out
    assert "sum of |x| differs beyond the tolerance: A " in out
    # Records without sums (a digest of bytes) stay exact under any tolerance.
    plain = write_run(tmp_path / "plain", [record(ADD, 1, 1, 0, "after", rounded)])
    assert diff_runs(Run.open(a), Run.open(plain), Tolerance(rtol=1)).pairs[0].status == \
        "differ"


@pytest.mark.parametrize("field,value,words", [
    ("abs_sum", -1, ["'abs_sum'", "a number >= 0"]),
    ("abs_sum", "lots", ["'abs_sum'", "'lots'"]),
    ("sum_of", "int8", ["'sum_of'", "float32"]),
])
def test_malformed_sums_are_trouble(tmp_path: Path, capsys, field: str, value: object,
                                    words: list[str]) -> None:
    x = np.ones(4, np.float32)
    a = write_run(tmp_path / "a", [summed(ADD, 1, x)])
    b = write_run(tmp_path / "b", [summed(ADD, 1, x, **{field: value})])
    code, _, err = run_cli(DiffCommand(), ["--rtol", "1e-3", str(a), str(b)], capsys)
    assert code == 2 and err.startswith("cudump: error:") and "Traceback" not in err
    for word in words:
        assert word in err, err


def test_nonfinite_sums_are_written_as_words_and_read_back(tmp_path: Path) -> None:
    nan = np.array([1, np.nan], np.float32)
    inf = np.array([1, np.inf], np.float32)
    a = write_run(tmp_path / "a", [summed(ADD, 1, nan, abs_sum="nan"),
                                   summed(ADD, 2, inf, abs_sum="inf")])
    b = write_run(tmp_path / "b", [summed(ADD, 1, nan * 2, abs_sum="nan"),
                                   summed(ADD, 2, inf * 2, abs_sum=3.0)])
    digests = [s.digest for s in Run.open(a).snapshots]
    assert [d.abs_sum for d in digests if d is not None][1] == float("inf")
    statuses = [p.status for p in diff_runs(Run.open(a), Run.open(b), Tolerance(rtol=1)).pairs]
    assert statuses == ["close", "differ"]   # NaN with NaN may be close; Inf with 3 is not


def test_help_says_what_tolerances_do_to_digests(tmp_path: Path, capsys) -> None:
    """`diff --help` states that --atol/--rtol apply to digests carrying sums; they do."""
    parser = argparse.ArgumentParser(prog="cudump diff")
    DiffCommand().prepare_parser(parser)
    text = " ".join(parser.format_help().split())
    assert "do not apply" not in text
    assert 'with them, records that carry a sum of |x|' in text
    assert '"close" (counted as matching) when the two sums are within the tolerance' in text
    data = RNG.random(100).astype(np.float32) + 1
    a = write_run(tmp_path / "a", [summed(ADD, 1, data)])
    b = write_run(tmp_path / "b", [summed(ADD, 1, data * np.float32(1 + 1e-6))])
    assert run_cli(DiffCommand(), [str(a), str(b)], capsys)[0] == 1
    assert run_cli(DiffCommand(), ["--rtol", "1e-4", str(a), str(b)], capsys)[0] == 0
