"""Checking a rule file's YAML nodes, field by field, into rules (rule.Rule): every problem is
a RuleError that names the file, the line and the field."""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

import yaml

from cudump.errors import RuleError
from cudump.kernels.elements import NUMPY_DTYPES, element_type
from cudump.kernels.expr import Expr, ExprError, parse_expr
from cudump.kernels.pattern import SUBJECTS, KernelPattern, PatternError, Subject
from cudump.policy.rules.rule import (
    DIGEST_FORMATS,
    PHASES,
    SCAN_FORMATS,
    STANDALONE_FORMATS,
    Action,
    ArgOverride,
    Rule,
)
from cudump.rundir import formats as file_formats
from cudump.wire.protocol import NO_LIMIT

ACTIONS = ("snapshot", "break")
RULE_KEYS = ("name", "kernel", "match", "skip", "count", "every", "args", "when", "format",
             "overrides", "action", "replay", "scope")
# Keys that only make sense for a rule that takes snapshots.
SNAPSHOT_KEYS = ("args", "when", "format", "overrides", "replay")
OVERRIDE_KEYS = ("dtype", "channels", "width", "height", "pitch", "count", "range", "field")
GEOMETRY_KEYS = ("channels", "width", "height", "pitch", "count")
MAX_CONSTANT = 1 << 48       # a constant width, count ... beyond this fits no device buffer
MAX_PARAM_BYTES = 32764      # the largest kernel parameter block (CUDA 12.1+, Volta+)
# skip, every and count as proto_selector holds them (count NO_LIMIT means no limit).
MAX_SKIP = (1 << 64) - 1
MAX_EVERY = (1 << 32) - 1
MAX_COUNT = NO_LIMIT - 1


def _names() -> list[str]:
    """The names of the formats that write files, in the registry's order (npy, png)."""
    return [fmt.name for fmt in file_formats.in_order()]


def _one_line(text: str, limit: int = 200) -> str:
    """Control characters escaped and long text shortened, so an error stays one line."""
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def rule_error(where: str, line: int | None, fieldname: str | None,
                problem: str) -> RuleError:
    return RuleError(where, line, _one_line(fieldname, 80) if fieldname else None,
                     _one_line(problem, 400))


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _kind(node: yaml.Node, value: Any = None) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return _short(_text(value))
    if isinstance(value, float):
        return repr(value)
    return _short(repr(_text(value)))


def _short(text: str, limit: int = 60) -> str:
    """Long values shortened in the middle, so the problem after them stays readable."""
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[:keep - keep // 2] + "…" + text[len(text) - keep // 2:]


def _text(value: Any) -> str:
    """str(value), also for integers too long for str() (hexadecimal YAML can make them)."""
    try:
        return str(value)
    except ValueError:
        return "a number too large to show"


def _resolve_dtype(name: str) -> tuple[str, int | None, str | None] | None:
    """(numpy dtype, channels or None, note) for a dtype a rule states: `bfloat16` (which
    numpy lacks) is its uint16 bits, as __nv_bfloat16 is."""
    if name in NUMPY_DTYPES:
        return name, None, None
    elem = element_type("__nv_bfloat16" if name == "bfloat16" else name)
    if elem is None:
        return None
    return elem.dtype, elem.channels, elem.note


def _finite(value: Any) -> float | None:
    """A YAML number as a finite float, or None (not a number, infinite, NaN, too large)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


class NodeReader:
    """Reads composed YAML nodes so that every problem can name its line: scalars, mappings
    of known keys, and the kinds of values rules hold."""

    def __init__(self, where: str, path: Path, loader: yaml.SafeLoader) -> None:
        self.where = where
        self.path = path
        self.loader = loader

    def error(self, node: yaml.Node | None, fieldname: str | None, problem: str) -> RuleError:
        return rule_error(self.where, _line(node) if node is not None else None, fieldname,
                           problem)

    def scalar(self, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return None
        try:
            return self.loader.construct_object(node)
        except yaml.YAMLError:
            raise
        except Exception as err:  # noqa: BLE001 - e.g. a timestamp 2001-13-45, !!bool maybe
            kind = str(node.tag).rsplit(":", 1)[-1]
            detail = "" if isinstance(err, KeyError) else f": {_text(err)}"
            raise self.error(node, None, f"cannot read {_short(repr(node.value))} as a "
                             f"{kind}{detail}") from None

    def items(self, node: yaml.MappingNode, allowed: Sequence[str], prefix: str
              ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """key -> (key node, value node); unknown and repeated keys are errors."""
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node)
            name = _text(key)
            if name not in allowed:
                close = difflib.get_close_matches(name, allowed, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise self.error(key_node, prefix + name,
                                 f"unknown key; {hint}(expected one of: {', '.join(allowed)})")
            if name in out:
                raise self.error(key_node, prefix + name, "appears twice")
            out[name] = (key_node, value_node)
        return out

    def choice(self, entry: tuple[yaml.Node, yaml.Node] | None, fieldname: str,
               options: Sequence[str], default: str) -> str:
        if entry is None:
            return default
        node = entry[1]
        value = self.scalar(node)
        if value not in options:
            raise self.error(node, fieldname, f"expected one of {', '.join(options)}, "
                             f"got {_kind(node, value)}")
        return str(value)

    def whole(self, entry: tuple[yaml.Node, yaml.Node] | None, fieldname: str, minimum: int,
              default: int | None, maximum: int) -> Any:
        if entry is None:
            return default
        node = entry[1]
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(node, fieldname, f"expected a whole number >= {minimum}, "
                             f"got {_kind(node, value)}")
        if value > maximum:
            raise self.error(node, fieldname, f"{_kind(node, value)} is too large: at most "
                             f"{maximum} (the shim holds it in {maximum.bit_length()} "
                             "bits)")
        return value

    def phases(self, entry: tuple[yaml.Node, yaml.Node] | None, fieldname: str,
               allowed: frozenset[str], spelled: str) -> frozenset[str]:
        if entry is None:
            return allowed
        node = entry[1]
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        chosen: set[str] = set()
        for item in items:
            value = self.scalar(item)
            if value == "both" and not isinstance(node, yaml.SequenceNode):
                return allowed
            if value not in allowed:
                raise self.error(item, fieldname,
                                 f"expected {spelled}, got {_kind(item, value)}")
            chosen.add(str(value))
        if not chosen:
            raise self.error(node, fieldname, f"expected {spelled}, got an empty list")
        return frozenset(chosen)

    def expression(self, node: yaml.Node, fieldname: str) -> Expr:
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(node, fieldname, "expected a number or an expression such as "
                             f"'arg5 * 2', got {_kind(node, value)}")
        try:
            return parse_expr(value)
        except ExprError as err:
            if not isinstance(value, str):      # a YAML number: inf, nan, 0x<many digits>
                raise self.error(node, fieldname,
                                 f"got {_kind(node, value)}: {err.problem}") from None
            raise self.error(node, fieldname,
                             f"bad expression {_kind(node, value)}: {err}") from None

    def value_range(self, node: yaml.Node, fieldname: str) -> tuple[float, float]:
        if isinstance(node, yaml.SequenceNode):
            items = node.value[:3]
            values = [self.scalar(v) for v in items]
            shown = ", ".join(_kind(v, x) for v, x in zip(items, values, strict=True))
            shown = f"[{shown}{', ...' if len(node.value) > 3 else ''}]"
        else:
            values, shown = [], _kind(node, self.scalar(node))
        bounds = [_finite(v) for v in values]
        if len(values) == 2 and len(node.value) == 2 and None not in bounds:
            low, high = cast(list[float], bounds)
            if low < high:
                return low, high
        raise self.error(node, fieldname,
                         f"expected [low, high], finite numbers with low < high, got {shown}")


class RuleReader(NodeReader):
    """A rule file's structure, its rules and their argument overrides."""

    def file(self, root: yaml.Node | None) -> list[Rule]:
        if root is None:
            raise self.error(None, None, "empty rule file; expected 'rules:' and a list of rules")
        if isinstance(root, yaml.SequenceNode):
            return self.rule_list(root)
        if isinstance(root, yaml.MappingNode):
            keys = {_text(self.scalar(k)) for k, _ in root.value}
            if keys & set(RULE_KEYS) and "rules" not in keys:
                return [self.rule(root)]  # a file holding a single rule
            entries = self.items(root, ("rules",), "")
            if "rules" not in entries:
                raise self.error(root, "rules", "missing; expected 'rules:' and a list of rules")
            return self.rule_list(entries["rules"][1])
        raise self.error(root, None, "expected 'rules:' and a list of rules, got "
                         f"{_kind(root, self.scalar(root))}")

    def rule_list(self, node: yaml.Node) -> list[Rule]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, "rules",
                             f"expected a list of rules, got {_kind(node, self.scalar(node))}")
        if not node.value:
            raise self.error(node, "rules",
                             "the list is empty; add a rule such as '- kernel: \"name*\"'")
        return [self.rule(item) for item in node.value]

    def rule(self, node: yaml.Node) -> Rule:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, "rules", "each rule must be a mapping with a 'kernel:' key, "
                             f"got {_kind(node, self.scalar(node))}")
        entries = self.items(node, RULE_KEYS, "")
        if "kernel" not in entries and "scope" not in entries:
            raise self.error(node, "kernel", "missing; every rule needs a kernel pattern such "
                             "as 'device::FrP0k5607tPV*' or 're:FrP0k'")
        subject = self.choice(entries.get("match"), "match", SUBJECTS, "demangled")
        matcher = (self.matcher(entries["kernel"][1], cast(Subject, subject))
                   if "kernel" in entries else KernelPattern("*"))
        scope = self.scope(entries["scope"][1]) if "scope" in entries else None
        action = self.choice(entries.get("action"), "action", ACTIONS, "snapshot")
        name = matcher.text if scope is None else (
            f"scope:{scope}" if "kernel" not in entries else f"{matcher.text} scope:{scope}")
        if "name" in entries:
            name_node = entries["name"][1]
            value = self.scalar(name_node)
            if not isinstance(value, str) or not value:
                raise self.error(name_node, "name",
                                 f"expected a string, got {_kind(name_node, value)}")
            name = value
        rule = Rule(
            name=name,
            path=self.path,
            line=_line(node),
            matcher=matcher,
            actions=Action.BREAK if action == "break" else Action.SNAPSHOT,
            skip=self.whole(entries.get("skip"), "skip", 0, 0, MAX_SKIP),
            count=self.whole(entries.get("count"), "count", 1, None, MAX_COUNT),
            every=self.whole(entries.get("every"), "every", 1, 1, MAX_EVERY),
            scope=scope,
        )
        if action == "break":
            self.no_snapshot_keys(entries)
            rule.when = rule.formats = frozenset()
            return rule
        rule.args = self.args(entries.get("args"))
        rule.when = self.phases(entries.get("when"), "when", PHASES, "before, after or both")
        rule.formats = self.formats(entries.get("format"))
        rule.actions = Action.of_formats(rule.formats)
        rule.overrides = self.overrides(entries.get("overrides"), rule.args)
        if "replay" in entries:
            self.replay(rule, entries)
        return rule

    def replay(self, rule: Rule, entries: dict[str, tuple[yaml.Node, yaml.Node]]) -> None:
        """replay: true takes every buffer before and after as .npy; args and when would
        leave the replay without some of what it needs."""
        node = entries["replay"][1]
        value = self.scalar(node)
        if not isinstance(value, bool):
            raise self.error(node, "replay", f"expected true or false, got {_kind(node, value)}")
        if not value:
            return
        for name in ("args", "when"):
            if name in entries:
                raise self.error(entries[name][0], name,
                                 "a rule with 'replay: true' takes every buffer of the launch, "
                                 f"before and after; drop '{name}' (or write a second rule)")
        if rule.formats & (DIGEST_FORMATS | SCAN_FORMATS):
            raise self.error(entries["format"][1], "format",
                             "'replay: true' needs the buffers' bytes; use "
                             f"{file_formats.spelled(_names())}, not {next(iter(rule.formats))}")
        rule.actions |= Action.CAPTURE
        rule.formats = rule.formats | {file_formats.NPY.name}   # what a replay reads

    def no_snapshot_keys(self, entries: dict[str, tuple[yaml.Node, yaml.Node]]) -> None:
        for key in SNAPSHOT_KEYS:
            if key in entries:
                raise self.error(entries[key][0], key,
                                 "a rule with 'action: break' stops at the launch and takes "
                                 f"no snapshots; drop '{key}' or use 'action: snapshot'")

    def matcher(self, node: yaml.Node, subject: Subject) -> KernelPattern:
        value = self.scalar(node)
        if not isinstance(value, str):
            raise self.error(node, "kernel",
                             f"expected a pattern string, got {_kind(node, value)}")
        try:
            return KernelPattern(value, subject)
        except PatternError as err:
            raise self.error(node, "kernel", str(err)) from None

    def scope(self, node: yaml.Node) -> str:
        """`scope:`: a glob over the names of the scopes open at a launch (and its source
        line), as a `scope:GLOB` pattern takes it."""
        value = self.scalar(node)
        if not isinstance(value, str) or not value.strip():
            raise self.error(node, "scope", "expected a glob over scope names such as "
                             f"'layer3.*' or 'train.py:57', got {_kind(node, value)}")
        if value.startswith("scope:"):
            raise self.error(node, "scope", f"write the glob alone ('{value[6:]}'): the "
                             "field already says it is a scope")
        return value

    def args(self, entry: tuple[yaml.Node, yaml.Node] | None) -> list[int] | Literal["pointers"]:
        if entry is None:
            return "pointers"
        node = entry[1]
        if isinstance(node, yaml.SequenceNode) and node.value:
            indexes: list[int] = []
            seen: set[int] = set()
            for item in node.value:
                value = self.scalar(item)
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise self.error(item, "args", "argument index must be a whole number "
                                     f">= 0, got {_kind(item, value)}")
                if value in seen:
                    raise self.error(item, "args", f"argument {value} is listed twice")
                seen.add(value)
                indexes.append(value)
            return indexes
        value = self.scalar(node)
        if value == "pointers":
            return "pointers"
        raise self.error(node, "args", "expected a list of argument indexes such as [0, 2] "
                         f"or 'pointers', got {_kind(node, value)}")

    def formats(self, entry: tuple[yaml.Node, yaml.Node] | None) -> frozenset[str]:
        """The formats that write files (npy, png: rundir.formats), both (all of them); or
        digest or check-nan, which stand alone (they write no files)."""
        value = self.scalar(entry[1]) if entry is not None else None
        if isinstance(value, str) and value in STANDALONE_FORMATS:
            return STANDALONE_FORMATS[value]
        if entry is not None and isinstance(entry[1], yaml.SequenceNode):
            for item in entry[1].value:
                alone = self.scalar(item)
                if isinstance(alone, str) and alone in STANDALONE_FORMATS:
                    raise self.error(item, "format", f"{alone} stands alone (it writes no "
                                     f"files); write format: {alone}, or "
                                     f"{'/'.join(_names())} in a rule of its own")
        spelled = file_formats.spelled([*_names(), "both", *STANDALONE_FORMATS])
        return self.phases(entry, "format", file_formats.names(), spelled)

    def overrides(self, entry: tuple[yaml.Node, yaml.Node] | None,
                  args: list[int] | Literal["pointers"]) -> dict[int, ArgOverride]:
        if entry is None:
            return {}
        node = entry[1]
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, "overrides", "expected a mapping from argument index to "
                             "settings, e.g. {2: {dtype: uint8}}, got "
                             f"{_kind(node, self.scalar(node))}")
        out: dict[int, ArgOverride] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node)
            if isinstance(key, str) and key.isdigit():
                key = int(key)
            if isinstance(key, bool) or not isinstance(key, int) or key < 0:
                raise self.error(key_node, "overrides", "argument index must be a whole "
                                 f"number >= 0, got {_kind(key_node, key)}")
            if key in out:
                raise self.error(key_node, f"overrides.{key}", "appears twice")
            if args != "pointers" and key not in args:
                raise self.error(key_node, f"overrides.{key}",
                                 f"argument {key} is not in 'args' {args}; add it there")
            out[key] = self.override(value_node, f"overrides.{key}")
        return out

    def override(self, node: yaml.Node, prefix: str) -> ArgOverride:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, prefix, f"expected a mapping of settings "
                             f"({', '.join(OVERRIDE_KEYS)}), got {_kind(node, self.scalar(node))}")
        entries = self.items(node, OVERRIDE_KEYS, prefix + ".")
        result = ArgOverride()
        for key in GEOMETRY_KEYS:
            if key in entries:
                setattr(result, key, self.geometry(entries[key][1], f"{prefix}.{key}"))
        if "dtype" in entries:
            dnode = entries["dtype"][1]
            value = self.scalar(dnode)
            resolved = _resolve_dtype(value) if isinstance(value, str) else None
            if resolved is None:
                raise self.error(dnode, f"{prefix}.dtype", f"unknown dtype {_kind(dnode, value)}"
                                 "; use a numpy name (uint8, uint16, int32, float16, float32, "
                                 "...), bfloat16 or a CUDA type (uchar4, float2, ...)")
            result.dtype, channels, result.note = resolved
            if channels is not None and channels > 1:
                if result.channels is not None:
                    raise self.error(entries["channels"][0], f"{prefix}.channels",
                                     f"dtype {value!r} already has {channels} channels; drop "
                                     f"'channels' or give dtype {result.dtype}")
                result.channels = parse_expr(channels)
        if result.count is not None and result.is_2d:
            raise self.error(entries["count"][0], f"{prefix}.count",
                             "cannot be combined with width, height or pitch; use count for "
                             "1-D buffers and width/height/pitch for images")
        if "range" in entries:
            result.range = self.value_range(entries["range"][1], f"{prefix}.range")
        if "field" in entries:
            result.field = self.field_offset(entries["field"][1], f"{prefix}.field")
        return result

    def field_offset(self, node: yaml.Node, fieldname: str) -> int:
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value % 8:
            raise self.error(node, fieldname,
                             f"expected the byte offset of a pointer inside the argument "
                             f"(0, 8, 16, ...), got {_kind(node, value)}")
        if value + 8 > MAX_PARAM_BYTES:
            raise self.error(node, fieldname,
                             f"byte offset {_kind(node, value)} is beyond the largest kernel "
                             f"parameter block ({MAX_PARAM_BYTES} bytes)")
        return value

    def geometry(self, node: yaml.Node, fieldname: str) -> Expr:
        """An expression for a whole number >= 1; checked now when it is a constant."""
        expr = self.expression(node, fieldname)
        try:
            expr.check()
            if expr.names():
                return expr      # its value depends on the launch: checked per launch
            value = expr.evaluate({})
        except ExprError as err:
            raise self.error(node, fieldname,
                             f"bad expression {_short(repr(expr.text))}: {err}") from None
        shown = _text(value) if expr.text == _text(value) else f"{expr.text!r} = {value!r}"
        if not math.isfinite(value) or value != int(value) or value < 1:
            raise self.error(node, fieldname, f"expected a whole number >= 1, got {shown}")
        if value > MAX_CONSTANT:
            raise self.error(node, fieldname, f"{shown} is larger than any device buffer "
                             f"(at most {MAX_CONSTANT})")
        return expr
