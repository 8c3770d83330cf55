"""Shared fixtures: the shim built from this checkout, and the stand-in driver."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sessions  # noqa: E402
from cli_run import Cudump, cli_runner  # noqa: E402
from fakecuda_build import FakeCuda, build_fakecuda  # noqa: E402


def _load_shim_build():
    spec = importlib.util.spec_from_file_location("shim_build", ROOT / "shim" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def shim_lib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """libcudump.so built from shim/ now, so the tests always test these sources."""
    lib = _load_shim_build().build_shim(tmp_path_factory.mktemp("shim"))
    old = os.environ.get("CUDUMP_SHIM")
    os.environ["CUDUMP_SHIM"] = str(lib)
    yield lib
    if old is None:
        os.environ.pop("CUDUMP_SHIM", None)
    else:
        os.environ["CUDUMP_SHIM"] = old


@pytest.fixture(scope="session")
def fake() -> FakeCuda:
    return build_fakecuda()


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str
    run_dir: Path


@pytest.fixture
def cudump_run(shim_lib: Path, fake: FakeCuda, tmp_path: Path):
    """Runs `cudump [options] PROGRAM` on the stand-in driver; returns what happened. cudump
    runs in a session of its own, every process of which is killed at the end."""

    def run(argv: list[str], *options: str, run_dir: Path | None = None,
            timeout: float = 60, env_extra: dict[str, str] | None = None) -> Ran:
        out = run_dir or tmp_path / "run"
        env = fake.env() | (env_extra or {})
        env["CUDUMP_SHIM"] = str(shim_lib)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        done = sessions.run([sys.executable, "-m", "cudump", *options, "--out", str(out),
                             "--", *argv], env=env, timeout=timeout, cwd=tmp_path)
        return Ran(done.returncode, done.stdout, done.stderr, out)

    return run


@pytest.fixture
def bare_run(fake: FakeCuda):
    """Runs a program on the stand-in driver without cudump."""

    def run(argv: list[str], timeout: float = 60,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return sessions.run(argv, env=fake.env() | (env_extra or {}), timeout=timeout)

    return run


@pytest.fixture
def cudump(shim_lib: Path, fake: FakeCuda, tmp_path: Path) -> Cudump:
    """`python -m cudump ARGS...` on the stand-in driver, with extra environment settings."""
    return cli_runner(shim_lib, fake.env(), tmp_path)


@pytest.fixture
def diverge(fake: FakeCuda) -> str:
    return str(fake.programs["diverge"])


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen]]:
    """subprocess.Popen(argv, **options) in a session of its own (tests/sessions.py): at the
    test's end, however it ends, every process of that session is killed, the programs
    under cudump included."""
    with contextlib.ExitStack() as stack:
        yield lambda argv, **options: stack.enter_context(sessions.session(argv, **options))
