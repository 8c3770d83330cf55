"""The shim's module graph as the compiler sees it, after macro expansion.

Each shim/x.c is compiled at -O0 with gcc's `-fcallgraph-info` (every call, with the
place its callee is defined or declared) and `-fdump-ipa-cgraph` (every function whose
address is taken: a callback is a use too). A function belongs to the module of the file
that defines it (x.c and x.h are module x; a static inline function of x.h is x's), or,
for one only declared, of the header that declares it. Calls made by code a macro
expands to count where the macro is expanded, which is what a reader of the source
cannot see and this graph can.

Each file is compiled from inside its folder, so the dumps name the shim's files without a
folder (and only those). Dumps are cached by the contents of the .c file and of every shim
header, so a check of a copy of shim/ with one file changed recompiles that file alone.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# The build's language and defines; -O0 so that nothing is inlined away.
FLAGS = ["-std=c11", "-O0", "-fPIC", "-D_GNU_SOURCE", "-pthread", "-w"]

_NODE = re.compile(r'node: \{ title: "([^"]+)" label: "([^"\\]+)\\n([^"]+?):\d+:\d+"'
                   r'( shape : ellipse)?')
_EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)" '
                   r'label: "([^"]+?):(\d+):\d+"')
_CGRAPH_FN = re.compile(r"^([^\s/]+)/\d+ \(", re.M)
_ADDR = re.compile(r"([^\s/]+)/\d+ \(addr\)")


@dataclass
class Dump:
    """What one translation unit says: its call graph and the addresses its functions take."""

    callgraph: str
    cgraph: str


@dataclass
class ModuleGraph:
    """module -> used module -> how (caller -> callee, at file:line)."""

    uses: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(dict))
    modules: set[str] = field(default_factory=set)

    def add(self, src: str, dst: str, why: str) -> None:
        self.modules |= {src, dst}
        if src != dst:
            self.uses[src].setdefault(dst, set()).add(why)

    def edges(self) -> dict[tuple[str, str], set[str]]:
        return {(s, d): why for s, used in self.uses.items() for d, why in used.items()}


def _compile(c_file: Path, include_dirs: list[Path], cache: Path) -> Dump:
    shim = c_file.parent
    key = hashlib.sha256(c_file.read_bytes())
    for h in sorted(shim.glob("*.h")):
        key.update(h.name.encode() + h.read_bytes())
    for d in include_dirs:
        for h in sorted(d.glob("*.h")):
            key.update(h.name.encode() + h.read_bytes())
    out = cache / f"{c_file.stem}-{key.hexdigest()[:20]}"
    if not (out / "done").exists():
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        subprocess.run(["gcc", *FLAGS, *(f"-I{d}" for d in include_dirs), "-fcallgraph-info",
                        "-fdump-ipa-cgraph", "-c", "-o", "/dev/null", "-dumpdir", f"{out}/",
                        "-dumpbase", c_file.stem, c_file.name], check=True, cwd=shim)
        (out / "done").touch()
    cgraph = next(out.glob(f"{c_file.stem}.*cgraph"))
    return Dump((out / f"{c_file.stem}.ci").read_text(), cgraph.read_text())


def module_graph(shim: Path, cache: Path, include_dirs: list[Path] | None = None) -> ModuleGraph:
    """The graph of shim/'s modules: who calls, or takes the address of, whose functions."""
    shim = shim.resolve()
    dumps = {c.stem: _compile(c, include_dirs or [], cache) for c in sorted(shim.glob("*.c"))}

    def module_of(path: str) -> str | None:
        return Path(path).stem if "/" not in path else None

    defined: dict[str, str] = {}                      # global function -> its module
    declared: dict[str, str] = {}                     # declared only, by a shim header
    local: dict[str, dict[str, str]] = defaultdict(dict)   # unit -> static function -> module
    nodes: dict[str, dict[str, tuple[str, str | None]]] = {}
    for unit, dump in dumps.items():
        seen = nodes[unit] = {}
        for title, name, path, external in _NODE.findall(dump.callgraph):
            mod = module_of(path)
            seen[title] = (name, mod)
            if mod is None:
                continue
            if ":" in title:
                local[unit][name] = mod
            elif external:
                declared.setdefault(name, mod)
            else:
                defined[name] = mod

    def owner(unit: str, name: str) -> str | None:
        return local[unit].get(name) or defined.get(name) or declared.get(name)

    graph = ModuleGraph()
    for unit, dump in dumps.items():
        graph.modules.add(unit)
        for src, dst, path, line in _EDGE.findall(dump.callgraph):
            (caller, a), (callee, b) = nodes[unit].get(src, (src, None)), nodes[unit].get(
                dst, (dst, None))
            a, b = owner(unit, caller) or a, owner(unit, callee) or b
            if a and b:
                graph.add(a, b, f"{caller} -> {callee} ({Path(path).name}:{line})")
        for block in re.split(r"\n(?=[^\s/]+/\d+ \()", dump.cgraph):
            head = _CGRAPH_FN.match(block)
            refs = re.search(r"^  References: (.*)$", block, re.M)
            if not head or not refs:
                continue
            a = owner(unit, head.group(1))
            for name in _ADDR.findall(refs.group(1)):
                b = owner(unit, name)
                if a and b and (name in defined or name in declared or name in local[unit]):
                    graph.add(a, b, f"{head.group(1)} -> &{name} ({unit}.c)")
    return graph


def read_layers(path: Path) -> list[tuple[str, list[str]]]:
    """shim/layers.txt: `name: module module …` a line, bottom layer first."""
    layers = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, mods = line.partition(":")
        if not sep or not mods.split():
            raise ValueError(f"{path}:{n}: expected 'layer: module …'")
        layers.append((name.strip(), mods.split()))
    return layers


def violations(graph: ModuleGraph, layers: list[tuple[str, list[str]]]) -> list[str]:
    """Every use of a module not strictly below the user in the declared order, and every
    module the graph has that the declaration leaves out (or names twice)."""
    rank: dict[str, int] = {}
    where: dict[str, str] = {}
    problems = []
    for name, mods in layers:
        for m in mods:
            if m in rank:
                problems.append(f"{m} is declared twice")
            rank[m], where[m] = len(rank), name
    for m in sorted(graph.modules - set(rank)):
        problems.append(f"{m} is in no declared layer")
    for (src, dst), why in sorted(graph.edges().items()):
        if src in rank and dst in rank and rank[dst] >= rank[src]:
            problems.append(
                f"{src} ({where[src]}) uses {dst} ({where[dst]}), which is not below it: "
                + "; ".join(sorted(why)[:3]))
    return problems
