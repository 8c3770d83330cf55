"""The traced program's environment under `--layers`: what makes its launches name their
layer, step and source line.

- CUDUMP_LAYERS=1, and cudump/target/site first on PYTHONPATH: a Python program loads
  cudump's sitecustomize (which runs the program's own after it), and its PyTorch modules
  and optimizer steps become scopes and steps (cudump/target).
- CUDUMP_MODULE_OUTPUTS=1 (--module-outputs): the PyTorch hooks also tell the shim each
  tensor a module returned (outputs.jsonl, cudump/rundir/outputs.py).
- CUDUMP_SOURCES=1: the shim names the line of the program's own Python code behind each
  launch.
- CUDUMP_XLA_FLAGS=`--xla_dump_to=RUN/xla --xla_dump_hlo_as_text`, and the same site folder
  first: once the program imports jax, cudump's sitecustomize adds them to XLA_FLAGS after
  the program's own (cudump/target/xla_flags.py). XLA writes each module it compiles there,
  and its optimized HLO names the JAX operation and line behind each kernel
  (cudump/rundir/xla.py), and the element types of its arguments, which XLA's kernels do not
  declare: NaN/Inf scans need them, so the dump is made under any scan (xla_dump_env), with
  or without --layers. Not XLA_FLAGS itself at the start: a program that sets its own flags
  only where none are set (`os.environ.setdefault`) would lose them, and run otherwise than
  bare. Only these two flags: XLA ends the program at a flag it does not know, and both are
  in every XLA. Where the program's XLA_FLAGS dump somewhere already, or the run directory's
  path has a space (XLA splits its flags at spaces), they are not added, and cudump says so.
  An XLA program that is not Python (or Python started without its site hooks, -S, -I) has
  no dump: its kernels' buffers have no types and are not scanned.
"""

from __future__ import annotations

import os
from pathlib import Path

from cudump.console import warn
from cudump.rundir.layout import XLA_DIR
from cudump.target import SITE_DIR
from cudump.target.xla_flags import XLA_VARIABLE


def _site_first(env: dict[str, str]) -> None:
    """cudump's site folder first on the program's PYTHONPATH (once)."""
    old = env.get("PYTHONPATH")
    if old is None or old.split(os.pathsep)[0] != SITE_DIR:
        env["PYTHONPATH"] = SITE_DIR + (os.pathsep + old if old else "")


def layers_env(base: dict[str, str], run_dir: Path, outputs: bool = False) -> dict[str, str]:
    env = dict(base)
    env["CUDUMP_LAYERS"] = "1"
    if outputs:
        env["CUDUMP_MODULE_OUTPUTS"] = "1"
    env["CUDUMP_SOURCES"] = "1"
    _site_first(env)
    return xla_dump_env(env, run_dir)


def xla_dump_env(base: dict[str, str], run_dir: Path) -> dict[str, str]:
    """The environment with XLA's dump of each compiled module into RUN/xla, asked for once
    the program imports jax (cudump/target/xla_flags.py)."""
    env = dict(base)
    dump = Path(os.path.abspath(run_dir)) / XLA_DIR
    if any(c.isspace() for c in str(dump)):
        warn(f"the run directory's path has a space, which XLA_FLAGS cannot hold: "
             f"XLA kernels are not named by their JAX operations, nor their buffers "
             f"scanned, in this run ({dump})")
        return env
    env[XLA_VARIABLE] = f"--xla_dump_to={dump} --xla_dump_hlo_as_text"
    _site_first(env)
    return env
