"""GPU tests: skipped, with the reason, where no NVIDIA GPU and driver answer."""

from __future__ import annotations

import ctypes
import functools
import sys
from pathlib import Path

import pytest

# The tests import zedref (tests/) and gpurun (here) as top-level modules.
for path in (Path(__file__).resolve().parent, Path(__file__).resolve().parents[1]):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


@functools.cache
def gpu_absent_reason() -> str | None:
    """Ask the driver itself: load libcuda.so.1, cuInit(0), cuDeviceGetCount > 0."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1 does not load)"
    status = libcuda.cuInit(0)
    if status != 0:
        return f"cuInit failed with CUresult {status}"
    count = ctypes.c_int(0)
    status = libcuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value <= 0:
        return "no CUDA device"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    reason = gpu_absent_reason()
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Where the programs run: a fresh, empty directory."""
    path = tmp_path / "cwd"
    path.mkdir()
    return path
