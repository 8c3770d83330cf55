"""Where the native shim library is, and the environment that preloads it."""

from __future__ import annotations

import os
from pathlib import Path

from cudump.errors import ShimNotFound

SHIM_NAME = "libcudump.so"


def shim_path() -> Path:
    """The built shim: CUDUMP_SHIM if set (for development), else the package's own copy."""
    override = os.environ.get("CUDUMP_SHIM")
    path = Path(override) if override else Path(__file__).resolve().parents[1] / "_lib" / SHIM_NAME
    if not path.is_file():
        raise ShimNotFound(
            f"the cudump shim is missing at {path}"
            + ("" if override else
               f" (this cudump was imported from {Path(__file__).resolve().parents[2]})")
            + "; build it with `pip install .` (it needs a C compiler) or point CUDUMP_SHIM "
            "at a built libcudump.so"
        )
    return path


def scopes_env(env: dict[str, str], step_range: str | None) -> str | None:
    """Sets, in the target's `env`, what has the shim keep scopes: the shim as NVTX's tool
    (NVTX_INJECTION64_PATH), CUDUMP_SCOPES=1 (the older libnvToolsExt's calls),
    CUDUMP_PACKAGE_DIR (whose frames are not the user's) and CUDUMP_STEP_RANGE. A user's
    own NVTX tool is kept (and the older library's calls are only forwarded): then the
    line to say, else None."""
    # Frames of cudump's own Python (its in-target hooks) are never a launch's source line.
    env["CUDUMP_PACKAGE_DIR"] = str(Path(__file__).resolve().parent.parent)
    if step_range is not None:
        env["CUDUMP_STEP_RANGE"] = step_range
    theirs = env.get("NVTX_INJECTION64_PATH")
    shim = str(shim_path())
    if theirs and theirs != shim:
        return (f"NVTX_INJECTION64_PATH is set ({theirs}): that tool gets the program's "
                "NVTX ranges, so scopes from NVTX are off")
    env["NVTX_INJECTION64_PATH"] = shim
    env["CUDUMP_SCOPES"] = "1"
    return None


def preload_env(base: dict[str, str], socket_name: str) -> dict[str, str]:
    """`base` with the shim first in LD_PRELOAD and the controller's socket named."""
    env = dict(base)
    shim = str(shim_path())
    existing = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != shim]
    env["LD_PRELOAD"] = " ".join([shim, *existing])
    env["CUDUMP_SOCKET"] = socket_name  # "@name": the abstract namespace
    return env
