"""`python -m cudump ARGS...` on the stand-in driver, for tests of the subcommands (diff,
bisect) that run cudump more than once: the `cudump` fixture in conftest.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sessions

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


Cudump = Callable[..., Done]


def cli_runner(shim_lib: Path, base: dict[str, str], tmp_path: Path) -> Cudump:
    """A runner of cudump with the stand-in's environment `base`, in tmp_path, with extra
    environment settings per call."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Done:
        full = dict(base)
        full["CUDUMP_SHIM"] = str(shim_lib)
        full["PYTHONPATH"] = str(ROOT) + os.pathsep + full.get("PYTHONPATH", "")
        full["TMPDIR"] = str(tmp_path / "tmp")
        (tmp_path / "tmp").mkdir(exist_ok=True)
        full.update(env or {})
        done = sessions.run([sys.executable, "-m", "cudump", *args], env=full, timeout=timeout,
                            cwd=tmp_path)
        return Done(done.returncode, done.stdout, done.stderr)

    return run
