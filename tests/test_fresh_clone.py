"""A fresh clone into a folder named `cudump`, used as the README says: from the clone's root,
the "Try it without a GPU" commands run as written (the stand-in driver built from the clone),
and `cudump bisect` runs there although the root holds the `cudump/` source folder.

cudump is installed as `pip install .` would install it, without the network: the clone's
package copied to a site directory with the shim in its `_lib/` (built from the same sources
for this session), and a console script on PATH that imports it. CUDUMP_SHIM is not set, so
the installed cudump and each of bisect's sides must find their own shim: a side that imported
the clone's source folder instead (which has no `_lib/`) fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sessions
from test_bisect_cwd import bisect_args, check_bisect_found_it
from test_readme_try import run_as_written, shown_commands

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def clone(shim_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The clone, and the environment of a shell in which cudump is installed from it."""
    if shutil.which("git") is None or _git("rev-parse", "HEAD", cwd=ROOT).returncode != 0:
        pytest.skip("needs git and a git checkout")
    top = tmp_path_factory.mktemp("fresh")
    root = top / "cudump"
    done = _git("clone", "-q", "--shared", str(ROOT), str(root), cwd=top)
    assert done.returncode == 0, done.stderr
    site = top / "site"
    shutil.copytree(root / "cudump", site / "cudump")
    assert not (root / "cudump" / "_lib" / shim_lib.name).exists()
    (site / "cudump" / "_lib").mkdir(exist_ok=True)
    shutil.copy2(shim_lib, site / "cudump" / "_lib" / shim_lib.name)
    bin_dir = top / "bin"
    bin_dir.mkdir()
    script = bin_dir / "cudump"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom cudump.cli import main\n"
                      "sys.exit(main())\n")
    script.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDUMP_SHIM", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env |= {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(site)}
    return root, env


def test_the_try_without_gpu_commands_run_in_a_fresh_clone(clone: tuple[Path, dict]) -> None:
    root, env = clone
    shown = shown_commands((root / "README.md").read_text(encoding="utf-8"))
    run_as_written(shown, root, env)
    assert (root / "tests" / "fakecuda" / "build" / "bin" / "diverge").is_file()
    assert (root / "cudump-out" / "1" / "manifest.jsonl").is_file()


def test_bisect_runs_from_a_fresh_clones_root(clone: tuple[Path, dict]) -> None:
    root, env = clone
    build = root / "tests" / "fakecuda" / "build"
    if not (build / "bin" / "diverge").is_file():
        done = subprocess.run([sys.executable, "tests/fakecuda_build.py"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    env = env | {"LD_LIBRARY_PATH": str(build / "lib"),
                 "PATH": f"{build / 'bin'}:{env['PATH']}"}
    helped = sessions.run(["cudump", "bisect", "--help"], env=env, cwd=root, timeout=60)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: cudump bisect"), \
        helped.stdout + helped.stderr
    done = sessions.run(["cudump", *bisect_args("diverge", root.parent / "work")], env=env,
                        cwd=root, timeout=180)
    check_bisect_found_it(done)
