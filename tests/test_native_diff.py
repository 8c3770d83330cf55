"""The native diff loop (shim/diff/absdiff.c, cudump/analysis/native_diff.py) against
cudump.analysis.diff's numpy path: every figure of a comparison of 8-bit arrays must be the same
either way."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cudump.analysis import native_diff as native
from cudump.analysis.diff.arrays import compare_arrays
from cudump.analysis.diff.metrics import Tolerance

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    spec = importlib.util.spec_from_file_location("shim_build", ROOT / "shim" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    lib = build.build_diff(tmp_path_factory.mktemp("diff"))
    assert native.load(lib)
    yield
    native.unload()


def both(a: np.ndarray, b: np.ndarray, tol: Tolerance | None = None):
    """compare_arrays with the native loop, then with numpy alone."""
    fast = compare_arrays(a, b, tol)
    path = native._lib
    native.unload()
    try:
        slow = compare_arrays(a, b, tol)
    finally:
        native._lib = path
    return fast, slow


def pair(shape: tuple[int, ...], dtype: str, fraction: float, spread: int, seed: int):
    """A and B where about `fraction` of the elements differ by up to `spread`."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, shape, dtype=dtype)
    step = rng.integers(-spread, spread + 1, shape)
    step[rng.random(shape) >= fraction] = 0
    b = np.clip(a.astype(np.int32) + step, info.min, info.max).astype(dtype)
    return a, b


@pytest.mark.parametrize("shape", [(1080, 1920, 4), (37, 53, 2), (1001,), (64, 64, 4),
                                   (5, 7, 3), (3, 4096, 4)])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("fraction, spread", [(1.0, 3), (0.3, 255), (0.001, 40), (0.0, 0)])
def test_native_and_numpy_agree(built, shape, dtype, fraction, spread):
    a, b = pair(shape, dtype, fraction, spread, seed=len(shape) * 1000 + shape[-1])
    fast, slow = both(a, b)
    assert fast == slow
    if fraction * a.size >= 50:
        assert fast.differing > 0


@pytest.mark.parametrize("atol", [0, 1, 2.5, 254, 255, 300])
def test_tolerances_agree(built, atol):
    a, b = pair((200, 300, 4), "uint8", 0.5, 255, seed=7)
    fast, slow = both(a, b, Tolerance(atol=atol))
    assert fast == slow


def test_a_chunk_of_odd_length_and_the_first_maximum(built):
    """The tail after the last 16-byte block, and the first index of the largest |a - b|
    when it lies there."""
    a = np.zeros(16 * 5 + 11, np.uint8)
    b = a.copy()
    b[3] = 7
    b[-2] = 9
    b[-1] = 9
    got = native.byte_diff(a, b, 1, 0, 0.0)
    assert got is not None
    assert (got.differing, got.sum_abs, got.sum_sq, got.max_abs, got.max_at) == (
        3, 25, 49 + 81 + 81, 9, a.size - 2)
    assert native.byte_diff(a, b, 1, 0, 9.0).max_at is None   # not above the chunks before


def test_pixels_of_two_and_four_channels(built):
    a = np.zeros((4, 8, 4), np.uint8)
    b = a.copy()
    b[0, 0, 3] = 1      # pixel (0, 0), alpha
    b[2, 5, 0] = 1      # pixel (2, 5), two channels
    b[2, 5, 1] = 1
    got = native.byte_diff(a.reshape(-1), b.reshape(-1), 4, 0, 0.0)
    assert got is not None
    assert (got.differing, got.pixels, got.per_channel) == (3, 2, [1, 1, 0, 1])
    # as pairs of channels: flat indexes 3, 84 and 85 are pixels 1, 42 and 42
    got = native.byte_diff(a.reshape(-1), b.reshape(-1), 2, 0, 0.0)
    assert got is not None and (got.pixels, got.per_channel) == (2, [1, 2])


def test_three_channels_and_wider_types_stay_with_numpy(built):
    a = np.zeros(96, np.uint8)
    assert native.byte_diff(a, a, 3, 0, 0.0) is None
    wide = np.zeros(96, np.uint16)
    assert native.byte_diff(wide, wide, 1, 0, 0.0) is None


def test_without_the_library_numpy_does_it_all(tmp_path):
    assert not native.load(tmp_path / "missing.so")
    assert native.byte_diff(np.zeros(16, np.uint8), np.ones(16, np.uint8), 1, 0, 0.0) is None
    a, b = pair((40, 40, 4), "uint8", 0.5, 9, seed=3)
    metrics = compare_arrays(a, b)
    assert metrics.differing == int(np.count_nonzero(a != b))
    native.unload()
