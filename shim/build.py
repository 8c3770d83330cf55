"""Compiles the shim's C sources into libcudump.so, and the controller's native
diff loop (shim/diff/) into libcudumpdiff.so, with the system C compiler.

Used by setup.py when the package is built and by the tests, so both build
the libraries the same way. No CUDA toolkit is needed: shim/cudecl.h declares
the few driver types the shim uses.

    python3 shim/build.py     # both into cudump/_lib of this checkout
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent
LIBRARY = "libcudump.so"
DIFF_LIBRARY = "libcudumpdiff.so"
CFLAGS = ["-std=c11", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
          "-D_GNU_SOURCE", "-pthread"]


def sources() -> list[Path]:
    return sorted(SHIM_DIR.glob("*.c"))


def build_shim(out_dir: Path) -> Path:
    """Builds out_dir/libcudump.so and returns its path."""
    cc = shlex.split(os.environ.get("CC", "cc"))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY
    cmd = [*cc, *CFLAGS, "-shared", "-o", str(target), *map(str, sources()), "-ldl", "-pthread"]
    subprocess.run(cmd, check=True)
    return target


def build_diff(out_dir: Path) -> Path:
    """Builds out_dir/libcudumpdiff.so (cudump/analysis/native_diff.py) and returns its path."""
    cc = shlex.split(os.environ.get("CC", "cc"))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / DIFF_LIBRARY
    sources = sorted((SHIM_DIR / "diff").glob("*.c"))
    subprocess.run([*cc, *CFLAGS, "-shared", "-o", str(target), *map(str, sources)], check=True)
    return target


if __name__ == "__main__":
    lib_dir = SHIM_DIR.parent / "cudump" / "_lib"
    print(build_shim(lib_dir))
    print(build_diff(lib_dir))
