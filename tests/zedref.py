"""numpy reference of the ZED stand-in pipeline (samples/zed_kernels.cuh).

Bit-exact twin of the GPU kernels: the tests compare snapshots and the
samples' checksums with what these functions compute. Pure numpy, no GPU.
"""

from __future__ import annotations

import numpy as np

DEFAULT_WIDTH = 640   # pixels per eye
DEFAULT_HEIGHT = 360


def gain_for_frame(frame: int) -> float:
    return 1.25 if frame % 2 else 1.0


def _disc(xs: np.ndarray, yy: np.ndarray, width: int, height: int, frame: int) -> np.ndarray:
    cx, cy, r = width // 2 + 8 * frame, height // 2, height // 4
    return (xs - cx) ** 2 + (yy - cy) ** 2 < r * r


def synth_nv12(width: int, height: int, frame: int) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic side-by-side NV12 frame: Y (H, 2W) and interleaved UV (H/2, 2W), uint8."""
    if width % 2 or height % 2 or width <= 0 or height <= 0:
        raise ValueError("width and height must be positive and even")
    total = 2 * width
    big_x = np.arange(total, dtype=np.int64)
    xs = big_x % width + 16 * (big_x // width)          # (TW,)
    rows = np.arange(height, dtype=np.int64)[:, None]   # (H, 1)
    luma = np.where(_disc(xs, rows, width, height, frame), 210, 16 + (3 * xs + 2 * rows) % 200)

    xs_even = xs[0::2]                                   # xs of each even X
    rows2 = 2 * np.arange(height // 2, dtype=np.int64)[:, None]
    disc_uv = _disc(xs_even, rows2, width, height, frame)
    uv = np.empty((height // 2, total), dtype=np.int64)
    uv[:, 0::2] = np.where(disc_uv, 90, 64 + xs_even % 128)
    uv[:, 1::2] = np.where(disc_uv, 200, 64 + rows2 % 128)
    return luma.astype(np.uint8), uv.astype(np.uint8)


def nv12_to_uyvy(luma: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """Kernel 1: NV12 planes to UYVY, shape (H, 2*TW) uint8."""
    height, total = luma.shape
    if uv.shape != (height // 2, total) or total % 2:
        raise ValueError("Y must be (H, TW) and UV (H/2, TW) with TW even")
    uv_rows = uv[np.arange(height) // 2]                 # (H, TW): the UV row of each Y row
    out = np.empty((height, total // 2, 4), dtype=np.uint8)
    out[..., 0] = uv_rows[:, 0::2]
    out[..., 1] = luma[:, 0::2]
    out[..., 2] = uv_rows[:, 1::2]
    out[..., 3] = luma[:, 1::2]
    return out.reshape(height, total * 2)


def _clamp255(v: np.ndarray) -> np.ndarray:
    return np.clip(v, 0, 255)


def _rgba(luma: np.ndarray, d: np.ndarray, e: np.ndarray, g: int) -> np.ndarray:
    c = luma - 16
    channels = (
        _clamp255((298 * c + 459 * e + 128) >> 8),
        _clamp255((298 * c - 55 * d - 136 * e + 128) >> 8),
        _clamp255((298 * c + 541 * d + 128) >> 8),
    )
    out = np.empty(luma.shape + (4,), dtype=np.uint8)
    for k, ch in enumerate(channels):
        out[..., k] = _clamp255((ch * g + 128) >> 8)
    out[..., 3] = 255
    return out


def frp0k(uyvy: np.ndarray, width: int, height: int, gain: float) -> tuple[np.ndarray, np.ndarray]:
    """Kernel 2: UYVY side-by-side frame to left and right RGBA images, each (H, W, 4) uint8."""
    if uyvy.shape != (height, 4 * width):
        raise ValueError(f"UYVY must be ({height}, {4 * width}), not {uyvy.shape}")
    # (int)(gain * 256.0f) in float32, as the kernel computes it.
    g = int(np.float32(gain) * np.float32(256.0))
    macro = uyvy.reshape(height, width, 4).astype(np.int32)
    d = macro[..., 0] - 128
    e = macro[..., 2] - 128
    frame = np.empty((height, 2 * width, 4), dtype=np.uint8)
    frame[:, 0::2] = _rgba(macro[..., 1], d, e, g)
    frame[:, 1::2] = _rgba(macro[..., 3], d, e, g)
    return frame[:, :width].copy(), frame[:, width:].copy()


def pipeline(width: int, height: int, frame: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Everything one frame goes through: (uyvy, left, right)."""
    uyvy = nv12_to_uyvy(*synth_nv12(width, height, frame))
    left, right = frp0k(uyvy, width, height, gain_for_frame(frame))
    return uyvy, left, right


def checksum(image: np.ndarray) -> int:
    """The samples' per-image checksum: sum of (index + 1) * byte over the unpadded bytes."""
    flat = np.ascontiguousarray(image, dtype=np.uint8).reshape(-1).astype(np.uint64)
    weights = np.arange(1, flat.size + 1, dtype=np.uint64)
    return int(np.sum(flat * weights, dtype=np.uint64))
