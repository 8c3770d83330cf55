"""What the sitecustomize starts in the traced program: under --layers, the PyTorch hooks,
once torch is imported, where the shim's scope calls are in the process; under a scan or
--layers, XLA's dump flags once jax is imported (xla_flags.py)."""

from __future__ import annotations

import os
import sys
from types import ModuleType

from .importhook import after_import

_installed: list[object] = []          # the hooks, kept for the life of the process


def start() -> None:
    if os.environ.get("CUDUMP_LAYERS") == "1":
        after_import("torch", _on_torch)
    if os.environ.get("CUDUMP_XLA_FLAGS"):      # (xla_flags.XLA_VARIABLE: loaded only then)
        from .xla_flags import on_jax

        after_import("jax", on_jax)


def _on_torch(torch: ModuleType) -> None:
    try:
        from .shim import shim_scopes

        scopes = shim_scopes()
        if scopes is None:
            return
        from .torch_hooks import install

        _installed.append(install(torch, scopes))
    except Exception as err:
        sys.stderr.write(f"cudump: layers are off in this process: {type(err).__name__}: "
                         f"{err}\n")
