"""What a compiled program's own compiler says each kernel does (--layers): XLA names its
kernels after fusions, and its dump of each optimized module (RUN/xla, rundir.xla) holds the
op_name (`jit(f)/jit(main)/encoder/dot_general`, from jax.named_scope and the traced
function) and the source line of each. A kernel's function is announced after its module is
compiled, so the dump holds it by then: the folder is read again only when a name is not yet
known and the folder has changed since it was last read.

XLA's kernels take untyped pointers; the dump says what each holds (xla.py): its element
type and count, which every rule then reads the argument as, unless it overrides it
(FuncInfo.arg_overrides): a NaN/Inf scan covers exactly the array, whatever lies after it in
XLA's preallocated memory, and a snapshot is an array of its type. Where XLA merged two
arguments (one buffer passed twice), positions are known only when every operand and output
has one type (then the type alone is given, and the extent is found as for any untyped
pointer); otherwise nothing is, and the kernel's buffers are not scanned: a guess could read
an int32 index as float and report a NaN that is not there."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cudump.kernels.elements import hlo_element_type
from cudump.kernels.expr import parse_expr
from cudump.kernels.overrides import ArgOverride
from cudump.launches.process import FuncInfo
from cudump.launches.scopes import Where
from cudump.rundir.layout import XLA_DIR
from cudump.rundir.xla import HloBuffer, XlaOp, xla_ops

POINTER = 8     # an XLA kernel's every parameter is a buffer's address


def _named(op_name: str) -> str:
    """An op_name without its traced functions: `encoder/dot_general`."""
    parts = [part for part in op_name.split("/") if part]
    return "/".join(p for p in parts if not p.startswith(("jit(", "pjit(", "pmap("))) or op_name


def op_where(op: XlaOp) -> Where:
    """An operation as a launch's where: its op_name's parts are the scopes; the layer is
    the part after the traced functions (`encoder/dot_general`), and, for a fusion of
    operations of other named scopes, those too (`encoder/dot_general, fused with
    head/log`): the kernel runs them all, and a NaN may be any one's."""
    parts = tuple(part for part in op.op_name.split("/") if part)
    layer = _named(op.op_name)
    scope = layer.rpartition("/")[0]
    others = [n for n in dict.fromkeys(_named(f) for f in op.fused)
              if n != layer and n.rpartition("/")[0] != scope]
    if others:
        layer = f"{layer}, fused with {', '.join(others)}"
    return Where(scopes=parts, layer=layer, source=op.source)


def arg_overrides(op: XlaOp, params: list[tuple[int, int]] | None
                  ) -> dict[int, ArgOverride]:
    """How each of a kernel's arguments is read, by index, from its operation (the kernel's
    parameters, (offset, size) each, as the driver gives them)."""
    if not params or any(size != POINTER for _, size in params):
        return {}
    buffers = op.args(len(params))
    if buffers is None:
        if op.one_type is None:
            return {}
        buffers = (HloBuffer(op.one_type, None),) * len(params)
    out: dict[int, ArgOverride] = {}
    for index, buffer in enumerate(buffers):
        element = hlo_element_type(buffer.type) if buffer.type else None
        if element is None:
            continue
        count = parse_expr(buffer.elements) if buffer.elements else None
        out[index] = ArgOverride(dtype=element.dtype, note=element.note, count=count)
    return out


class CompiledOps:
    """The kernels of one run's XLA dump, by kernel name."""

    def __init__(self, run_dir: Path) -> None:
        self.dump = run_dir / XLA_DIR
        self.ops: dict[str, XlaOp] = {}
        self.seen: tuple[int, int] | None = None   # (entries, mtime) when last read
        self.lock = threading.Lock()

    def _state(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.dump)
            return (len(os.listdir(self.dump)), st.st_mtime_ns)
        except OSError:
            return None

    def describe(self, func: FuncInfo) -> None:
        """Give a kernel function its operation and its arguments' element types, if the
        dump describes it."""
        op = self.lookup(func.mangled)
        if op is not None:
            func.op = op_where(op)
            func.arg_overrides = arg_overrides(op, func.params)

    def lookup(self, kernel: str) -> XlaOp | None:
        with self.lock:
            op = self.ops.get(kernel)
            if op is not None:
                return op
            state = self._state()
            if state is None or state == self.seen:
                return None
            self.seen = state
            self.ops = xla_ops(self.dump)
            return self.ops.get(kernel)
