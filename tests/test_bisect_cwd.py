"""`cudump bisect` starts its sides as the cudump that is running, whatever the working
directory holds: a `cudump/` folder there (a checkout's root, or anything named so) must not
shadow it. The outer cudump is started with `-P` (no working directory on sys.path), so that
only the sides could meet the decoy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sessions
from fakecuda_build import FakeCuda

ROOT = Path(__file__).resolve().parent.parent


def bisect_args(diverge: str, work: Path) -> list[str]:
    """A tiny bisect on the stand-in driver: `diverge` run with DIVERGE_AT=5 on side B."""
    return ["bisect", "--env-b", "DIVERGE_AT=5", "--out", str(work), "--", diverge]


def check_bisect_found_it(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SHADOWED" not in done.stdout + done.stderr
    assert "first divergent: launch 18 of vecAdd" in done.stdout


def bisect_from(cwd: Path, shim_lib: Path, fake: FakeCuda, diverge: str, work: Path):
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib),
                        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return sessions.run([sys.executable, "-P", "-m", "cudump", *bisect_args(diverge, work)],
                        env=env, cwd=cwd, timeout=180)


def test_bisect_with_a_decoy_cudump_package_in_the_working_directory(
        shim_lib: Path, fake: FakeCuda, diverge: str, tmp_path: Path) -> None:
    decoy = tmp_path / "here" / "cudump"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('SHADOWED-BY-THE-WORKING-DIRECTORY')\n")
    (decoy / "__main__.py").write_text("raise SystemExit('SHADOWED-BY-THE-WORKING-DIRECTORY')\n")
    check_bisect_found_it(bisect_from(decoy.parent, shim_lib, fake, diverge, tmp_path / "work"))


def test_bisect_from_the_checkouts_root(shim_lib: Path, fake: FakeCuda, diverge: str,
                                        tmp_path: Path) -> None:
    check_bisect_found_it(bisect_from(ROOT, shim_lib, fake, diverge, tmp_path / "work"))
