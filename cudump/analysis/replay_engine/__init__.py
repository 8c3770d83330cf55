"""The replay engine: replays one captured launch from an extract folder and compares its
output with the capture (replay.py, the entry; replay_spec.py, launch.json; replay_files.py,
the folder's files, each a regular file inside it; replay_driver.py, the GPU side through
cuda-python).

Those four files ship: `cudump extract` copies each of FILES byte for byte, under its own
name, into the folder it writes, where `python replay.py` runs them with the standard library,
numpy and cuda-python alone. So they import nothing of cudump, and each other in one of two
ways, chosen by `__package__` at the top of each:

- here, as cudump.analysis.replay_engine.*, relatively (`from .replay_spec import ...`), so
  there is one copy of every class (ReplayError, LaunchSpec) whoever imports it;
- in an extract folder, by their plain names (`from replay_spec import ...`): Python puts the
  folder of the script it runs on sys.path, so the siblings are found from any working
  directory.

cudump itself never puts this folder on sys.path. This file and __main__.py do not ship:
`python -m cudump.analysis.replay_engine [FOLDER]` is `python replay.py [FOLDER]`.
"""

from __future__ import annotations

from pathlib import Path

from .replay import Prepared, bit_equal, compare, differing, load_array, main, prepare
from .replay_driver import Replayer
from .replay_files import name_problem, open_regular, read_regular
from .replay_spec import (
    FORMAT,
    SPEC_FILE,
    Buffer,
    LaunchSpec,
    Pointer,
    Region,
    ReplayError,
    SpecError,
    format_shape,
    patch_params,
)

# The files an extract folder gets, the entry first; their names are the ones they import
# each other by.
FILES = ("replay.py", "replay_spec.py", "replay_files.py", "replay_driver.py")


def shipped_files() -> list[Path]:
    """The engine's files, as `cudump extract` copies them (FILES, in this folder)."""
    here = Path(__file__).resolve().parent
    return [here / name for name in FILES]


__all__ = [
    "FILES", "FORMAT", "SPEC_FILE", "Buffer", "LaunchSpec", "Pointer", "Prepared", "Region",
    "ReplayError", "Replayer", "SpecError", "bit_equal", "compare", "differing", "format_shape",
    "load_array", "main", "name_problem", "open_regular", "patch_params", "prepare",
    "read_regular", "shipped_files",
]
