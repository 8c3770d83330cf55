"""Offline diffing: metrics checked against an independent computation, tolerances,
exit statuses, and the alignment of two runs."""

from __future__ import annotations

import math
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from clirun import run_cli as run_command
from PIL import Image

import cudump.analysis.diff.arrays as arrays_mod
import cudump.analysis.diff.parallel as parallel_mod
from cudump.analysis.diff.align import align
from cudump.analysis.diff.arrays import compare_arrays
from cudump.analysis.diff.metrics import Tolerance, channel_count
from cudump.analysis.diff.runs import diff_runs
from cudump.commands.diff import DiffCommand
from cudump.errors import DiffTrouble
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord
from cudump.rundir.runs import Run

RNG = np.random.default_rng(1234)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """`cudump diff ...` as cli.main runs it, without needing the other subcommands."""
    return run_command(DiffCommand(), argv, capsys)


def expected_metrics(a: np.ndarray, b: np.ndarray, atol: float = 0.0, rtol: float = 0.0):
    """The metrics as the documentation defines them, computed the plain way."""
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    close = np.isclose(fa, fb, atol=atol, rtol=rtol, equal_nan=True)
    with np.errstate(invalid="ignore"):
        d = np.abs(fa - fb)
    finite = np.isfinite(d)
    mse = float(np.mean(d[finite] ** 2)) if finite.any() else 0.0
    if a.dtype.kind in "ui":
        peak = float(np.iinfo(a.dtype).max)
    else:
        fin = fa[np.isfinite(fa)]
        peak = float(fin.max() - fin.min())
    psnr = math.inf if mse == 0 else 10 * math.log10(peak**2 / mse)
    dd = np.where(finite, d, -1)
    return {
        "differing": int((~close).sum()),
        "per_channel": [int((~close[..., c]).sum()) for c in range(a.shape[-1])],
        "pixels": int((~close).any(axis=-1).sum()),
        "max": float(dd.max()),
        "where": tuple(int(i) for i in np.unravel_index(np.argmax(dd), a.shape)),
        "mean": float(d[finite].mean()),
        "rmse": math.sqrt(mse),
        "psnr": psnr,
    }


def test_uint8_image_metrics_match_an_independent_computation() -> None:
    a = RNG.integers(0, 256, (37, 53, 4), dtype=np.uint8)
    b = a.copy()
    b[3:9, 10:20, 1] = RNG.integers(0, 256, (6, 10), dtype=np.uint8)
    b[30, 50, 3] = 255 - a[30, 50, 3]
    m = compare_arrays(a, b)
    e = expected_metrics(a, b)
    assert m.differing == e["differing"] > 0
    assert m.channel_differing == e["per_channel"]
    assert m.pixels_differing == e["pixels"]
    assert m.max_abs == e["max"]
    assert m.max_index == e["where"]
    assert m.a_at_max == float(a[m.max_index]) and m.b_at_max == float(b[m.max_index])
    assert m.mean_abs == pytest.approx(e["mean"], rel=1e-12)
    assert m.rmse == pytest.approx(e["rmse"], rel=1e-12)
    assert m.psnr == pytest.approx(e["psnr"], rel=1e-12)
    assert m.share == pytest.approx(e["differing"] / a.size)
    assert not m.equal


@pytest.mark.parametrize("dtype", [np.uint16, np.int16, np.int32, np.float32, np.float64])
def test_other_dtypes_match_an_independent_computation(dtype) -> None:
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "ui" else None
    lo, hi = (info.min // 2, info.max // 2) if info else (-100, 100)
    a = RNG.uniform(lo, hi, (41, 29, 3)).astype(dtype)
    b = a.copy()
    b[::5, ::3] = RNG.uniform(lo, hi, b[::5, ::3].shape).astype(dtype)
    m = compare_arrays(a, b)
    e = expected_metrics(a, b)
    assert m.differing == e["differing"] > 0
    assert m.channel_differing == e["per_channel"]
    assert m.max_abs == pytest.approx(e["max"])
    assert m.max_index == e["where"]
    assert m.mean_abs == pytest.approx(e["mean"], rel=1e-9)
    assert m.rmse == pytest.approx(e["rmse"], rel=1e-9)
    assert m.psnr == pytest.approx(e["psnr"], rel=1e-9)


def test_metrics_are_the_same_across_chunk_boundaries(monkeypatch) -> None:
    a = RNG.integers(0, 256, (64, 64, 4), dtype=np.uint8)
    b = a.copy()
    b[RNG.random(a.shape) < 0.01] ^= 0x5A
    whole = compare_arrays(a, b)
    monkeypatch.setattr(arrays_mod, "CHUNK_ELEMENTS", 100)    # many small chunks
    chunked = compare_arrays(a, b)
    assert chunked == whole
    assert chunked.differing == expected_metrics(a, b)["differing"]


# Integers of up to 16 bits take a path of their own (exact integer sums, widened only where
# they must be, halves added in place, all-different chunks counted without a mask): these
# check it against exact integer arithmetic, across chunk sizes, at the types' extremes.

def exact_integer_metrics(a: np.ndarray, b: np.ndarray, atol: float = 0.0,
                          rtol: float = 0.0) -> dict:
    d = np.abs(a.astype(np.int64) - b.astype(np.int64))
    close = d <= atol + rtol * np.abs(b.astype(np.float64))
    s1, s2 = int(d.sum()), int((d * d).sum())
    n = a.size
    out = {
        "differing": int((~close).sum()),
        "max_abs": float(d.max()),
        "max_index": (tuple(int(i) for i in np.unravel_index(np.argmax(d), a.shape))
                      if d.max() > 0 else None),
        "mean_abs": s1 / n,
        "rmse": math.sqrt(s2 / n),
    }
    if channel_count(a.shape) > 1:
        out["channel_differing"] = [int((~close[..., c]).sum()) for c in range(a.shape[-1])]
        out["pixels_differing"] = int((~close).any(axis=-1).sum())
    return out


def assert_exact(a: np.ndarray, b: np.ndarray, atol: float = 0.0, rtol: float = 0.0):
    m = compare_arrays(a, b, Tolerance(atol, rtol))
    for key, value in exact_integer_metrics(a, b, atol, rtol).items():
        assert getattr(m, key) == value, (key, a.dtype, atol, rtol)
    return m


CHUNKS = [1 << 20, 1 << 14, 96]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_uint8_every_element_differs(monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(arrays_mod, "CHUNK_ELEMENTS", chunk)
    a = RNG.integers(0, 256, (120, 160, 4), dtype=np.uint8)
    small = a ^ RNG.integers(1, 4, a.shape, dtype=np.uint8)        # |a - b| up to 3
    m = assert_exact(a, small)
    assert m.differing == a.size and m.pixels_differing == a.size // 4
    assert m.channel_differing == [a.size // 4] * 4
    large = (a.astype(np.int16) + RNG.integers(1, 256, a.shape)) % 256  # never equal
    assert_exact(a, large.astype(np.uint8))
    assert_exact(a, RNG.integers(0, 256, a.shape, dtype=np.uint8))     # some equal
    assert_exact(np.zeros_like(a), np.full_like(a, 255))               # the extremes


@pytest.mark.parametrize("chunk", CHUNKS)
def test_differences_of_one_and_two(monkeypatch, chunk: int) -> None:
    """|a - b| of at most 2 is summed without squaring: d^2 = 3d - 2 where d > 0."""
    monkeypatch.setattr(arrays_mod, "CHUNK_ELEMENTS", chunk)
    a = RNG.integers(0, 254, (90, 70, 4), dtype=np.uint8)
    m = assert_exact(a, a + 1)
    assert m.mean_abs == 1 and m.rmse == 1 and m.differing == a.size
    b = a.copy()
    b[RNG.random(a.shape) < 0.3] += 1
    assert_exact(a, b)
    assert_exact(a, b, atol=1)                # within tolerance: equal, metrics kept
    assert compare_arrays(a, b, Tolerance(1)).equal
    two = a + RNG.integers(0, 3, a.shape, dtype=np.uint8)     # 0, 1 or 2, some zeros
    assert_exact(a, two)
    assert_exact(two, a, atol=1)
    m = assert_exact(a, a + RNG.integers(1, 3, a.shape, dtype=np.uint8))   # 1 or 2, none 0
    assert m.differing == a.size
    assert_exact(a.view(np.int8), (a + 2).view(np.int8))      # wraps past 127: not 2 apart


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_small_integers_at_their_extremes(monkeypatch, chunk: int, dtype) -> None:
    monkeypatch.setattr(arrays_mod, "CHUNK_ELEMENTS", chunk)
    info = np.iinfo(dtype)
    shape = (50, 40, 3)
    a = np.where(RNG.random(shape) < 0.5, info.min, info.max).astype(dtype)
    b = np.where(RNG.random(shape) < 0.5, info.min, info.max).astype(dtype)
    m = assert_exact(a, b)
    assert m.max_abs == info.max - info.min
    assert_exact(a, RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True))
    c = a.copy()
    c[::7] = RNG.integers(info.min, info.max, c[::7].shape, dtype=dtype, endpoint=True)
    for atol, rtol in [(0, 0), (3.5, 0), (0, 0.25), (2, 0.01), (info.max - info.min, 0)]:
        assert_exact(a, c, atol, rtol)


def test_bool_arrays() -> None:
    a = RNG.random((33, 17, 2)) < 0.5
    b = a.copy()
    b[RNG.random(a.shape) < 0.2] ^= True
    m = compare_arrays(a, b)
    e = exact_integer_metrics(a.astype(np.uint8), b.astype(np.uint8))
    assert {k: getattr(m, k) for k in e} == e
    assert m.peak == 1.0 and m.mean_abs == pytest.approx(m.rmse ** 2)
    assert compare_arrays(a, ~a).mean_abs == 1


def test_int64_extremes_are_compared_in_float64() -> None:
    big = np.iinfo(np.int64)
    a = np.array([[big.max, 0, big.min], [5, big.max, 1]], dtype=np.int64)
    b = np.array([[big.min, 0, big.max], [5, big.max - 1, 1]], dtype=np.int64)
    m = compare_arrays(a, b)
    assert m.differing == 2                  # max vs max - 1: equal in float64 (documented)
    assert m.max_abs == float(2**64) and m.max_index == (0, 0)   # float64, not wrapped
    assert m.nonfinite_mismatch == 0
    e = expected_metrics(a, b)
    assert m.mean_abs == pytest.approx(e["mean"]) and m.rmse == pytest.approx(e["rmse"])
    u = np.array([0, np.iinfo(np.uint64).max], dtype=np.uint64)
    assert compare_arrays(u, u[::-1]).max_abs == float(2**64)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_narrow_floats_match_an_independent_computation(dtype) -> None:
    a = (RNG.standard_normal((60, 50, 4)) * 100).astype(dtype)
    b = a.copy()
    b[RNG.random(a.shape) < 0.4] += dtype(1.5)
    m = compare_arrays(a, b)
    e = expected_metrics(a, b)
    assert m.differing == e["differing"] > 0
    assert m.channel_differing == e["per_channel"] and m.pixels_differing == e["pixels"]
    assert m.max_abs == e["max"] and m.max_index == e["where"]
    assert m.mean_abs == pytest.approx(e["mean"], rel=1e-12)
    assert m.rmse == pytest.approx(e["rmse"], rel=1e-12)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_nan_and_inf_in_identical_stretches_are_left_out_of_the_means(monkeypatch,
                                                                        chunk: int) -> None:
    """NaN against NaN is equal but has no finite |a - b|, wherever it lies: chunks whose
    bytes are identical (skipped without a comparison) count it too."""
    monkeypatch.setattr(arrays_mod, "CHUNK_ELEMENTS", chunk)
    a = RNG.standard_normal((200, 100)).astype(np.float32)
    a[:50:3, ::7] = np.nan
    a[10:20, 5] = np.inf
    b = a.copy()
    b[150:, :] += 1                            # differences only far from the NaNs
    b[190, 3] = -np.inf                        # and one disagreeing infinity
    m = compare_arrays(a, b)
    e = expected_metrics(a, b)
    assert m.differing == e["differing"] and m.nonfinite_mismatch == 1
    assert m.mean_abs == pytest.approx(e["mean"], rel=1e-6)
    assert m.rmse == pytest.approx(e["rmse"], rel=1e-6)


def test_rows_of_partly_different_chunks_count_channels_and_pixels(monkeypatch) -> None:
    monkeypatch.setattr(arrays_mod, "CHUNK_ELEMENTS", 1 << 14)
    for channels in (2, 3, 4):
        a = RNG.integers(0, 256, (70, 90, channels), dtype=np.uint8)
        b = a.copy()
        b[RNG.random(a.shape) < 0.5] ^= 0x40
        b[:5] = a[:5] ^ 0xFF                   # a stretch where every element differs
        m = assert_exact(a, b)
        assert len(m.channel_differing) == channels


def test_pairs_compared_in_worker_processes_as_in_this_one(tmp_path: Path,
                                                           monkeypatch) -> None:
    imgs = [RNG.integers(0, 200, (30, 40, 4), dtype=np.uint8) for _ in range(6)]
    changed = [x.copy() for x in imgs]
    changed[2][1, 1, 0] += 9
    changed[4] ^= 1
    a = write_run(tmp_path / "a", launches(imgs))
    b = write_run(tmp_path / "b", launches(changed[:5]))
    here = diff_runs(Run.open(a), Run.open(b), jobs=1)
    monkeypatch.setattr(parallel_mod, "PROCESS_MIN_BYTES", 0)
    pairs = align(Run.open(a), Run.open(b))
    if threading.active_count() == 1 and sys.platform == "linux":
        assert parallel_mod.parallel_kind(pairs, 2) == "processes"
    there = diff_runs(Run.open(a), Run.open(b), jobs=2)
    assert [(p.key, p.status, p.metrics, p.reason) for p in there.pairs] == \
        [(p.key, p.status, p.metrics, p.reason) for p in here.pairs]
    assert there.exit_code == 1 and len(there.only_a) == 2
    assert parallel_mod.parallel_kind(pairs, 1) == "serial"
    monkeypatch.setattr(parallel_mod, "PROCESS_MIN_BYTES", 1 << 60)
    assert parallel_mod.parallel_kind(pairs, 2) == "threads"


def test_worker_processes_stop_early_or_give_way_to_threads(tmp_path: Path,
                                                             monkeypatch) -> None:
    imgs = [RNG.integers(0, 200, (16, 16, 4), dtype=np.uint8) for _ in range(20)]
    a = write_run(tmp_path / "a", launches(imgs))
    b = write_run(tmp_path / "b", launches([x ^ 1 for x in imgs]))
    monkeypatch.setattr(parallel_mod, "PROCESS_MIN_BYTES", 0)
    pairs = align(Run.open(a), Run.open(b))
    results = parallel_mod.compare_pairs(pairs, Tolerance(), jobs=2)
    assert next(results).status == "differ"
    results.close()                          # a reader that stops: the rest is dropped

    class NoFork(parallel_mod.ProcessPoolExecutor):
        def map(self, *args, **kwargs):
            raise OSError("fork: Resource temporarily unavailable")

    monkeypatch.setattr(parallel_mod, "ProcessPoolExecutor", NoFork)
    pairs = align(Run.open(a), Run.open(b))
    assert [p.status for p in parallel_mod.compare_pairs(pairs, Tolerance(), jobs=2)] == \
        ["differ"] * 40


def test_identical_inputs_are_equal_with_infinite_psnr() -> None:
    a = RNG.standard_normal((10, 10)).astype(np.float32)
    m = compare_arrays(a, a.copy())
    assert m.equal and m.differing == 0
    assert m.psnr == math.inf and m.rmse == 0 and m.max_index is None


def test_nan_against_nan_is_equal_nan_against_number_differs() -> None:
    a = np.array([[1.0, np.nan, np.inf, 4.0], [np.nan, 2.0, -np.inf, 0.0]], dtype=np.float32)
    b = np.array([[1.0, np.nan, np.inf, 4.5], [3.0, 2.0, np.inf, 0.0]], dtype=np.float32)
    m = compare_arrays(a, b)
    assert m.differing == 3              # 4 vs 4.5, NaN vs 3, -inf vs inf
    assert m.nonfinite_mismatch == 2
    assert m.max_abs == 0.5              # over finite differences only
    assert m.max_index == (0, 3)
    assert m.differing == expected_metrics(a, b)["differing"]
    assert compare_arrays(a, a.copy()).equal


@pytest.mark.parametrize(
    ("atol", "rtol", "differing"),
    [
        (3.0, 0.0, 0),       # |a-b| == atol: equal (<=)
        (2.999, 0.0, 1),
        (0.0, 0.03, 0),      # rtol * |b| = 3
        (0.0, 0.0299, 1),
        (1.0, 0.02, 0),      # 1 + 0.02 * 100 = 3
        (0.99, 0.02, 1),
    ],
)
def test_tolerance_boundaries(atol: float, rtol: float, differing: int) -> None:
    for dtype in (np.uint8, np.float64):
        a = np.array([[[97, 0], [5, 5]]], dtype=dtype)
        b = np.array([[[100, 0], [5, 5]]], dtype=dtype)
        m = compare_arrays(a, b, Tolerance(atol, rtol))
        assert m.differing == differing, dtype
        assert m.differing == expected_metrics(a, b, atol, rtol)["differing"]
        assert m.max_abs == 3          # metrics do not depend on the tolerance


def test_mismatched_shapes_and_dtypes_are_trouble() -> None:
    with pytest.raises(DiffTrouble) as shape_err:
        compare_arrays(np.zeros((4, 4)), np.zeros((4, 5)))
    assert shape_err.value.exit_code == 2 and "shape" in str(shape_err.value)
    with pytest.raises(DiffTrouble, match="dtype"):
        compare_arrays(np.zeros(4, np.uint8), np.zeros(4, np.uint16))


# ---------------------------------------------------------------------------------------
# The command on two files


def test_cli_files_exit_status_and_report(tmp_path: Path, capsys) -> None:
    a = RNG.integers(0, 256, (20, 30, 4), dtype=np.uint8)
    b = a.copy()
    b[5, 7, 2] = a[5, 7, 2] ^ 0xFF
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "same.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "small.npy", a[:10])

    code, out, _ = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "same.npy")], capsys)
    assert code == 0 and "differing elements: 0 of" in out

    code, out, _ = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "b.npy"),
                            "--out", str(tmp_path / "o")], capsys)
    assert code == 1
    assert "differing elements: 1 of 2,400" in out
    assert "at (5,7,2)" in out
    heat = np.array(Image.open(tmp_path / "o" / "heatmap.png"))
    assert heat.shape == (20, 30, 3)
    assert set(zip(*np.nonzero(heat.sum(axis=2)), strict=True)) == {(5, 7)}
    assert (tmp_path / "o" / "side_by_side.png").is_file()

    code, _, err = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "small.npy")], capsys)
    assert code == 2 and err.startswith("cudump: error:") and "shapes differ" in err
    assert len(err.strip().splitlines()) == 1

    code, _, err = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "nope.npy")], capsys)
    assert code == 2


def test_cli_png_against_npy(tmp_path: Path, capsys) -> None:
    a = RNG.integers(0, 256, (12, 16, 3), dtype=np.uint8)
    Image.fromarray(a).save(tmp_path / "a.png")
    np.save(tmp_path / "a.npy", a)
    code, _, _ = run_cli([str(tmp_path / "a.png"), str(tmp_path / "a.npy")], capsys)
    assert code == 0
    b = a.copy()
    b[0, 0] += 1
    np.save(tmp_path / "b.npy", b)
    code, out, _ = run_cli([str(tmp_path / "a.png"), str(tmp_path / "b.npy"), "--atol", "1"],
                           capsys)
    assert code == 0 and "atol 1" in out


# ---------------------------------------------------------------------------------------
# Runs

KERNEL = "cam::paint<(sl::YUV_CONVENTION)2>(uchar4*, int)"


def write_run(root: Path, snaps: list[dict]) -> Path:
    """A run directory holding the given snapshots (dicts: kernel, launch, occ, arg, phase,
    data or error)."""
    root.mkdir(parents=True)
    writer = ManifestWriter(root)
    for n, s in enumerate(snaps):
        data = s.get("data")
        name = f"s{n:03d}.npy" if data is not None else None
        if data is not None:
            np.save(root / name, data)
        writer.append(SnapshotRecord(
            kernel=s.get("kernel", KERNEL), mangled="_Z5paint", launch=s["launch"],
            occurrence=s.get("occ", 1), pid=s.get("pid", 100), grid=[4, 4, 1], block=[16, 16, 1],
            stream="0x0", arg=s.get("arg", 0), type="uchar4*", phase=s["phase"],
            address="0x7f0000000000", dtype=None if data is None else str(data.dtype),
            shape=None if data is None else list(data.shape), file=name,
            status="ok" if data is not None else "error", reason=s.get("reason")))
    writer.close()
    return root


def launches(images: list[np.ndarray], kernel: str = KERNEL) -> list[dict]:
    out = []
    for i, img in enumerate(images, 1):
        out.append({"kernel": kernel, "launch": i, "occ": i, "phase": "before", "data": img})
        out.append({"kernel": kernel, "launch": i, "occ": i, "phase": "after", "data": img + 1})
    return out


def test_runs_align_with_missing_and_extra_snapshots(tmp_path: Path, capsys) -> None:
    imgs = [RNG.integers(0, 200, (8, 10, 4), dtype=np.uint8) for _ in range(4)]
    changed = [x.copy() for x in imgs]
    changed[2][1, 1, 0] += 9                         # launch 3 diverges (both phases)
    snaps_a = launches(imgs[:4])
    snaps_b = launches(changed[:3])                  # B lacks launch 4
    snaps_b.append({"kernel": "extra(float*)", "launch": 9, "phase": "after",
                    "data": np.zeros(5, np.float32)})
    a = write_run(tmp_path / "a", snaps_a)
    b = write_run(tmp_path / "b", snaps_b)

    result = diff_runs(Run.open(a), Run.open(b), jobs=2)
    statuses = [(p.key[1], p.key[3], p.status) for p in result.pairs]
    assert statuses[:6] == [(1, "before", "equal"), (1, "after", "equal"),
                            (2, "before", "equal"), (2, "after", "equal"),
                            (3, "before", "differ"), (3, "after", "differ")]
    assert {(p.key[1], p.key[3]) for p in result.only_a} == {(4, "before"), (4, "after")}
    assert [p.key[0] for p in result.only_b] == ["extra(float*)"]
    first = result.first_divergent
    assert first is not None and first.key[1] == 3 and first.key[3] == "before"
    assert first.metrics is not None and first.metrics.max_index == (1, 1, 0)
    assert result.exit_code == 1

    code, out, _ = run_cli([str(a), str(b)], capsys)
    assert code == 1
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("launch"))
    rows = [line for line in lines if "cam::paint" in line and line.lstrip()[0].isdigit()]
    assert len(rows) == 8
    # Columns line up: every row puts the status word at the header's "status" column.
    at = header.index("status")
    assert all(r[at:at + 6].strip() in ("same", "DIFF", "only A") for r in rows)
    assert "first divergent: launch 3" in out
    assert "only in A (2)" in out and "only in B (1)" in out


def test_kernel_pattern_narrows_and_identical_runs_exit_zero(tmp_path: Path, capsys) -> None:
    imgs = [RNG.integers(0, 200, (6, 6, 4), dtype=np.uint8) for _ in range(2)]
    other = [{"kernel": "blur(float*)", "launch": 10, "phase": "after",
              "data": np.ones((3, 3), np.float32)}]
    a = write_run(tmp_path / "a", launches(imgs) + other)
    b_other = [dict(other[0], data=np.full((3, 3), 2, np.float32))]
    b = write_run(tmp_path / "b", launches(imgs) + b_other)
    assert run_cli([str(a), str(b)], capsys)[0] == 1
    code, out, _ = run_cli([str(a), str(b), "--kernel", "cam::paint*"], capsys)
    assert code == 0 and "blur" not in out
    assert len(align(Run.open(a), Run.open(b), "blur")) == 1
    code, _, err = run_cli([str(a), str(b), "--kernel", "nothing*"], capsys)
    assert code == 2 and "no snapshots" in err


def test_shape_change_in_a_run_is_a_difference_failed_snapshot_is_trouble(
    tmp_path: Path, capsys
) -> None:
    img = RNG.integers(0, 200, (6, 6, 4), dtype=np.uint8)
    a = write_run(tmp_path / "a", [{"launch": 1, "phase": "after", "data": img}])
    b = write_run(tmp_path / "b", [{"launch": 1, "phase": "after", "data": img[:3]}])
    result = diff_runs(Run.open(a), Run.open(b))
    assert result.pairs[0].status == "mismatch" and result.exit_code == 1
    c = write_run(tmp_path / "c", [{"launch": 1, "phase": "after", "data": None,
                                    "reason": "copy failed"}])
    code, out, err = run_cli([str(a), str(c)], capsys)
    assert code == 2 and "could not be compared" in err and "copy failed" in err
    assert "ERROR" in out


def test_duplicate_keys_from_several_processes_pair_in_order(tmp_path: Path) -> None:
    x = np.zeros((4, 4), np.uint8)
    a = write_run(tmp_path / "a", [{"launch": 1, "phase": "after", "pid": 1, "data": x},
                                   {"launch": 1, "phase": "after", "pid": 2, "data": x + 1}])
    b = write_run(tmp_path / "b", [{"launch": 1, "phase": "after", "pid": 7, "data": x},
                                   {"launch": 1, "phase": "after", "pid": 8, "data": x + 1}])
    result = diff_runs(Run.open(a), Run.open(b))
    assert [p.status for p in result.pairs] == ["equal", "equal"]


# ---------------------------------------------------------------------------------------
# Bad input: one line on stderr, exit status 2 ("trouble"), never a traceback


def one_line_trouble(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.startswith("cudump: error:") and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0, 4)])
def test_zero_length_arrays_are_equal(tmp_path: Path, capsys, shape) -> None:
    np.save(tmp_path / "a.npy", np.zeros(shape, np.uint8))
    np.save(tmp_path / "b.npy", np.zeros(shape, np.uint8))
    code, out, err = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "b.npy")], capsys)
    assert code == 0 and err == ""
    assert "differing elements: 0 of 0 (0%)" in out and "equal within tolerance" in out


def test_empty_arrays_with_out_are_trouble_before_anything_is_written(tmp_path: Path,
                                                                      capsys) -> None:
    np.save(tmp_path / "a.npy", np.zeros((0, 4), np.uint8))
    code, out, err = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "a.npy"), "--out",
                              str(tmp_path / "o")], capsys)
    one_line_trouble(code, err, "--out cannot draw", "empty")
    assert out == "" and not (tmp_path / "o" / "heatmap.png").exists()


def test_five_channels_with_out_suggests_what_exists(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "a.npy", np.zeros((4, 4, 5), np.float32))
    code, _, err = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "a.npy"), "--out",
                            str(tmp_path / "o")], capsys)
    one_line_trouble(code, err, "5 channels", "cudump show")
    assert "choose up to 4 with channels" not in err
    assert "--channels 0,1,2 --png" in err


@pytest.mark.parametrize("jobs", ["-1", "0"])
def test_jobs_below_one_are_trouble(tmp_path: Path, capsys, jobs) -> None:
    a = write_run(tmp_path / "a", launches([np.zeros((4, 4, 4), np.uint8)]))
    code, _, err = run_cli([str(a), str(a), "-j", jobs], capsys)
    one_line_trouble(code, err, "--jobs")


@pytest.mark.parametrize("option", ["--html", "--out"])
def test_output_that_is_a_regular_file_is_trouble(tmp_path: Path, capsys, option) -> None:
    target = tmp_path / "taken"
    target.write_text("keep me")
    if option == "--html":
        a = write_run(tmp_path / "a", launches([np.zeros((4, 4, 4), np.uint8)]))
        b = write_run(tmp_path / "b", launches([np.ones((4, 4, 4), np.uint8)]))
    else:
        np.save(tmp_path / "a.npy", np.zeros((4, 4), np.uint8))
        a = b = tmp_path / "a.npy"
    code, out, err = run_cli([str(a), str(b), option, str(target)], capsys)
    one_line_trouble(code, err, option, "not a directory")
    assert target.read_text() == "keep me"
    assert "pairs compared" not in out          # refused before comparing anything


def test_html_into_a_folder_with_a_report_is_refused(tmp_path: Path, capsys) -> None:
    a = write_run(tmp_path / "a", launches([np.zeros((4, 4, 4), np.uint8)]))
    b = write_run(tmp_path / "b", launches([np.ones((4, 4, 4), np.uint8)]))
    report = tmp_path / "report"
    code, out, err = run_cli([str(a), str(b), "--html", str(report)], capsys)
    assert code == 1 and f"report: {report / 'index.html'}" in out, err
    first = (report / "index.html").read_text()
    code, out, err = run_cli([str(b), str(b), "--html", str(report)], capsys)
    one_line_trouble(code, err, "--html", f"{report / 'index.html'} already exists")
    assert "pairs compared" not in out          # refused before comparing anything
    assert (report / "index.html").read_text() == first
    (report / "notes.txt").write_text("mine")
    (report / "index.html").unlink()            # a folder with other files is fine
    code, _, err = run_cli([str(b), str(b), "--html", str(report)], capsys)
    assert code == 0, err
    assert (report / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("option", ["--html", "--out"])
def test_output_directory_that_cannot_be_made_is_trouble(tmp_path: Path, capsys,
                                                         option) -> None:
    (tmp_path / "file").write_text("")
    inside_a_file = tmp_path / "file" / "sub"
    np.save(tmp_path / "a.npy", np.zeros((4, 4), np.uint8))
    a = write_run(tmp_path / "ra", launches([np.zeros((4, 4, 4), np.uint8)]))
    pair = [str(a), str(a)] if option == "--html" else [str(tmp_path / "a.npy")] * 2
    code, _, err = run_cli([*pair, option, str(inside_a_file)], capsys)
    one_line_trouble(code, err, option, "cannot make the directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
@pytest.mark.parametrize("option", ["--html", "--out"])
def test_unwritable_output_directory_is_trouble(tmp_path: Path, capsys, option) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        np.save(tmp_path / "a.npy", np.zeros((4, 4), np.uint8))
        a = write_run(tmp_path / "ra", launches([np.zeros((4, 4, 4), np.uint8)]))
        pair = [str(a), str(a)] if option == "--html" else [str(tmp_path / "a.npy")] * 2
        code, _, err = run_cli([*pair, option, str(locked / "out")], capsys)
        one_line_trouble(code, err, option)
    finally:
        locked.chmod(0o700)


def test_unwritable_output_directory_found_by_access_check(tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    """The same, where root would not be stopped: os.access says no."""
    import cudump.analysis.outputs as outputs

    monkeypatch.setattr(outputs.os, "access", lambda *_: False)
    np.save(tmp_path / "a.npy", np.zeros((4, 4), np.uint8))
    code, _, err = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "a.npy"), "--out",
                            str(tmp_path / "o")], capsys)
    one_line_trouble(code, err, "--out", "not writable")


@pytest.mark.parametrize("content", [b"hello, not numpy", b"", b"\x93NUMPY\x01\x00garbage",
                                     b"\x80\x04\x95\x05\x00\x00\x00\x00"])
def test_a_file_that_is_not_npy_says_so(tmp_path: Path, capsys, content: bytes) -> None:
    bad = tmp_path / "bad.npy"
    bad.write_bytes(content)
    np.save(tmp_path / "a.npy", np.zeros((4, 4), np.uint8))
    code, _, err = run_cli([str(tmp_path / "a.npy"), str(bad)], capsys)
    one_line_trouble(code, err, str(bad))
    assert "pickled" not in err and "allow_pickle" not in err
    assert "not a .npy file (or a corrupted one)" in err or "corrupted .npy file" in err


def test_a_truncated_npy_is_trouble(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "a.npy", np.zeros((100, 100), np.float32))
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:500])
    code, _, err = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "cut.npy")], capsys)
    one_line_trouble(code, err, "corrupted .npy file")


def test_npy_of_objects_is_not_unpickled(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "obj.npy", np.array([1, None], dtype=object), allow_pickle=True)
    np.save(tmp_path / "a.npy", np.zeros(2, np.int64))
    code, _, err = run_cli([str(tmp_path / "a.npy"), str(tmp_path / "obj.npy")], capsys)
    one_line_trouble(code, err, "Python objects")


def test_same_uncapturable_snapshot_on_both_sides_is_equal(tmp_path: Path, capsys) -> None:
    img = RNG.integers(0, 200, (6, 6, 4), dtype=np.uint8)
    why = "pointer 0x7f0000001000 is not in any tracked allocation"
    snaps = [{"launch": 1, "phase": "before", "data": img},
             {"launch": 1, "phase": "after", "data": None, "reason": why}]
    a = write_run(tmp_path / "a", snaps)
    b_snaps = [dict(snaps[0]), dict(snaps[1], reason=why.replace("1000", "2000"))]
    b = write_run(tmp_path / "b", b_snaps)      # the same failure, at another address
    result = diff_runs(Run.open(a), Run.open(b))
    assert [p.status for p in result.pairs] == ["equal", "uncaptured"]
    assert result.exit_code == 0 and not result.errors and result.first_divergent is None
    code, out, err = run_cli([str(a), str(b)], capsys)
    assert code == 0 and err == ""
    assert "not captured on either side (1):" in out
    assert "1 pairs compared, 0 differ, 0 could not be compared" in out
    assert "1 not captured on either side" in out


def test_different_failures_on_both_sides_are_still_trouble(tmp_path: Path, capsys) -> None:
    a = write_run(tmp_path / "a", [{"launch": 1, "phase": "after", "data": None,
                                    "reason": "copy failed"}])
    b = write_run(tmp_path / "b", [{"launch": 1, "phase": "after", "data": None,
                                    "reason": "the staging area is full"}])
    code, _, err = run_cli([str(a), str(b)], capsys)
    one_line_trouble(code, err, "could not be compared")


def test_run_kernel_pattern_allows_for_the_return_type(tmp_path: Path, capsys) -> None:
    zed = ("void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4*, int, device::uchar8*, "
           "device::uchar8*, int, int, int, float)")
    imgs = [np.zeros((4, 4, 4), np.uint8)]
    a = write_run(tmp_path / "a", launches(imgs, kernel=zed) + launches(imgs))
    for pattern in ("device::FrP0k5607tPV*", "FrP0k5607tPV", "*FrP0k*", "re:^device::"):
        assert len(align(Run.open(a), Run.open(a), pattern)) == 2, pattern
    assert align(Run.open(a), Run.open(a), "FrP0k") == []   # a word is a name, not a substring
    code, out, _ = run_cli([str(a), str(a), "--kernel", "device::FrP0k5607tPV*"], capsys)
    assert code == 0 and "2 pairs compared" in out


def test_bad_kernel_pattern_is_trouble(tmp_path: Path, capsys) -> None:
    a = write_run(tmp_path / "a", launches([np.zeros((4, 4, 4), np.uint8)]))
    code, _, err = run_cli([str(a), str(a), "--kernel", "re:(a+)+$"], capsys)
    one_line_trouble(code, err, "bad kernel pattern", "repeats a group")
