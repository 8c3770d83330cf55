"""XLA's dump asked for in the traced program (controller/target_env.py): once the program has
imported jax, and so has set whatever XLA_FLAGS of its own it sets first, cudump's flags
(CUDUMP_XLA_FLAGS) go after its own. XLA reads XLA_FLAGS when its first backend starts, after
the import. A program whose flags dump somewhere already keeps them, and is told so."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from types import ModuleType

XLA_VARIABLE = "CUDUMP_XLA_FLAGS"


def add_dump_flags(environ: MutableMapping[str, str]) -> None:
    ours = environ.get(XLA_VARIABLE, "").strip()
    if not ours:
        return
    flags = environ.get("XLA_FLAGS", "").strip()
    if ours in flags:                       # a child process of the program's: added already
        return
    if "--xla_dump_to" in flags:
        sys.stderr.write("cudump: XLA_FLAGS has its own --xla_dump_to: kept, so XLA kernels "
                         "are not named by their JAX operations, nor their buffers scanned, "
                         "in this run\n")
        return
    environ["XLA_FLAGS"] = f"{flags} {ours}".strip()


def on_jax(_jax: ModuleType) -> None:
    try:
        add_dump_flags(os.environ)
    except Exception as err:                # never into the program
        sys.stderr.write(f"cudump: XLA's dump not asked for: {type(err).__name__}: {err}\n")
