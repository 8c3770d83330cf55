"""What XLA's compiled modules say of their kernels: which JAX operation (its named scopes)
and which line of the program each fusion came from.

Under `cudump --layers` the controller has XLA dump each module it compiles as text into the
run directory (XLA_FLAGS `--xla_dump_to=RUN/xla --xla_dump_hlo_as_text`). A module's
optimized HLO (`module_NNNN.NAME.*after_optimizations.txt`) has one instruction per kernel
XLA emits, mostly fusions, each with metadata: `op_name="jit(train)/layer1/dot_general"`
(the jitted function, the named scopes, the primitive) and its source, either
`source_file=... source_line=N` or a `stack_frame_id` into the module's StackFrames,
FileLocations and FileNames tables (newer XLA). A GPU kernel is named after its instruction,
sanitized as XLA does for PTX: every character outside [A-Za-z0-9_$] becomes '_'
("loop_add_fusion.1" -> "loop_add_fusion_1"), and '_' goes before a leading digit.

Each kernel's arguments' element types come from the same instruction: XLA passes a
fusion's operands, then its outputs (a tuple's leaves in order), one pointer each, except
that a buffer slice passed twice is passed once (KernelArguments). The kernels' own
parameters are untyped pointers, so these are the only types a NaN/Inf scan has for them:
`args` holds each one's type and element count where the count of the kernel's parameters
says no slice was merged, and `one_type` the element type every operand and output share,
if one.

Limits: XLA may launch one kernel for several identical fusions (it reuses the kernel of the
first one): its name then gives the first fusion's operation. Calls into libraries (cuBLAS,
cuDNN custom calls) launch kernels named by the library, which no name here matches. A name
that two modules give to different operations is left out of `xla_ops` (which module's kernel
ran is not known from the name); `xla_ops_by_module` keeps them apart. A file that cannot be
read is passed over: this only annotates launches.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from cudump.rundir.layout import XLA_DIR
from cudump.rundir.reading import RunFileError, read_bytes

AFTER_OPTIMIZATIONS = "after_optimizations.txt"

# Opcodes that launch no kernel of their own.
_NO_KERNEL = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "conditional",
    "call", "after-all", "add-dependency", "partition-id", "replica-id", "opt-barrier",
    "domain", "iota-placeholder",
})

_MODULE = re.compile(r"^HloModule\s+([^\s,]+)")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([^\s(=]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"(?:^|[\s}\]])([a-z][a-z0-9-]*)\(")
_CALLS = re.compile(r"\bcalls=%?([^\s,}]+)")
_TO_APPLY = re.compile(r"\bto_apply=%?([^\s,}]+)")    # a reduction's or a sort's computation
_OP_NAME = re.compile(r'\bop_name="((?:[^"\\]|\\.)*)"')
_SOURCE_FILE = re.compile(r'\bsource_file="((?:[^"\\]|\\.)*)"')
_SOURCE_LINE = re.compile(r"\bsource_line=(\d+)")
_STACK_FRAME = re.compile(r"\bstack_frame_id=(\d+)")
_TABLE_ROW = re.compile(r"^(\d+)\s+(.*)$")
_FIELD = re.compile(r"(\w+)=(\d+)")
_UNSAFE = re.compile(r"[^A-Za-z0-9_$]")
# "f32[64,64]{1,0}": its element type and dimensions
_SHAPE = re.compile(r"(?<![\w.%])([a-z][a-z0-9]*)\[([^\]]*)\]")


class HloBuffer(NamedTuple):
    """One array an instruction reads or writes: its element type as HLO names it ("f32",
    "bf16", "s32"; None for a tuple, a token or a shape not written) and its element count
    (None where a dimension is dynamic or the shape is not known)."""

    type: str | None
    elements: int | None


UNKNOWN = HloBuffer(None, None)


@dataclass(frozen=True)
class XlaOp:
    module: str                  # the HLO module: "jit_train" for jax.jit(train)
    op_name: str                 # "jit(train)/layer1/dot_general": function, scopes, primitive
    source: str | None = None    # "train.py:57" (the file's name and the line), when known
    source_path: str | None = None   # the file as XLA recorded it
    # The instruction's operands, then its outputs (a tuple's leaves): the kernel's
    # arguments' buffers.
    operands: tuple[HloBuffer, ...] = ()
    outputs: tuple[HloBuffer, ...] = ()
    # The op_names of the operations a fusion's kernel runs (those with one), each once, in
    # the fused computation's order: a fusion's own op_name is one of them, and a NaN may
    # come from another (`encoder/dot_general` fused with `head/log`).
    fused: tuple[str, ...] = ()

    def args(self, count: int) -> tuple[HloBuffer, ...] | None:
        """The buffer of each of the kernel's `count` pointer arguments, or None where XLA
        merged arguments (a slice passed twice) so positions are not known."""
        buffers = self.operands + self.outputs
        return buffers if count == len(buffers) and buffers else None

    @property
    def one_type(self) -> str | None:
        """The element type all of the instruction's operands and outputs share, or None."""
        types = {b.type for b in self.operands + self.outputs}
        return types.pop() if len(types) == 1 else None


def kernel_name(instruction: str) -> str:
    """The name of the GPU kernel XLA emits for an instruction (SanitizeFunctionName)."""
    name = _UNSAFE.sub("_", instruction) or "__unnamed"
    if name[0].isdigit():
        name = "_" + name
    return name + "_" if name in ("_", "$") else name


@dataclass
class _Instruction:
    name: str
    opcode: str
    calls: str | None
    to_apply: str | None
    metadata: str
    operands: tuple[str, ...] = ()             # as written: "f32[8]{0} %x" or "%x"
    outputs: tuple[HloBuffer, ...] = ()


@dataclass
class _Module:
    name: str
    computations: dict[str, list[_Instruction]]
    roots: dict[str, _Instruction]
    tables: dict[str, dict[int, str]]


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _operands(body: str, start: int) -> list[str]:
    """The operands of an instruction whose operand list opens at body[start] ("("), split at
    its top-level commas."""
    depth, parts, begin = 0, [], start + 1
    for i in range(start, len(body)):
        c = body[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                parts.append(body[begin:i])
                break
        elif c == "," and depth == 1:
            parts.append(body[begin:i])
            begin = i + 1
    return [part for part in parts if part.strip()]


def _buffer(found: re.Match[str]) -> HloBuffer:
    elements = 1
    for dim in found.group(2).split(","):
        dim = dim.strip()
        if not dim:
            continue
        if not dim.isdigit():
            return HloBuffer(found.group(1), None)     # dynamic ("<=8") or not a number
        elements *= int(dim)
    return HloBuffer(found.group(1), elements)


def _shape(text: str) -> HloBuffer:
    """The buffer a shape says ("f32[8]{0} %x"); UNKNOWN for a tuple, a token or an
    operand written without its shape."""
    text = text.strip()
    if text.startswith("("):
        return UNKNOWN
    found = _SHAPE.match(text)
    return _buffer(found) if found else UNKNOWN


def _signature(body: str, opcode: re.Match[str] | None
               ) -> tuple[tuple[str, ...], tuple[HloBuffer, ...]]:
    """(operands as written, outputs: a tuple's leaves) of an instruction's text."""
    if opcode is None:
        return (), ()
    result = body[:opcode.start(1)].strip()
    outputs = (tuple(_buffer(m) for m in _SHAPE.finditer(result)) if result.startswith("(")
               else (_shape(result),))
    return tuple(o.strip() for o in _operands(body, opcode.end(1))), outputs


def _operand_buffers(instruction: _Instruction, named: dict[str, _Instruction]
                     ) -> tuple[HloBuffer, ...]:
    """Each operand's buffer: its shape written before it, or (newer XLA writes operands by
    name alone) the output of the instruction it names (`named`: its computation's, by
    name)."""
    buffers: list[HloBuffer] = []
    for operand in instruction.operands:
        found = _shape(operand)
        if found == UNKNOWN and operand and not operand.startswith("("):
            source = named.get(operand.split()[-1].lstrip("%"))
            if source is not None and len(source.outputs) == 1:
                found = source.outputs[0]
        buffers.append(found)
    return tuple(buffers)


def _parse(text: str) -> _Module | None:
    lines = text.splitlines()
    if not lines or not (head := _MODULE.match(lines[0])):
        return None
    module = _Module(head.group(1), {}, {}, {})
    table: dict[int, str] | None = None
    current: list[_Instruction] | None = None
    name = ""
    for line in lines[1:]:
        if not line.strip():
            table = None
            continue
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            table = module.tables.setdefault(line, {})
            continue
        if table is not None and (row := _TABLE_ROW.match(line)):
            table[int(row.group(1))] = row.group(2)
            continue
        if line.startswith("}"):
            current = None
            continue
        if current is None:
            if (comp := _COMPUTATION.match(line)) is not None:
                current = module.computations.setdefault(comp.group(2), [])
                name = comp.group(2)
            continue
        if (found := _INSTRUCTION.match(line)) is None:
            continue
        rest = found.group(2)
        body, _, metadata = rest.partition("metadata={")
        opcode = _OPCODE.search(body)
        calls = _CALLS.search(body)
        to_apply = _TO_APPLY.search(body)
        operands, outputs = _signature(body, opcode)
        instruction = _Instruction(found.group(1), opcode.group(1) if opcode else "",
                                   calls.group(1) if calls else None,
                                   to_apply.group(1) if to_apply else None, metadata,
                                   operands, outputs)
        current.append(instruction)
        if line.lstrip().startswith("ROOT"):
            module.roots[name] = instruction
    return module


def _source(module: _Module, metadata: str) -> tuple[str | None, str | None]:
    """(file name:line, the file as recorded) of an instruction's metadata."""
    path = _SOURCE_FILE.search(metadata)
    line = _SOURCE_LINE.search(metadata)
    if path and line:
        file = _unquote(path.group(1))
        return f"{os.path.basename(file)}:{line.group(1)}", file
    frame = _STACK_FRAME.search(metadata)
    if frame is None:
        return None, None
    fields = dict(_FIELD.findall(module.tables.get("StackFrames", {}).get(
        int(frame.group(1)), "")))
    location = dict(_FIELD.findall(module.tables.get("FileLocations", {}).get(
        int(fields.get("file_location_id", 0)), "")))
    name = module.tables.get("FileNames", {}).get(int(location.get("file_name_id", 0)))
    if name is None or "line" not in location:
        return None, None
    file = _unquote(name.strip().strip('"'))
    return f"{os.path.basename(file)}:{location['line']}", file


def _ops(module: _Module) -> dict[str, XlaOp]:
    # Computations inside a kernel: a fusion's, and those a reduction or a sort applies.
    inside = {c for body in module.computations.values() for i in body
              for c in ((i.calls if i.opcode == "fusion" else None), i.to_apply) if c}
    out: dict[str, XlaOp] = {}
    for computation, body in module.computations.items():
        if computation in inside:
            continue
        named = {i.name: i for i in body}
        for instruction in body:
            if instruction.opcode in _NO_KERNEL or not instruction.opcode:
                continue
            metadata = instruction.metadata
            if not _OP_NAME.search(metadata) and instruction.calls:
                inner = module.computations.get(instruction.calls, [])
                root = module.roots.get(instruction.calls)
                candidates = ([root] if root else []) + inner
                metadata = next((i.metadata for i in candidates if _OP_NAME.search(i.metadata)),
                                "")
            op_name = _OP_NAME.search(metadata)
            if op_name is None:
                continue
            source, path = _source(module, metadata)
            fused = (module.computations.get(instruction.calls, []) if instruction.calls
                     and instruction.opcode == "fusion" else [])
            fused_names = dict.fromkeys(_unquote(found.group(1)) for inner in fused
                                        if (found := _OP_NAME.search(inner.metadata)))
            out[kernel_name(instruction.name)] = XlaOp(
                module.name, _unquote(op_name.group(1)), source, path,
                _operand_buffers(instruction, named), instruction.outputs, tuple(fused_names))
    return out


def dump_files(dump_dir: Path) -> list[Path]:
    """The optimized modules' text files of an XLA dump folder, in name order."""
    try:
        entries = sorted(os.scandir(dump_dir), key=lambda e: e.name)
    except OSError:
        return []
    return [Path(e.path) for e in entries
            if e.name.endswith(AFTER_OPTIMIZATIONS) and e.is_file(follow_symlinks=False)]


def xla_ops_by_module(dump_dir: Path) -> dict[str, dict[str, XlaOp]]:
    """Each dumped module's kernels: {module: {kernel name: XlaOp}}."""
    out: dict[str, dict[str, XlaOp]] = {}
    for path in dump_files(dump_dir):
        try:
            text = read_bytes(path).decode("utf-8", "replace")
        except RunFileError:
            continue
        module = _parse(text)
        if module is not None:
            out.setdefault(module.name, {}).update(_ops(module))
    return out


def xla_ops(dump_dir: Path) -> dict[str, XlaOp]:
    """{kernel name: XlaOp} of every module in an XLA dump folder (a run's is RUN/xla); a
    name that modules give to different operations is left out."""
    out: dict[str, XlaOp] = {}
    clashes: set[str] = set()
    for ops in xla_ops_by_module(dump_dir).values():
        for name, op in ops.items():
            seen = out.get(name)
            if seen is not None and seen != replace(op, module=seen.module,
                                                    source_path=seen.source_path):
                clashes.add(name)
            out.setdefault(name, op)
    for name in clashes:
        del out[name]
    return out


def run_xla_ops(run_dir: Path) -> dict[str, XlaOp]:
    """The kernels of a run directory's XLA dump (none where there is none)."""
    return xla_ops(run_dir / XLA_DIR)
