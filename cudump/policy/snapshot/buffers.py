"""What a rule reads of one launch's arguments: which buffers (typed pointers, pointer words
in tracked allocations, pointers inside by-value structs, TMA tensor maps), and of each the
copy plan (geometry.py, cut where the next known buffer begins: extents.py; a tensor map's
own extent: tensormaps.py) and the tool that runs over it instead of a copy (a digest or a
NaN/Inf scan)."""

from __future__ import annotations

from typing import NamedTuple

from cudump.kernels.args import ArgValue, Number
from cudump.kernels.extents import (
    ALLOCATION_REST,
    CAPPED,
    TO_NEXT_BUFFER,
    cap_guess,
    cut_at_next,
)
from cudump.kernels.geometry import Allocation, CopyPlan, GeometryError, plan_copy
from cudump.kernels.tensormaps import TensorMap, tensormap_plan
from cudump.launches.process import FuncInfo, LaunchEvent
from cudump.policy.rules import ArgOverride, Rule
from cudump.policy.snapshot.nan import scan_mode, whole_elements
from cudump.policy.snapshot.planned import NOTHING, Buffer, base_name
from cudump.wire import protocol as p


class Target(NamedTuple):
    """One buffer a rule takes: its argument, the pointer value (None: the argument has no
    pointer at `where`), the byte offset of the pointer inside the argument, the override;
    or a tensor map at `where` inside the argument (`tmap`), which says its buffer whole."""

    index: int
    arg: ArgValue | None
    where: int
    override: ArgOverride | None
    tmap: TensorMap | None = None


def targets(rule: Rule, args: list[ArgValue], event: LaunchEvent
            ) -> tuple[list[Target], list[int]]:
    """(argument, the pointer value, byte offset inside the argument, override) of every
    buffer the rule takes, and the typed pointers `args: pointers` passed over because
    they point outside tracked memory. `args: pointers` takes typed pointers, untyped
    8-byte words in a tracked allocation, and every pointer-sized word inside a by-value
    argument (a struct such as PyTorch's std::array<char*, N>) that falls in a tracked
    allocation. A null pointer there is an argument left out (a bias, a mask), and a
    typed pointer outside tracked memory (cuBLAS's alpha and beta in host memory) is not
    a buffer cudump can read; a rule that names the argument still gets an error.
    A TMA tensor map in an argument the rule takes without an override is a buffer of its
    own (what the map describes), whichever way the rule names its arguments."""
    found: list[Target] = []
    untracked: list[int] = []
    maps: dict[int, list[Target]] = {}
    for (index, where), tmap in sorted(event.tensormaps.items()):
        maps.setdefault(index, []).append(Target(index, None, where, None, tmap))
    if rule.args == "pointers":
        # Every tensor map is a buffer (a by-value CUtensorMap is no pointer-like argument).
        found.extend(m for index, ms in sorted(maps.items()) if index not in rule.overrides
                     for m in ms)
    for index in rule.selected_args(args):
        override = rule.overrides.get(index)
        if override is None and index in maps and rule.args != "pointers":
            found.extend(maps[index])
            continue
        if rule.args == "pointers" and override is None and (index, 0) not in event.pointers:
            if (args[index].type is not None and args[index].value
                    and rule.option is None):
                untracked.append(index)
            continue  # a word that points nowhere is not a buffer
        arg, where = pointer_of(args[index], override)
        found.append(Target(index, arg, where, override))
    if rule.args != "pointers":
        return found, untracked
    taken = {t.index for t in found if t.tmap is None}
    # Arguments whose words are not looked into: those taken above, those a rule
    # overrides, and typed pointers (a by-value struct has many words).
    skipped = {i: i in taken or i in rule.overrides or a.looks_like_pointer
               for i, a in enumerate(args)}
    for (index, where) in sorted(event.pointers):
        if skipped.get(index, True):
            continue
        raw = args[index].raw[where:where + 8]
        if len(raw) != 8:
            continue
        word = ArgValue(index, None, raw, int.from_bytes(raw, "little"))
        found.append(Target(index, word, where, None))
    return found, untracked


def read_of(func: FuncInfo, rule: Rule, arg: ArgValue, alloc: Allocation | None,
            override: ArgOverride | None, values: dict[str, Number],
            next_start: int | None) -> Buffer:
    """What the rule reads of one buffer: the plan (None: nothing, as a scan of integers),
    how its extent was found where it runs to the end of its allocation or to the next
    buffer, and what cudump's kernel computes over it. `next_start`: where the next
    known buffer after the pointer begins in its allocation. Raises GeometryError.
    An untyped pointer the rule does not override is read as the kernel's compiler said
    (FuncInfo.arg_overrides: an XLA fusion's arrays)."""
    if override is None and arg.type is None:
        override = func.arg_overrides.get(arg.index)
    plan = plan_copy(arg, alloc, override, values)
    rest = (override is None or override.count is None and not override.is_2d) \
        and alloc is not None and alloc.kind != "pitched"
    extent = None
    if rest:
        # Another buffer further into the same allocation (a caching allocator's
        # neighbouring tensor) ends this one.
        cut = cut_at_next(plan, next_start)
        extent = ALLOCATION_REST if cut is plan else TO_NEXT_BUFFER
        capped = cap_guess(cut, alloc)
        extent = extent if capped is cut else CAPPED
        plan = capped
    tool = tool_of(rule, plan, func)
    if rule.is_scan and tool is None:
        return NOTHING   # not floating point: nothing to scan
    if tool is not None:
        plan = whole_elements(plan, tool)
        if plan.nbytes == 0:
            # Shorter than one element (cut where the next buffer begins): nothing to
            # scan, and the shim refuses a plan with an empty copy in it.
            return NOTHING
    return Buffer(plan, extent, tool)


def tool_of(rule: Rule, plan: CopyPlan, func: FuncInfo) -> p.ToolMode | None:
    """What cudump's kernel computes for this buffer, if anything: a digest, or a scan of
    floating-point elements (nan.scan_mode)."""
    if rule.is_digest:
        return p.ToolMode.DIGEST
    if not rule.is_scan:
        return None
    return scan_mode(plan, func)


def override_field(override: ArgOverride | None) -> int | None:
    """The byte offset of the pointer inside a by-value argument an override names, or None."""
    return override.field if override is not None else None


def check_is_pointer(func: FuncInfo, arg: ArgValue) -> None:
    """GeometryError naming the type when a rule asks for the buffer of an argument that the
    signature says is no pointer (and whose value is in no tracked allocation)."""
    ptype = arg.type
    if ptype is None or ptype.is_pointer or ptype.reference:
        return
    article = "an" if ptype.text[:1].lower() in "aeiou" else "a"
    inside = ("; for a pointer inside it give an override's field: BYTE"
              if arg.value is None and len(arg.raw) >= 8 else "")
    raise GeometryError(f"arg {arg.index} of {base_name(func)} is {article} {ptype.text}, "
                        f"not a pointer{inside}")


def pointer_of(arg: ArgValue, override: ArgOverride | None) -> tuple[ArgValue | None, int]:
    """The argument itself, or the pointer at `field` inside a by-value struct argument."""
    field_offset = override.field if override is not None else None
    if field_offset is None:
        return arg, 0
    raw = arg.raw[field_offset:field_offset + 8]
    if len(raw) != 8:
        return None, field_offset
    return ArgValue(arg.index, None, raw, int.from_bytes(raw, "little")), field_offset


def tensormap_buffer(func: FuncInfo, rule: Rule, tmap: TensorMap) -> Buffer:
    """What the rule reads of the tensor a map describes: its exact extent, as a copy, a
    digest or a scan. Raises GeometryError."""
    plan = tensormap_plan(tmap)
    tool = tool_of(rule, plan, func)
    if rule.is_scan and tool is None:
        return NOTHING   # not floating point: nothing to scan
    if tool is not None:
        plan = whole_elements(plan, tool)
    return Buffer(plan, "tensor-map", tool)


def pointer_values(args: list[ArgValue], event: LaunchEvent) -> list[tuple[int, Allocation]]:
    """Every address the launch's arguments hold that lies in a known allocation, with it;
    a tensor map's address counts too (a buffer begins there)."""
    values = [(tmap.address, tmap.alloc) for tmap in event.tensormaps.values()
              if tmap.alloc is not None]
    for (index, where), alloc in event.pointers.items():
        if index < len(args):
            raw = args[index].raw[where:where + 8]
            if len(raw) == 8:
                values.append((int.from_bytes(raw, "little"), alloc))
    return values
