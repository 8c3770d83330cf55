"""`cudump extract RUN --kernel PATTERN --launch [PID:]N DIR`: one captured launch as a folder
that runs without cudump."""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np

from cudump.analysis import replay_engine
from cudump.analysis.replay import Capture, ReplayTrouble, launch_spec, load_snapshots, read_image
from cudump.analysis.replay_engine import SPEC_FILE, LaunchSpec, format_shape
from cudump.commands import HelpFormatter
from cudump.commands.replay import add_selection, choose

EPILOG = """\
DIR (new or empty) gets: launch.json (the kernel, its grid, block, shared memory, parameter
bytes and where each pointer points), the module image, buffers/*.npy (every buffer before
and after the launch), replay.py with replay_spec.py, replay_files.py and replay_driver.py (they
need only Python, numpy and cuda-python) and a README.
`python DIR/replay.py` runs the launch on a GPU and says, buffer by buffer, whether it wrote
what the capture holds (exit status 0 equal, 1 different, 2 trouble).
"""


class ExtractCommand:
    name = "extract"
    help = "Write one captured launch as a self-contained folder that replays it."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.formatter_class = HelpFormatter
        parser.epilog = EPILOG
        add_selection(parser)
        parser.add_argument("dir", metavar="DIR", type=Path,
                            help="the folder to write (must be new or empty)")

    def run(self, args: argparse.Namespace) -> int:
        run_dir = Path(args.run)
        capture = choose(run_dir, args, "extract")
        if capture.problems:
            raise ReplayTrouble(f"{capture.describe()} cannot be extracted: "
                                f"{capture.problems[0]}")
        folder = _new_folder(args.dir)
        spec = launch_spec(capture)
        image = read_image(run_dir, capture, None)
        spec = write_folder(folder, capture, spec, image,
                            load_snapshots(run_dir, spec, "before"),
                            load_snapshots(run_dir, spec, "after"))
        print(f"extract: wrote {folder}: {capture.describe()}, {len(spec.buffers)} buffers; "
              f"run it with: python {folder / 'replay.py'}")
        return 0


def _new_folder(path: Path) -> Path:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ReplayTrouble(f"{path} exists and is not an empty directory; give a new one")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ReplayTrouble(f"{path}: cannot make the directory: {err.strerror or err}") \
            from None
    return path


def write_folder(folder: Path, capture: Capture, spec: LaunchSpec, image: bytes,
                 before: list[np.ndarray | None], after: list[np.ndarray | None]) -> LaunchSpec:
    """Writes the folder's files; returns the spec as launch.json holds it."""
    (folder / "buffers").mkdir()
    buffers = []
    for buffer, first, last in zip(spec.buffers, before, after, strict=True):
        names = {}
        for phase, array in (("before", first), ("after", last)):
            if array is None:
                names[phase] = None
                continue
            name = f"buffers/{buffer.label}-{phase}.npy"
            with open(folder / name, "wb") as f:
                np.save(f, np.ascontiguousarray(array))
            names[phase] = name
        buffers.append(replace(buffer, before=names["before"], after=names["after"]))
    image_name = f"module.{spec.image_format}"
    (folder / image_name).write_bytes(image)
    spec = replace(spec, image=image_name, buffers=tuple(buffers))
    (folder / SPEC_FILE).write_text(json.dumps(spec.to_json(), indent=1) + "\n")
    for path in replay_engine.shipped_files():
        shutil.copyfile(path, folder / path.name)
    (folder / "README.md").write_text(_readme(capture, spec))
    return spec


def _readme(capture: Capture, spec: LaunchSpec) -> str:
    api = capture.record.api if capture.record.api is not None else "?"
    rows = "\n".join(
        f"| {b.label} | {b.dtype} {format_shape(b.shape)} | {b.before or '-'} | "
        f"{b.after or '-'} |" for b in spec.buffers)
    return f"""# One CUDA kernel launch, captured by cudump

Kernel: `{spec.kernel}`
(`{spec.mangled}`), launch {capture.launch} of process {capture.pid}, its launch number
{capture.occurrence} of this kernel; grid {list(spec.grid)}, block {list(spec.block)},
{spec.smem} bytes of dynamic shared memory, launched through {api}.

## Run it

Needs an NVIDIA GPU and driver, Python 3, numpy and cuda-python (`pip install numpy
cuda-python`):

    python replay.py            # or: python replay.py --runs 10 (is it deterministic?)

It loads `{spec.image}`, allocates the kernel's buffers and fills them from the
`*-before.npy` files, launches the kernel with the captured parameters (pointers patched to
the new buffers), and compares each buffer with its `*-after.npy`, bit for bit. Exit status:
0 all equal, 1 a difference, 2 trouble.

## Files

- `launch.json`: the kernel, its launch configuration, the parameter bytes (hex) and
  layout, the memory regions, which parameter bytes point where, and each buffer.
- `{spec.image}`: the module the kernel came from ({spec.image_format}).
- `replay.py`: the replay, with `replay_spec.py` (reads `launch.json`),
  `replay_files.py` (reads only regular files inside this folder) and `replay_driver.py`
  (runs the launch); numpy and cuda-python only.

| buffer | data | before | after |
| --- | --- | --- | --- |
{rows}

Replay restores the kernel's arguments and the memory they point to. It does not restore
module globals (`__device__`/`__constant__` variables), textures or surfaces, or anything
else earlier launches left behind outside these buffers.
"""
