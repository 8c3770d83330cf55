"""Build hook: compile the C shim into cudump/_lib/libcudump.so.

Only a C compiler is needed (no CUDA toolkit): the shim declares the few
driver types it uses itself, in shim/cudecl.h.
"""

import os
import shlex
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
SOURCES = sorted((ROOT / "shim").glob("*.c"))
CFLAGS = ["-std=c11", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
          "-D_GNU_SOURCE", "-pthread"]


def build_shim(out_dir: Path) -> Path:
    cc = shlex.split(os.environ.get("CC", "cc"))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "libcudump.so"
    cmd = [*cc, *CFLAGS, "-shared", "-o", str(target), *map(str, SOURCES), "-ldl", "-pthread"]
    subprocess.run(cmd, check=True)
    return target


class BuildPyWithShim(build_py):
    def run(self) -> None:
        super().run()
        build_shim(Path(self.build_lib) / "cudump" / "_lib")
        if self.editable_mode:
            build_shim(ROOT / "cudump" / "_lib")


class BinaryDistribution(Distribution):
    """The wheel carries a native library, so it is platform specific."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithShim}, distclass=BinaryDistribution)
