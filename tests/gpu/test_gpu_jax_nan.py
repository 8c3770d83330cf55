"""A JAX program's NaN found and named on a GPU: XLA's kernels declare no element types, so
the scan reads each argument as the array XLA's dump of the module says it is; the report
names the JAX operation (its named scopes) and the line, from the same dump. The program's
fusion runs `encoder`'s matmul and tanh and `head`'s log of a negative in one kernel, named
after the matmul: the report names every scope it runs."""

from __future__ import annotations

import sys

import pytest
from gpurun import run, under_cudump

pytestmark = pytest.mark.gpu

PROGRAM = """\
import os
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0"
import jax
import jax.numpy as jnp


@jax.jit
def f(x):
    with jax.named_scope("encoder"):
        h = jnp.tanh(x @ x.T)
    with jax.named_scope("head"):
        return jnp.log(h - 2.0)     # log of a negative: NaN from finite inputs


print(float(jnp.sum(jnp.isnan(f(jnp.ones((64, 64)))))))
"""


@pytest.mark.parametrize("layers", [False, True])
def test_a_jax_nan_is_named_by_its_scopes_and_line(workdir, tmp_path, layers):
    pytest.importorskip("jax")
    program = tmp_path / "jax_nan.py"
    program.write_text(PROGRAM)
    out = tmp_path / "run"
    extra = ["--check-nan", "--max-bytes", "1G"] + (["--layers"] if layers else [])
    ran = run(under_cudump([sys.executable, str(program)], out, extra=extra), workdir,
              timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().endswith("4096.0"), ran.stdout
    reports = [line for line in ran.stderr.splitlines() if line.startswith("cudump: NaN/Inf")]
    assert reports, ran.stderr[-3000:]
    first = reports[0]
    assert "encoder/dot_general, fused with head/sub, head/log" in first, first
    assert "at jax_nan.py:" in first and "4096 of 4096" in first, first
    assert "its inputs were finite" in first, first
