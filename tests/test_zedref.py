"""CPU tests of the numpy reference of the ZED stand-in (tests/zedref.py).

Properties of the synthetic frames and of the conversion, a scalar
re-derivation of the colour math, and the kernels' own source
(samples/zed_kernels.cuh) compiled for the CPU and compared byte for byte.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zedref

ROOT = Path(__file__).resolve().parents[1]
W, H = 64, 48


def test_shapes_and_types():
    luma, uv = zedref.synth_nv12(W, H, 0)
    assert luma.shape == (H, 2 * W) and uv.shape == (H // 2, 2 * W)
    uyvy, left, right = zedref.pipeline(W, H, 0)
    assert uyvy.shape == (H, 4 * W)
    assert left.shape == right.shape == (H, W, 4)
    assert {a.dtype for a in (luma, uv, uyvy, left, right)} == {np.dtype(np.uint8)}


def test_odd_sizes_are_refused():
    with pytest.raises(ValueError):
        zedref.synth_nv12(W + 1, H, 0)


def test_gradient_steps_by_three_outside_the_disc():
    luma, _ = zedref.synth_nv12(W, H, 0)
    left = luma[:, :W].astype(int)
    outside = (left[:, :-1] != 210) & (left[:, 1:] != 210)
    steps = (left[:, 1:] - left[:, :-1]) % 200
    assert outside.any()
    assert np.all(steps[outside] == 3)


def test_right_eye_is_left_eye_shifted_by_16():
    luma, uv = zedref.synth_nv12(W, H, 1)
    assert np.array_equal(luma[:, W:2 * W - 16], luma[:, 16:W])
    assert np.array_equal(uv[:, W:2 * W - 16], uv[:, 16:W])


def test_disc_moves_8_pixels_a_frame():
    # V = 200 marks the disc alone: elsewhere V = 64 + (y % 128) <= 190.
    _, first = zedref.synth_nv12(W, H, 0)
    _, second = zedref.synth_nv12(W, H, 1)
    disc0, disc1 = first[:, 1:W:2] == 200, second[:, 1:W:2] == 200
    assert disc0.sum() > 0
    assert np.array_equal(disc1[:, 4:], disc0[:, :-4])    # 8 pixels = 4 UV pairs


def test_chroma_and_luma_agree_on_the_disc():
    luma, uv = zedref.synth_nv12(W, H, 0)
    disc = uv[:, 1::2] == 200
    assert disc.any() and not disc.all()
    assert np.all(uv[:, 0::2][disc] == 90)
    assert np.all(luma[0::2, 0::2][disc] == 210)


def test_uyvy_unpacks_to_the_nv12_planes():
    luma, uv = zedref.synth_nv12(W, H, 2)
    macro = zedref.nv12_to_uyvy(luma, uv).reshape(H, W, 4)
    assert np.array_equal(macro[..., 1], luma[:, 0::2])
    assert np.array_equal(macro[..., 3], luma[:, 1::2])
    assert np.array_equal(macro[0::2, :, 0], uv[:, 0::2])
    assert np.array_equal(macro[1::2, :, 2], uv[:, 1::2])


def _uniform_uyvy(y: int, u: int, v: int) -> np.ndarray:
    return np.tile(np.array([u, y, v, y], dtype=np.uint8), (H, W))


def test_neutral_chroma_gives_grey_from_black_to_white():
    for y, want in ((16, 0), (235, 255), (126, 128)):
        left, right = zedref.frp0k(_uniform_uyvy(y, 128, 128), W, H, 1.0)
        assert np.all(left[..., :3] == want) and np.all(right[..., :3] == want)
        assert np.all(left[..., 3] == 255)


def _scalar_pixel(y: int, u: int, v: int, gain: float) -> list[int]:
    """The kernel's math for one pixel, in plain Python integers."""
    g = int(np.float32(gain) * np.float32(256.0))
    c, d, e = y - 16, u - 128, v - 128
    rgb = [(298 * c + 459 * e + 128) >> 8, (298 * c - 55 * d - 136 * e + 128) >> 8,
           (298 * c + 541 * d + 128) >> 8]
    rgb = [min(255, max(0, (min(255, max(0, k)) * g + 128) >> 8)) for k in rgb]
    return rgb + [255]


@pytest.mark.parametrize("frame", [0, 1])
def test_vectorised_math_matches_scalar_math(frame):
    uyvy, left, right = zedref.pipeline(W, H, frame)
    gain = zedref.gain_for_frame(frame)
    rng = np.random.default_rng(frame)
    for _ in range(200):
        y, m = int(rng.integers(H)), int(rng.integers(W))
        u, y0, v, y1 = (int(b) for b in uyvy[y, 4 * m:4 * m + 4])
        x0 = 2 * m
        eye, cx = (left, x0) if x0 < W else (right, x0 - W)
        assert list(eye[y, cx]) == _scalar_pixel(y0, u, v, gain)
        assert list(eye[y, cx + 1]) == _scalar_pixel(y1, u, v, gain)


def test_gain_brightens_and_saturates():
    uyvy = _uniform_uyvy(150, 100, 180)
    dim, _ = zedref.frp0k(uyvy, W, H, 1.0)
    bright, _ = zedref.frp0k(uyvy, W, H, 1.25)
    assert np.all(bright[..., :3] >= dim[..., :3])
    assert np.any(bright[..., :3] > dim[..., :3])
    assert np.all(bright[..., :3] == np.minimum(255, (dim[..., :3].astype(int) * 320 + 128) >> 8))


def test_checksum_weights_positions():
    a = np.zeros((2, 2, 4), dtype=np.uint8)
    a[0, 0, 1] = 3                          # index 1 -> weight 2
    assert zedref.checksum(a) == 6
    b = np.zeros_like(a)
    b[0, 0, 2] = 3                          # same bytes, another place
    assert zedref.checksum(b) != zedref.checksum(a)


# The kernels' source, compiled for the CPU: CUDA's few keywords become plain
# C++ and the grid becomes loops, so the very code the GPU runs is compared
# with the reference without a GPU.
HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __align__(n) alignas(n)
struct uchar4 { unsigned char x, y, z, w; };
struct Dim { unsigned int x, y, z; };
static Dim blockIdx, threadIdx, blockDim = {1, 1, 1};
#include "zed_kernels.cuh"

template <typename F> static void grid(int nx, int ny, F kernel) {
    for (int y = 0; y < ny; y++)
        for (int x = 0; x < nx; x++) {
            blockIdx = {(unsigned)x, (unsigned)y, 0};
            kernel();
        }
}

int main(int argc, char** argv) {
    int w = atoi(argv[1]), h = atoi(argv[2]);
    float gain = (float)atof(argv[3]);
    int tw = 2 * w, nv12_pitch = tw + 32, uyvy_pitch = 2 * tw + 64, dst_pitch = 4 * w + 16;
    std::vector<unsigned char> nv12((size_t)nv12_pitch * h * 3 / 2);
    for (int r = 0; r < h * 3 / 2; r++)
        if (fread(&nv12[(size_t)r * nv12_pitch], 1, tw, stdin) != (size_t)tw) return 1;
    std::vector<unsigned char> uyvy((size_t)uyvy_pitch * h);
    std::vector<device::uchar8> left(dst_pitch * h / 8), right(dst_pitch * h / 8);
    grid(w, h, [&] { nv12_to_uyvy(nv12.data(), nv12_pitch, uyvy.data(), uyvy_pitch, tw, h); });
    grid(w, h, [&] {
        device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>((uchar4*)uyvy.data(), uyvy_pitch,
            left.data(), right.data(), dst_pitch, w, h, gain);
    });
    for (int r = 0; r < h; r++) fwrite(&uyvy[(size_t)r * uyvy_pitch], 1, 2 * tw, stdout);
    for (auto* eye : {&left, &right})
        for (int r = 0; r < h; r++)
            fwrite((unsigned char*)eye->data() + (size_t)r * dst_pitch, 1, 4 * w, stdout);
    return 0;
}
"""


@pytest.fixture(scope="module")
def kernels_on_cpu(tmp_path_factory) -> Path:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the kernels for the CPU")
    build = tmp_path_factory.mktemp("zedcpu")
    (build / "harness.cpp").write_text(HARNESS)
    exe = build / "harness"
    subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-I", str(ROOT / "samples"),
                    "-o", str(exe), str(build / "harness.cpp")], check=True)
    return exe


@pytest.mark.parametrize(("width", "height", "frame"), [(W, H, 0), (W, H, 1), (640, 360, 3)])
def test_kernel_source_matches_reference(kernels_on_cpu, width, height, frame):
    luma, uv = zedref.synth_nv12(width, height, frame)
    gain = zedref.gain_for_frame(frame)
    out = subprocess.run([str(kernels_on_cpu), str(width), str(height), repr(gain)],
                         input=np.concatenate([luma, uv]).tobytes(), capture_output=True,
                         check=True).stdout
    uyvy, left, right = zedref.pipeline(width, height, frame)
    size = uyvy.size
    assert len(out) == size + left.size + right.size
    got = np.frombuffer(out, dtype=np.uint8)
    assert np.array_equal(got[:size].reshape(uyvy.shape), uyvy)
    assert np.array_equal(got[size:size + left.size].reshape(left.shape), left)
    assert np.array_equal(got[size + left.size:].reshape(right.shape), right)
