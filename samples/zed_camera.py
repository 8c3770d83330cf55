"""The ZED stand-in with cuda-python and NVRTC (no nvcc needed): the same
kernels as zed_camera.cu, compiled from zed_kernels.cuh under the same mangled
names, on the same synthetic frames, printing the same lines:
    frame F gain=G left=SUM right=SUM
    launches nv12_to_uyvy=F FrP0k5607tPV=F

usage: python3 zed_camera.py [FRAMES [WIDTH HEIGHT]]   (defaults 2, 640, 360; per eye)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from cuda.bindings import driver as cu
from cudrv import (
    SampleFailure,
    check,
    compile_cuda,
    copy_2d,
    f32,
    i32,
    launch,
    load_functions,
    open_device,
    ptr,
    run_main,
    u32,
)

KERNELS = Path(__file__).resolve().parent / "zed_kernels.cuh"
TO_UYVY = "nv12_to_uyvy"
TO_RGBA = "device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>"
BLOCK = (32, 8, 1)


def synth_nv12(width: int, height: int, frame: int) -> np.ndarray:
    """The frame as one NV12 array of 3H/2 rows: the Y plane, then interleaved UV."""
    total = 2 * width
    cx, cy, r = width // 2 + 8 * frame, height // 2, height // 4
    big_x = np.arange(total)
    xs = big_x % width + 16 * (big_x // width)
    ys = np.arange(height)[:, None]
    nv12 = np.empty((height * 3 // 2, total), dtype=np.uint8)
    disc = (xs - cx) ** 2 + (ys - cy) ** 2 < r * r
    nv12[:height] = np.where(disc, 210, 16 + (3 * xs + 2 * ys) % 200)
    y_uv = 2 * np.arange(height // 2)[:, None]
    xs_uv = xs[0::2]
    disc_uv = (xs_uv - cx) ** 2 + (y_uv - cy) ** 2 < r * r
    nv12[height:, 0::2] = np.where(disc_uv, 90, 64 + xs_uv % 128)
    nv12[height:, 1::2] = np.where(disc_uv, 200, 64 + y_uv % 128)
    return nv12


def checksum(image: np.ndarray) -> int:
    flat = image.reshape(-1).astype(np.uint64)
    return int(np.sum(flat * np.arange(1, flat.size + 1, dtype=np.uint64), dtype=np.uint64))


def alloc_pitch(width_bytes: int, height: int) -> tuple[cu.CUdeviceptr, int]:
    dptr, pitch = check(cu.cuMemAllocPitch(width_bytes, height, 4))
    return dptr, int(pitch)


def download(dptr, pitch: int, width_bytes: int, height: int) -> np.ndarray:
    host = np.empty((height, width_bytes), dtype=np.uint8)
    copy_2d(host, width_bytes, dptr, pitch, width_bytes, height, to_device=False)
    return host


def main() -> None:
    frames = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    width, height = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (640, 360)
    if frames <= 0 or width <= 0 or height <= 0 or width % 2 or height % 2:
        raise SampleFailure("usage: zed_camera.py [FRAMES [WIDTH HEIGHT]] (even sizes)")
    total = 2 * width
    _, arch = open_device()
    compiled = compile_cuda(KERNELS.read_text(), [TO_UYVY, TO_RGBA], arch, "zed_kernels.cu")
    fns = load_functions(compiled)

    nv12, nv12_pitch = alloc_pitch(total, height * 3 // 2)
    uyvy, uyvy_pitch = alloc_pitch(total * 2, height)
    left, left_pitch = alloc_pitch(width * 4, height)
    right, right_pitch = alloc_pitch(width * 4, height)
    if left_pitch != right_pitch:
        raise SampleFailure("left and right pitches differ")
    # The outputs start as zeros, so that the first frame's "before" is known.
    check(cu.cuMemsetD2D8(left, left_pitch, 0, width * 4, height))
    check(cu.cuMemsetD2D8(right, right_pitch, 0, width * 4, height))

    grid = ((width + BLOCK[0] - 1) // BLOCK[0], (height + BLOCK[1] - 1) // BLOCK[1], 1)
    for f in range(frames):
        frame = synth_nv12(width, height, f)
        copy_2d(nv12, nv12_pitch, frame, total, total, height * 3 // 2, to_device=True)
        gain = 1.25 if f % 2 else 1.0
        launch(fns[TO_UYVY], grid, BLOCK,
               [ptr(nv12), u32(nv12_pitch), ptr(uyvy), u32(uyvy_pitch), u32(total), u32(height)])
        launch(fns[TO_RGBA], grid, BLOCK,
               [ptr(uyvy), i32(uyvy_pitch), ptr(left), ptr(right), i32(left_pitch),
                i32(width), i32(height), f32(gain)])
        check(cu.cuCtxSynchronize())

        # The repacking stage is checked here; the colour math by the tests,
        # against tests/zedref.py, through the checksums.
        packed = download(uyvy, uyvy_pitch, total * 2, height).reshape(height, width, 4)
        uv_rows = frame[height + np.arange(height) // 2]
        want = np.stack([uv_rows[:, 0::2], frame[:height, 0::2],
                         uv_rows[:, 1::2], frame[:height, 1::2]], axis=-1)
        if not np.array_equal(packed, want):
            raise SampleFailure(f"frame {f}: UYVY differs from the NV12 input")
        images = [download(d, left_pitch, width * 4, height) for d in (left, right)]
        if any((img.reshape(height, width, 4)[..., 3] != 255).any() for img in images):
            raise SampleFailure(f"frame {f}: alpha is not 255")
        print(f"frame {f} gain={gain:.2f} left={checksum(images[0])} "
              f"right={checksum(images[1])}")
    for dptr in (nv12, uyvy, left, right):
        check(cu.cuMemFree(dptr))
    print(f"launches nv12_to_uyvy={frames} FrP0k5607tPV={frames}")


if __name__ == "__main__":
    run_main(main)
