"""Replays one captured CUDA kernel launch and compares its output with the capture.

A standalone script: it and its two sibling files (replay_spec.py, replay_driver.py) need
only the standard library, numpy and cuda-python's `cuda.bindings.driver`, so that copies
of them can sit in an extract folder beside the captured launch and run on any machine
with a GPU:

    python replay.py [FOLDER] [--runs N] [--device D]

FOLDER holds launch.json (format "cudump-launch/1"), the kernel's image and the
buffers' .npy files. Every region the kernel's pointers reach is allocated once,
zero-filled before each run, and the captured `before` contents are copied into
the buffers; the kernel is launched with its captured parameters, the pointer
words in them patched to the new allocations, and the buffers are read back and
compared bit for bit with the captured `after` contents.

Exit status: 0 when every compared buffer is equal to its capture (and runs agree
with each other), 1 when something differs, 2 when the replay could not be done.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The engine's files import each other by their plain names when they run on their own (copies
# in an extract folder, whose folder Python puts on sys.path) and relatively when they are the
# package cudump.analysis.replay_engine (__package__ names it then; it is empty or None in a
# script and in a module imported by its plain name). More in cudump's
# cudump/analysis/replay_engine/__init__.py.
if __package__:
    from .replay_driver import Replayer
    from .replay_files import read_file, read_npy, show_path
    from .replay_spec import Buffer, LaunchSpec, ReplayError, format_shape, raw_bytes
else:
    sys.dont_write_bytecode = True  # no __pycache__: the extract folder stays as written
    from replay_driver import Replayer
    from replay_files import read_file, read_npy, show_path
    from replay_spec import Buffer, LaunchSpec, ReplayError, format_shape, raw_bytes

# The most bytes a module image may have.
IMAGE_LIMIT = 4 << 30
# The largest --device (CUdevice is an int).
MAX_DEVICE = (1 << 31) - 1


# ---------------------------------------------------------------- comparing


def _element_bytes(array: np.ndarray) -> np.ndarray:
    """The array's elements as rows of raw bytes: equal rows are bit-for-bit equal elements."""
    flat = np.ascontiguousarray(array).reshape(-1)
    return flat.view(np.uint8).reshape(flat.size, array.dtype.itemsize)


def bit_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaNs with the same bit pattern are equal)."""
    return (a.dtype == b.dtype and a.shape == b.shape
            and np.array_equal(_element_bytes(a), _element_bytes(b)))


def differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Flat indices of the elements whose bytes differ (same dtype and shape)."""
    return np.flatnonzero(np.any(_element_bytes(a) != _element_bytes(b), axis=1))


def compare(buffer: Buffer, got: np.ndarray, want: np.ndarray) -> str | None:
    """None when `got` is bit for bit `want`, else what differs, in one line."""
    if bit_equal(got, want):
        return None
    if got.dtype != want.dtype or got.shape != want.shape:
        return (f"the captured after is {want.dtype} {format_shape(want.shape)}, the replay "
                f"gave {got.dtype} {format_shape(got.shape)}")
    where = differing(got, want)
    first = int(where[0])
    index = tuple(int(i) for i in np.unravel_index(first, got.shape)) if got.shape else ()
    return (f"{len(where)} of {got.size} elements differ from the captured after; first at "
            f"index {index}: {got.reshape(-1)[first]} != {want.reshape(-1)[first]}")


def _missing(folder: Path, name: str, where: str) -> ReplayError:
    return ReplayError(f"launch.json: {where}: {show_path(folder / name)} is missing: the "
                       "extract is incomplete")


def load_array(folder: Path, name: str, buffer: Buffer, where: str = "buffer") -> np.ndarray:
    """The .npy file `name` of the folder (launch.json's field `where`) as the buffer's
    array: a regular file inside the folder that holds exactly the buffer's bytes."""
    try:
        array = read_npy(folder, name, f"launch.json: {where}", buffer.width * buffer.height)
    except FileNotFoundError:
        raise _missing(folder, name, where) from None
    data = raw_bytes(buffer, array)
    return buffer.as_array(data)


def read_image(folder: Path, spec: LaunchSpec) -> bytes:
    """The module image launch.json names: a regular file inside the folder."""
    try:
        return read_file(folder, spec.image, "launch.json: image", IMAGE_LIMIT)
    except FileNotFoundError:
        raise _missing(folder, spec.image, "image") from None


@dataclass
class Prepared:
    """All an extract folder holds for a replay, read and checked before the driver is."""

    spec: LaunchSpec
    image: bytes
    before: list[np.ndarray | None]
    after: list[np.ndarray | None]


def prepare(folder: Path) -> Prepared:
    """launch.json, the image and every buffer's arrays of `folder`; ReplayError, in one
    line naming the file and field, where any is not as it must be."""
    spec = LaunchSpec.load(folder)
    image = read_image(folder, spec)
    before = [None if b.before is None else load_array(folder, b.before, b,
                                                       f"buffers[{i}].before")
              for i, b in enumerate(spec.buffers)]
    after = [None if b.after is None else load_array(folder, b.after, b, f"buffers[{i}].after")
             for i, b in enumerate(spec.buffers)]
    return Prepared(spec, image, before, after)


def replay(folder: Path, runs: int = 1, device: int = 0, out: Any = None) -> int:
    """Replays the launch in `folder` `runs` times, prints what it finds; the exit status."""
    out = out or sys.stdout
    ready = prepare(folder)
    spec, image, before, after = ready.spec, ready.image, ready.before, ready.after
    status = 0
    results: list[list[np.ndarray]] = []
    with Replayer(spec, image, device) as replayer:
        for run in range(1, runs + 1):
            got = replayer.run(list(before))
            results.append(got)
            prefix = f"run {run}: " if runs > 1 else ""
            for buffer, array, want in zip(spec.buffers, got, after, strict=True):
                if want is None:
                    continue
                problem = compare(buffer, array, want)
                if problem is not None:
                    status = 1
                print(f"{prefix}{buffer.describe()}: "
                      f"{problem or 'equal to the captured after'}", file=out)
    if not any(a is not None for a in after):
        print("no buffer has a captured after to compare with", file=out)
    if runs > 1:
        deterministic = True
        for run in range(1, runs):
            for buffer, first, later in zip(spec.buffers, results[0], results[run],
                                            strict=True):
                if not bit_equal(first, later):
                    deterministic = False
                    print(f"runs 1 and {run + 1} differ in {buffer.label}: the kernel is not "
                          "deterministic", file=out)
        if deterministic:
            print(f"all {runs} runs gave the same buffers", file=out)
        else:
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="replay.py",
        description="Replays one captured CUDA kernel launch and compares its output with the "
                    "capture.")
    parser.add_argument("folder", nargs="?", type=Path, default=Path(__file__).resolve().parent,
                        help="the folder with launch.json (default: this script's folder)")
    parser.add_argument("--runs", type=int, default=1, help="replay this many times (default 1)")
    parser.add_argument("--device", type=int, default=0, help="the GPU to use (default 0)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if not 0 <= args.device <= MAX_DEVICE:
        parser.error(f"--device must be 0 to {MAX_DEVICE}")
    try:
        return replay(args.folder, args.runs, args.device)
    except ReplayError as e:
        print("replay: " + " ".join(str(e).split()), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
