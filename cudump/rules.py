"""Rule files: which kernels to snapshot, when, and how to read their buffers.

Format (YAML). A file holds `rules:` and a list of rules; a bare list of
rules, or a single rule mapping, is accepted too::

    rules:
      - name: zed-stereo                 # optional; defaults to the kernel pattern
        kernel: "device::FrP0k5607tPV*"  # required, see below
        match: demangled                 # demangled (default) | mangled | base
        skip: 0                          # leave out the first N matching launches
        every: 1                         # then take every N-th one ...
        count: 10                        # ... at most N of them (default: no limit)
        args: [0, 2, 3]                  # argument indexes, or `pointers` (the default)
        when: both                       # before | after | both (default)
        format: both                     # npy | png | both (default)
        overrides:                       # per argument index: how to read its buffer
          2: {dtype: uint8, channels: 4, width: arg5, height: arg6, pitch: arg4}
          7: {dtype: float32, count: "arg5 * arg6", range: [0, 1]}

`kernel` is a glob: `*` is any run of characters, `?` one character, and every
other character stands for itself (brackets too, since C++ names hold them).
With `match: demangled` it must match the whole demangled name, with or without
its return type (`void ns::k<int>(float*)` or `ns::k<int>(float*)`); `match:
base` matches the bare function name (`k`: no namespaces, template arguments
or parameters, as Nsight Compute's base names); `match: mangled` the symbol
(`_Z1kPf`). `re:<regex>` is a Python regular expression searched anywhere in
the same text, with and without the return type (`re:FrP0k` matches any name
containing FrP0k; `re:^device::` matches `void device::k(int)`).

Launches are counted per rule and per process, from 1, among the launches the
rule's pattern matches. `when` and `format` also take lists (`[before, after]`).

`overrides` settings: `dtype` is a numpy name (uint8, int16, float32, ...) or
a C/CUDA element type (uchar4, float2, unsigned short, __half ...); a vector
type sets `channels` too. `channels`, `width` (elements per row), `height`
(rows), `pitch` (bytes from one row to the next) and `count` (elements of a
1-D buffer) are numbers or expressions over the launch's argument values
(`arg4`, `arg5 * 2`, `(arg1 + 255) // 256 * 256`, `min(arg5, 1920)`; see
cudump.expr). `range: [low, high]` is the value range PNGs of float data are
rendered with. An override replaces the element type of the signature: a
`dtype` without `channels` means one channel.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import yaml

from cudump.args import ArgValue
from cudump.elements import NUMPY_DTYPES, element_type
from cudump.errors import RuleError
from cudump.expr import Expr, ExprError, parse_expr
from cudump.signature import parse_signature

PHASES = frozenset({"before", "after"})
FORMATS = frozenset({"npy", "png"})
SUBJECTS = ("demangled", "mangled", "base")
_Subject = Literal["demangled", "mangled", "base"]
RULE_KEYS = ("name", "kernel", "match", "skip", "count", "every", "args", "when", "format",
             "overrides", "action")
ACTIONS = ("snapshot", "break")
OVERRIDE_KEYS = ("dtype", "channels", "width", "height", "pitch", "count", "range", "field")


# ---------------------------------------------------------------- model


@dataclass(frozen=True)
class Matcher:
    pattern: str                 # as written, `re:` prefix included
    subject: _Subject
    regex: re.Pattern[str]
    is_regex: bool

    def matches(self, demangled: str, mangled: str) -> bool:
        if self.subject == "mangled":
            candidates = [mangled]
        else:
            sig = parse_signature(demangled)
            if self.subject == "base":
                candidates = [sig.base_name]
            else:
                text = demangled.strip()
                candidates = [text, text[len(sig.return_type):].lstrip()]
        test = self.regex.search if self.is_regex else self.regex.fullmatch
        return any(test(c) is not None for c in candidates)


@dataclass
class ArgOverride:
    dtype: str | None = None
    channels: Expr | None = None
    width: Expr | None = None
    height: Expr | None = None
    pitch: Expr | None = None
    count: Expr | None = None
    range: tuple[float, float] | None = None
    # The argument is a struct passed by value (e.g. std::array<char*, 3>):
    # snapshot the buffer of the pointer stored at this byte offset in it.
    field: int | None = None

    @property
    def is_2d(self) -> bool:
        return self.width is not None or self.height is not None or self.pitch is not None


@dataclass
class Rule:
    name: str
    path: Path
    line: int
    matcher: Matcher
    skip: int = 0
    count: int | None = None
    every: int = 1
    args: list[int] | Literal["pointers"] = "pointers"
    when: frozenset[str] = PHASES
    formats: frozenset[str] = FORMATS
    overrides: dict[int, ArgOverride] = field(default_factory=dict)
    action: str = "snapshot"      # "snapshot" | "break" (stop at the prompt)

    def matches(self, demangled: str, mangled: str) -> bool:
        """Whether the rule wants this function; the caller caches it per function."""
        return self.matcher.matches(demangled, mangled)

    def selects(self, match_number: int) -> bool:
        """Whether the n-th matching launch (1-based, per process) is snapshotted."""
        k = match_number - self.skip - 1
        if k < 0 or k % self.every:
            return False
        return self.count is None or k // self.every < self.count

    def selected_args(self, args: Sequence[ArgValue]) -> list[int]:
        """Indexes of the launch's arguments to snapshot.

        `pointers` takes every argument that looks like a pointer, and those
        the rule gives overrides for.
        """
        if self.args == "pointers":
            return [a.index for a in args if a.looks_like_pointer or a.index in self.overrides]
        present = {a.index for a in args}
        return [i for i in self.args if i in present]


# ---------------------------------------------------------------- loading


def load_rules(paths: Sequence[Path]) -> list[Rule]:
    """Load and check rule files, in order. Raises RuleError on the first problem."""
    rules: list[Rule] = []
    for path in paths:
        rules.extend(_load_file(Path(path)))
    return rules


def _load_file(path: Path) -> list[Rule]:
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RuleError(where, None, None, "no such rule file") from None
    except IsADirectoryError:
        raise RuleError(where, None, None, "is a directory, not a rule file") from None
    except UnicodeDecodeError:
        raise RuleError(where, None, None, "not UTF-8 text") from None
    except OSError as err:
        raise RuleError(where, None, None, f"cannot read: {err.strerror}") from None
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        return _Reader(where, path, loader).file(root)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = err.problem or err.context or "malformed"
        raise RuleError(where, line, None,
                        f"YAML syntax error: {problem} (check indentation and quoting)") from None
    except yaml.YAMLError as err:
        raise RuleError(where, None, None, f"YAML syntax error: {err}") from None
    finally:
        loader.dispose()


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
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return repr(str(value))


def _glob_regex(pattern: str) -> re.Pattern[str]:
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.DOTALL)


def _resolve_dtype(name: str) -> tuple[str, int | None] | None:
    """(numpy dtype, channels or None) for a dtype a rule states."""
    if name in NUMPY_DTYPES:
        return name, None
    elem = element_type(name)
    if elem is None:
        return None
    return elem.dtype, elem.channels


class _Reader:
    """Walks the composed YAML nodes so that every problem can name its line."""

    def __init__(self, where: str, path: Path, loader: yaml.SafeLoader) -> None:
        self.where = where
        self.path = path
        self.loader = loader

    def error(self, node: yaml.Node | None, fieldname: str | None, problem: str) -> RuleError:
        return RuleError(self.where, _line(node) if node is not None else None, fieldname,
                         problem)

    def scalar(self, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return None
        return self.loader.construct_object(node)

    def items(self, node: yaml.MappingNode, allowed: Sequence[str], prefix: str
              ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """key -> (key node, value node); unknown and repeated keys are errors."""
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node)
            name = str(key)
            if name not in allowed:
                close = difflib.get_close_matches(name, allowed, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise self.error(key_node, prefix + name,
                                 f"unknown key; {hint}(expected one of: {', '.join(allowed)})")
            if name in out:
                raise self.error(key_node, prefix + name, "appears twice")
            out[name] = (key_node, value_node)
        return out

    # -- structure

    def file(self, root: yaml.Node | None) -> list[Rule]:
        if root is None:
            raise self.error(None, None, "empty rule file; expected 'rules:' and a list of rules")
        if isinstance(root, yaml.SequenceNode):
            return self.rule_list(root)
        if isinstance(root, yaml.MappingNode):
            keys = {str(self.scalar(k)) for k, _ in root.value}
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
        if "kernel" not in entries:
            raise self.error(node, "kernel", "missing; every rule needs a kernel pattern such "
                             "as 'device::FrP0k5607tPV*' or 're:FrP0k'")
        subject = self.choice(entries.get("match"), "match", SUBJECTS, "demangled")
        matcher = self.matcher(entries["kernel"][1], subject)
        name = matcher.pattern
        if "name" in entries:
            name_node = entries["name"][1]
            value = self.scalar(name_node)
            if not isinstance(value, str) or not value:
                raise self.error(name_node, "name",
                                 f"expected a string, got {_kind(name_node, value)}")
            name = value
        args = self.args(entries.get("args"))
        rule = Rule(
            name=name,
            path=self.path,
            line=_line(node),
            matcher=matcher,
            skip=self.whole(entries.get("skip"), "skip", 0, 0),
            count=self.whole(entries.get("count"), "count", 1, None),
            every=self.whole(entries.get("every"), "every", 1, 1),
            args=args,
            when=self.phases(entries.get("when"), "when", PHASES, "before, after or both"),
            formats=self.phases(entries.get("format"), "format", FORMATS, "npy, png or both"),
            overrides=self.overrides(entries.get("overrides"), args),
            action=self.choice(entries.get("action"), "action", ACTIONS, "snapshot"),
        )
        return rule

    # -- fields

    def matcher(self, node: yaml.Node, subject: str) -> Matcher:
        value = self.scalar(node)
        if not isinstance(value, str):
            raise self.error(node, "kernel",
                             f"expected a pattern string, got {_kind(node, value)}")
        if value.startswith("re:"):
            source = value[3:]
            if not source:
                raise self.error(node, "kernel", "empty regular expression after 're:'")
            try:
                regex = re.compile(source)
            except re.error as err:
                raise self.error(node, "kernel", f"invalid regular expression {source!r}: "
                                 f"{err.msg} at position {err.pos}") from None
            return Matcher(value, cast(_Subject, subject), regex, True)
        if not value.strip():
            raise self.error(node, "kernel", "empty pattern")
        return Matcher(value, cast(_Subject, subject), _glob_regex(value), False)

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
              default: int | None) -> Any:
        if entry is None:
            return default
        node = entry[1]
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(node, fieldname, f"expected a whole number >= {minimum}, "
                             f"got {_kind(node, value)}")
        return value

    def args(self, entry: tuple[yaml.Node, yaml.Node] | None) -> list[int] | Literal["pointers"]:
        if entry is None:
            return "pointers"
        node = entry[1]
        if isinstance(node, yaml.SequenceNode) and node.value:
            indexes: list[int] = []
            for item in node.value:
                value = self.scalar(item)
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise self.error(item, "args", "argument index must be a whole number "
                                     f">= 0, got {_kind(item, value)}")
                if value in indexes:
                    raise self.error(item, "args", f"argument {value} is listed twice")
                indexes.append(value)
            return indexes
        value = self.scalar(node)
        if value == "pointers":
            return "pointers"
        raise self.error(node, "args", "expected a list of argument indexes such as [0, 2] "
                         f"or 'pointers', got {_kind(node, value)}")

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
        for key in ("channels", "width", "height", "pitch", "count"):
            if key in entries:
                setattr(result, key, self.expression(entries[key][1], f"{prefix}.{key}"))
        if "dtype" in entries:
            dnode = entries["dtype"][1]
            value = self.scalar(dnode)
            resolved = _resolve_dtype(value) if isinstance(value, str) else None
            if resolved is None:
                raise self.error(dnode, f"{prefix}.dtype", f"unknown dtype {_kind(dnode, value)}"
                                 "; use a numpy name (uint8, uint16, int32, float16, float32, "
                                 "...) or a CUDA type (uchar4, float2, ...)")
            result.dtype, channels = resolved
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
            fnode = entries["field"][1]
            value = self.scalar(fnode)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value % 8:
                raise self.error(fnode, f"{prefix}.field",
                                 f"expected the byte offset of a pointer inside the argument "
                                 f"(0, 8, 16, ...), got {_kind(fnode, value)}")
            result.field = value
        return result

    def expression(self, node: yaml.Node, fieldname: str) -> Expr:
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(node, fieldname, "expected a number or an expression such as "
                             f"'arg5 * 2', got {_kind(node, value)}")
        try:
            return parse_expr(value)
        except ExprError as err:
            raise self.error(node, fieldname, f"bad expression {str(value)!r}: {err}") from None

    def value_range(self, node: yaml.Node, fieldname: str) -> tuple[float, float]:
        values = [self.scalar(v) for v in node.value] \
            if isinstance(node, yaml.SequenceNode) else []
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(values) != 2 or len(numbers) != 2 or not numbers[0] < numbers[1]:
            shown = f"[{', '.join(_kind(v, x) for v, x in zip(node.value, values, strict=True))}]"\
                if isinstance(node, yaml.SequenceNode) else _kind(node, self.scalar(node))
            raise self.error(node, fieldname, f"expected [low, high] with low < high, got {shown}")
        return float(numbers[0]), float(numbers[1])
