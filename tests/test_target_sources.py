"""The line of the program's own code behind a PyTorch module's launches (--layers): the
innermost frame outside the installed packages, the standard library and cudump."""

import json
import os
import subprocess
import sys
from pathlib import Path

from cudump.target.sources import UserLines

HERE = Path(__file__).resolve()


def test_the_innermost_users_frame_is_named_relative_to_the_cwd(tmp_path: Path) -> None:
    lines = UserLines()
    line = lines.line(1)
    assert line is not None
    path, number = line.rsplit(":", 1)
    assert Path(path).resolve() == HERE and int(number) > 0


def test_frames_of_installed_packages_and_cudump_are_skipped(tmp_path: Path) -> None:
    """A user's file that calls into the standard library, which calls back into a function
    of the user's: the innermost user frame wins; called from the stdlib only, the user's
    caller is named."""
    user = tmp_path / "train.py"
    user.write_text(
        "import functools, json, sys\n"
        f"sys.path.insert(0, {str(HERE.parents[1])!r})\n"
        "from cudump.target.sources import UserLines\n"
        "lines = UserLines()\n"
        "def probe():\n"
        "    return lines.line(1)\n"
        "inner = functools.reduce(lambda a, b: probe(), [1, 2])\n"
        "outer = functools.reduce(lambda a, b: lines.line(1), [1, 2])\n"
        "print(json.dumps([inner, outer]))\n")
    out = subprocess.run([sys.executable, str(user)], cwd=tmp_path, capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": ""})
    assert json.loads(out.stdout) == ["train.py:6", "train.py:8"]
