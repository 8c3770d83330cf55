"""A launch in the user's terms: the scopes open on its thread when it was made (NVTX ranges,
PyTorch modules, JAX operations), the training step, and the line of the user's own code
that led to it.

The shim keeps a stack of open scopes per host thread. Each distinct (parent, kind, name) is
one node of a tree, numbered by the shim and announced once (MSG_SCOPE) before the first
launch that names it; a launch carries the number of its innermost node, the step, and the
number of a SOURCE node ("train.py:57"). This module turns those numbers back into names:
`ScopeTable.where(scope, step, source)` gives the `Where` that every output shows.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class ScopeKind(IntEnum):
    """What opened a scope (proto_scope.kind)."""

    RANGE = 1       # an NVTX range (push/pop, start/end), or a range a program named itself
    FORWARD = 2     # a PyTorch module's forward: its name is the module's path in its model
    BACKWARD = 3    # the same module's backward
    OP = 4          # an operation of a compiled program (a JAX named scope / HLO op_name)
    SOURCE = 5      # not a scope: a "file:line" a launch's `source` names (parent 0)


# The pass a module scope runs in, as records and reports name it.
PASSES = {ScopeKind.FORWARD: "forward", ScopeKind.BACKWARD: "backward"}


@dataclass(frozen=True)
class ScopeNode:
    id: int
    parent: int        # 0: outermost
    kind: ScopeKind
    name: str          # a range's message ("domain:message" outside the default domain),
                       # a module's path ("layer3.0.conv1"; its class name for a model's
                       # root), an operation's name, or "file:line"


# XLA's own NVTX ranges around each module and each kernel it runs ("TSL:XlaModule:#...#",
# "TSL:Thunk:#hlo_op=...#"; without "TSL:" in older XLA): its profiler's annotations, which
# name XLA's instructions, not the program's scopes. The operation XLA's dump gives a kernel
# says more (launches/process.py).
_COMPILER_ANNOTATION = re.compile(r"^(?:TSL:)?(?:XlaModule|Thunk):#")


def compiler_annotation(name: str) -> bool:
    """Whether a range is XLA's own annotation of what it runs, not one of the program's."""
    return _COMPILER_ANNOTATION.match(name) is not None


@dataclass(frozen=True)
class Where:
    """Where a launch came from, in the user's terms. Empty when nothing is known."""

    scopes: tuple[str, ...] = ()      # outermost first, as shown
    layer: str | None = None          # the innermost module's path (or the innermost
                                      # operation or range when no module is open)
    pass_: str | None = None          # "forward" | "backward" when a module is open
    step: int | None = None           # training steps completed before the launch (from 0)
    source: str | None = None         # "train.py:57": the user's own code that led to it
    collective: int | None = None     # collectives its process launched before it (where
                                      # it had launched any; launches/collectives.py)
    collective_op: str | None = None  # the last of them: "all-reduce"

    def __bool__(self) -> bool:
        return self.scoped or self.collective is not None

    @property
    def scoped(self) -> bool:
        """Whether the program said anything of it: a scope, a step or a source line."""
        return bool(self.scopes or self.step is not None or self.source)

    def collective_text(self) -> str | None:
        """'between all-reduce 41 and 42', where the process had launched a collective."""
        if self.collective is None:
            return None
        return f"between {self.collective_op or 'collective'} {self.collective} and " \
               f"{self.collective + 1}"

    def text(self, rank: int | None = None) -> str:
        """'in layer3.0.conv1 (forward, step 2, between all-reduce 41 and 42) at
        train.py:57, rank 1' (the parts known), or '' when nothing is; `rank` is the
        process's, where it has one."""
        parts: list[str] = []
        inside = [p for p in (self.pass_, None if self.step is None else f"step {self.step}",
                              self.collective_text()) if p]
        if self.layer:
            parts.append(f"in {self.layer}" + (f" ({', '.join(inside)})" if inside else ""))
        elif inside:
            parts.append(f"in {', '.join(inside)}")
        if self.source:
            parts.append(f"at {self.source}")
        text = " ".join(parts)
        if rank is not None:
            text = f"{text}, rank {rank}" if text else f"rank {rank}"
        return text

    def fields(self) -> dict[str, Any]:
        """The record fields of a manifest, trace or flight line: only those known."""
        out: dict[str, Any] = {}
        if self.scopes:
            out["scope"] = list(self.scopes)
        if self.layer is not None:
            out["layer"] = self.layer
        if self.pass_ is not None:
            out["pass"] = self.pass_
        if self.step is not None:
            out["step"] = self.step
        if self.source is not None:
            out["source"] = self.source
        if self.collective is not None:
            out["collective"] = self.collective
            if self.collective_op is not None:
                out["collective_op"] = self.collective_op
        return out

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> Where:
        """Back from a record's fields (what `fields` wrote; anything else is left out)."""
        scope = data.get("scope")
        scopes = tuple(s for s in scope if isinstance(s, str)) if isinstance(scope, list) else ()

        def text(name: str) -> str | None:
            value = data.get(name)
            return value if isinstance(value, str) else None

        def number(name: str) -> int | None:
            value = data.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) \
                and value >= 0 else None

        collective = number("collective")
        return cls(scopes=scopes, layer=text("layer"), pass_=text("pass"),
                   step=number("step"), source=text("source"), collective=collective,
                   collective_op=text("collective_op") if collective is not None else None)

    def matches(self, pattern: str) -> bool:
        """A `scope:` pattern (shell-style, case-sensitive) matches any open scope, or the
        source line."""
        names: Iterable[str] = self.scopes + ((self.source,) if self.source else ())
        return any(fnmatch.fnmatchcase(name, pattern) for name in names)


NOWHERE = Where()


@dataclass
class ScopeTable:
    """The scope nodes one process announced."""

    nodes: dict[int, ScopeNode] = field(default_factory=dict)

    def add(self, node: ScopeNode) -> None:
        self.nodes[node.id] = node

    def chain(self, scope: int) -> list[ScopeNode]:
        """The nodes from the outermost to `scope` (those announced; a cycle or an unknown
        parent ends it)."""
        out: list[ScopeNode] = []
        seen: set[int] = set()
        while scope and scope not in seen:
            seen.add(scope)
            node = self.nodes.get(scope)
            if node is None:
                break
            out.append(node)
            scope = node.parent
        out.reverse()
        return out

    def where(self, scope: int, step: int = 0, source: int = 0) -> Where:
        """A launch's wire values (proto_launch.scope, .step, .source) in names. `step` on
        the wire is the steps completed plus one, 0 where the process counts none."""
        chain = self.chain(scope)
        layer: str | None = None
        pass_: str | None = None
        for node in reversed(chain):
            if node.kind in PASSES:
                layer, pass_ = node.name, PASSES[node.kind]
                break
        if layer is None and chain:
            layer = chain[-1].name
        src = self.nodes.get(source) if source else None
        return Where(scopes=tuple(n.name for n in chain), layer=layer, pass_=pass_,
                     step=step - 1 if step > 0 else None,
                     source=src.name if src is not None and src.kind == ScopeKind.SOURCE
                     else None)
