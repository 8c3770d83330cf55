"""The command line that starts this same cudump again (bisect's sides), from any directory.

`python -m cudump` would not do: `-m` puts the working directory first on sys.path, ahead of
PYTHONPATH and site-packages, so a `cudump/` folder there (a checkout's root) shadows the
cudump that is running. Instead the interpreter runs with `-P` (no working directory on
sys.path) and `-c` code that puts the directory this package was imported from first on
sys.path before importing it. The environment is left alone: nothing leaks into the
traced program's PYTHONPATH.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cudump


def package_parent() -> Path:
    """The directory the running `cudump` package was imported from."""
    return Path(cudump.__file__).resolve().parent.parent


def cudump_argv(*args: str) -> list[str]:
    """`cudump ARGS...`, as the cudump that is running, whatever the working directory."""
    code = (f"import sys; sys.path.insert(0, {str(package_parent())!r}); "
            "sys.argv[0] = 'cudump'; from cudump.cli import main; raise SystemExit(main())")
    return [sys.executable, "-P", "-c", code, *args]
