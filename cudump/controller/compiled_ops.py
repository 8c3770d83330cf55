"""What a compiled program's own compiler says each kernel does (--layers): XLA names its
kernels after fusions, and its dump of each optimized module (RUN/xla, rundir.xla) holds the
op_name (`jit(f)/jit(main)/encoder/dot_general`, from jax.named_scope and the traced
function) and the source line of each. A kernel's function is announced after its module is
compiled, so the dump holds it by then: the folder is read again only when a name is not yet
known and the folder has changed since it was last read."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cudump.launches.scopes import Where
from cudump.rundir.layout import XLA_DIR
from cudump.rundir.xla import XlaOp, xla_ops


def op_where(op: XlaOp) -> Where:
    """An operation as a launch's where: its op_name's parts are the scopes; the layer is
    the part after the traced functions (`encoder/dot_general`)."""
    parts = tuple(part for part in op.op_name.split("/") if part)
    named = [part for part in parts if not part.startswith(("jit(", "pjit(", "pmap("))]
    return Where(scopes=parts, layer="/".join(named) or op.op_name, source=op.source)


class CompiledOps:
    """The kernels of one run's XLA dump, by kernel name."""

    def __init__(self, run_dir: Path) -> None:
        self.dump = run_dir / XLA_DIR
        self.ops: dict[str, Where] = {}
        self.seen: tuple[int, int] | None = None   # (entries, mtime) when last read
        self.lock = threading.Lock()

    def _state(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.dump)
            return (len(os.listdir(self.dump)), st.st_mtime_ns)
        except OSError:
            return None

    def lookup(self, kernel: str) -> Where | None:
        with self.lock:
            where = self.ops.get(kernel)
            if where is not None:
                return where
            state = self._state()
            if state is None or state == self.seen:
                return None
            self.seen = state
            self.ops = {name: op_where(op) for name, op in xla_ops(self.dump).items()}
            return self.ops.get(kernel)
