"""Builds the host-memory stand-in for libcuda.so.1 and the C test programs.

The stand-in is test equipment: it never ships. Only the system C compiler is
needed (no CUDA toolkit). Outputs are rebuilt only when a source is newer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKE_DIR = ROOT / "tests" / "fakecuda"
LIB_SRC = FAKE_DIR / "lib"
PROG_SRC = FAKE_DIR / "progs"
SHIM_DIR = ROOT / "shim"
DEFAULT_BUILD_DIR = FAKE_DIR / "build"

CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-g", "-pthread"]
INCLUDES = [f"-I{FAKE_DIR}", f"-I{SHIM_DIR}"]
# -Bsymbolic: the stand-in's own tables (cuGetProcAddress) must hold its own
# addresses even when a preloaded library exports the same names.
LIB_FLAGS = ["-fPIC", "-shared", "-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic"]
# Programs that reach the driver only through dlopen, as static cudart and
# PyTorch do; the others are linked with -lcuda.
DLOPEN_PROGRAMS = frozenset({"cudart_like", "dlsym_direct"})


@dataclass(frozen=True)
class FakeCuda:
    """Where the built stand-in and the test programs are."""

    lib_dir: Path
    programs: dict[str, Path]

    @property
    def library(self) -> Path:
        return self.lib_dir / "libcuda.so.1"

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment in which programs (and a shim) load the stand-in."""
        env = dict(os.environ if base is None else base)
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = f"{self.lib_dir}:{old}" if old else str(self.lib_dir)
        return env


class BuildFailed(RuntimeError):
    """The C compiler rejected a source."""


def _compiler() -> str:
    return os.environ.get("CC", "cc")


def _newest(paths: list[Path]) -> float:
    return max(p.stat().st_mtime for p in paths)


def _stale(target: Path, inputs: list[Path]) -> bool:
    return not target.exists() or target.stat().st_mtime < _newest(inputs)


def _compile(target: Path, args: list[str]) -> None:
    """Runs cc into a temporary name, then renames: concurrent builds never
    see a half-written file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        cmd = [_compiler(), *CFLAGS, *INCLUDES, *args, "-o", str(tmp)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildFailed(f"{' '.join(cmd)}\n{done.stdout}{done.stderr}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _headers() -> list[Path]:
    return [*FAKE_DIR.glob("*.h"), *LIB_SRC.glob("*.h"), SHIM_DIR / "cudecl.h",
            SHIM_DIR / "tooljob.h"]


def build_fakecuda(build_dir: Path = DEFAULT_BUILD_DIR) -> FakeCuda:
    """Compiles libcuda.so.1 and every program in tests/fakecuda/progs/."""
    build_dir = Path(build_dir)
    lib_dir = build_dir / "lib"
    library = lib_dir / "libcuda.so.1"
    lib_sources = sorted(LIB_SRC.glob("*.c"))
    if _stale(library, [*lib_sources, *_headers()]):
        _compile(library, [*LIB_FLAGS, *map(str, lib_sources)])
    # The link-time name, for programs built with -lcuda.
    dev_link = lib_dir / "libcuda.so"
    if not dev_link.is_symlink():
        dev_link.unlink(missing_ok=True)
        try:
            dev_link.symlink_to("libcuda.so.1")
        except FileExistsError:
            pass

    programs: dict[str, Path] = {}
    prog_headers = [*_headers(), *PROG_SRC.glob("*.h")]
    for source in sorted(PROG_SRC.glob("*.c")):
        name = source.stem
        target = build_dir / "bin" / name
        if name in DLOPEN_PROGRAMS:
            link = ["-ldl"]
            inputs = [source, *prog_headers]
        else:
            link = [f"-L{lib_dir}", "-lcuda"]
            inputs = [source, *prog_headers, library]
        if _stale(target, inputs):
            _compile(target, [str(source), *link])
        programs[name] = target
    return FakeCuda(lib_dir=lib_dir, programs=programs)


if __name__ == "__main__":
    built = build_fakecuda(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_BUILD_DIR)
    print(built.lib_dir)
    for prog_name, path in built.programs.items():
        print(f"{prog_name} {path}")
