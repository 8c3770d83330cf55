"""interpose.c is the bottom of the shim's calls: its wrappers reach the layer above only
through the table of entries that layer fills (shim/interpose.h's shim_entries), never by
calling it. Checked on the object code, so that an inline function of another file's header
(handoff_fence reads handoff.c's counters, calls_enter calls.c's) counts as a use of that file.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shim_cflags() -> list[str]:
    """shim/build.py's flags, so that the object is the one the library is made of."""
    spec = importlib.util.spec_from_file_location("shim_build", ROOT / "shim" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.CFLAGS)


def symbols(path: Path, which: str) -> set[str]:
    out = subprocess.run(["nm", which, str(path)], check=True, capture_output=True,
                         text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_interpose_uses_nothing_of_the_shim_but_the_table_of_entries(shim_lib, tmp_path):
    obj = tmp_path / "interpose.o"
    cc = shlex.split(os.environ.get("CC", "cc"))
    subprocess.run([*cc, *shim_cflags(), "-c", "-o", str(obj),
                    str(ROOT / "shim" / "interpose.c")], check=True)
    # What the rest of the shim defines (hidden symbols too: the library is not stripped).
    rest = symbols(shim_lib, "--defined-only") - symbols(obj, "--defined-only")
    used = symbols(obj, "--undefined-only") & rest - {"_GLOBAL_OFFSET_TABLE_"}
    assert used == {"shim_entries"}, sorted(used)
