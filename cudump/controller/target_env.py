"""The traced program's environment under `--layers`: what makes its launches name their
layer, step and source line.

- CUDUMP_LAYERS=1, and cudump/target/site first on PYTHONPATH: a Python program loads
  cudump's sitecustomize (which runs the program's own after it), and its PyTorch modules
  and optimizer steps become scopes and steps (cudump/target).
- CUDUMP_SOURCES=1: the shim names the line of the program's own Python code behind each
  launch.
- XLA_FLAGS gains `--xla_dump_to=RUN/xla --xla_dump_hlo_as_text` (after the program's own
  flags): XLA writes each module it compiles there, and its optimized HLO names the JAX
  operation and line behind each kernel (cudump/rundir/xla.py), and the element types of its
  arguments, which XLA's kernels do not declare: NaN/Inf scans need them, so the dump is
  made under any scan (xla_dump_env), with or without --layers. Only these two flags: XLA
  ends the program at a flag it does not know, and both are in every XLA. Where the
  program's XLA_FLAGS dump somewhere already, or the run directory's path has a space (XLA
  splits its flags at spaces), they are left as they are, and cudump says so.
"""

from __future__ import annotations

import os
from pathlib import Path

from cudump.console import warn
from cudump.rundir.layout import XLA_DIR
from cudump.target import SITE_DIR


def layers_env(base: dict[str, str], run_dir: Path) -> dict[str, str]:
    env = dict(base)
    env["CUDUMP_LAYERS"] = "1"
    env["CUDUMP_SOURCES"] = "1"
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = SITE_DIR + (os.pathsep + old if old else "")
    return xla_dump_env(env, run_dir)


def xla_dump_env(base: dict[str, str], run_dir: Path) -> dict[str, str]:
    """The environment with XLA's dump of each compiled module into RUN/xla."""
    env = dict(base)
    flags = env.get("XLA_FLAGS", "")
    dump = Path(os.path.abspath(run_dir)) / XLA_DIR
    if "--xla_dump_to" in flags:
        warn("XLA_FLAGS has its own --xla_dump_to: kept, so XLA kernels are not "
             "named by their JAX operations, nor their buffers scanned, in this run")
    elif any(c.isspace() for c in str(dump)):
        warn(f"the run directory's path has a space, which XLA_FLAGS cannot hold: "
             f"XLA kernels are not named by their JAX operations, nor their buffers "
             f"scanned, in this run ({dump})")
    else:
        env["XLA_FLAGS"] = " ".join(
            f for f in (flags.strip(), f"--xla_dump_to={dump}", "--xla_dump_hlo_as_text") if f)
    return env
