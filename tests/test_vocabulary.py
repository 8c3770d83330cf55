"""One vocabulary across the subcommands: --kernel PATTERN, --launch [PID:]N, RUN, --force for
every output path that exists, bisect's --batch-size, and the messages they share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from clirun import run_cli

from cudump.cli import _parser
from cudump.commands.bisect import BisectCommand
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord

ROOT = Path(__file__).resolve().parent.parent
PAINT = "cam::paint(float*, int)"


def make_run(root: Path, kernel: str = PAINT, pid: int = 42) -> Path:
    """Launches 1 and 2 of `kernel` in process `pid`: arg 0 before and after (8 snapshots
    would be too many to read; these are 4)."""
    root.mkdir()
    writer = ManifestWriter(root)
    for launch in (1, 2):
        for phase in ("before", "after"):
            name = f"l{launch}_{phase}.npy"
            np.save(root / name, np.arange(12, dtype=np.float32).reshape(3, 4) * launch)
            writer.append(SnapshotRecord(
                kernel=kernel, mangled="_Z5paint", launch=launch, occurrence=launch, pid=pid,
                grid=[1, 1, 1], block=[32, 1, 1], stream="0x0", arg=0, type="float*",
                phase=phase, address="0x7000", dtype="float32", shape=[3, 4], file=name))
    writer.close()
    return root


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run")


@pytest.fixture
def offline(fake, tmp_path):
    """A cudump subcommand in a process of its own, with the stand-in as libcuda.so.1."""

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        env = fake.env()
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run([sys.executable, "-m", "cudump", *argv], env=env,
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)

    return run


# ---- 5. bisect's batch is --batch-size (--batch K still taken, with a note) ---------------

def test_bisect_batch_size_and_the_old_spelling(capsys):
    code, _, err = run_cli(BisectCommand(), ["--batch-size", "0", "--rtol", "1e-3"], capsys)
    assert code == 2 and "--batch-size must be 1 or more, not 0" in err
    code, _, err = run_cli(BisectCommand(), ["--batch", "0", "--rtol", "1e-3"], capsys)
    assert code == 2
    assert "cudump bisect: note: --batch K is deprecated" in err
    assert "--batch-size must be 1 or more, not 0" in err
    assert "--batch-size K" in _parser(BisectCommand()).format_help()




# ---- 6. messages ----------------------------------------------------------------------------

def test_a_run_no_process_connected_to_says_so(cudump_run):
    ran = cudump_run([sys.executable, "-c", "pass"])
    assert ran.returncode == 0, ran.stderr
    last = ran.stderr.splitlines()[-1]
    assert "ran but no process connected to the controller" in last
    assert "never initialised CUDA" in last
