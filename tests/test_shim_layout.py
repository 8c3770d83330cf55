"""The shim's file layout.

The shim is layered: every file calls only files below it, so a change to one
file can be understood by reading it and what it uses, never what uses it.
This test keeps it that way:

(a) declared layers: shim/layers.txt lists the modules bottom first, and every
    use of a function of another module (a call, or its address taken as a
    callback) goes to a module listed before the user's. The graph is gcc's,
    after macro expansion (tests/shim_callgraph.py), so a call inside a macro
    counts; planted edits show the check sees what it must;
(b) one header per file for what that file defines: every non-static function
    of x.c is declared in x.h, x.h declares nothing defined elsewhere, and a
    header without a .c of its own declares no functions;
(c) no #include cycle among the shim's headers;
(d) no lock crosses a function boundary: a function that calls
    pthread_mutex_lock(&X) (or timedlock) also calls pthread_mutex_unlock(&X).

A file and its header are one unit ("module"): a static inline function in
x.h belongs to x. For (b) and (d) the scanner is deliberately simple: comments,
strings and preprocessor lines are dropped, and functions are found as
`name(...) {` at the top level. Function names made by the X-macro tables of api.h are
matched by their prefix (GENERATED below).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from graphs import find_cycle
from shim_callgraph import ModuleGraph, module_graph, read_layers, violations

SHIM = Path(__file__).resolve().parent.parent / "shim"

# Functions declared by a table-driven macro rather than by name: their prefix,
# the header that declares them, the token that header's macro pastes, and
# whether files other than its own may define them. (The entries and hooks of
# api.h's families are static to hooks.c, but cuGetProcAddress's, declared by
# name in interpose.h.)
GENERATED = {
    "shim_real_": ("interpose.h", "shim_real_##sym", False),
}

KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "_Alignof", "alignof", "_Static_assert",
    "defined", "do", "else", "case", "goto", "_Generic", "__attribute__", "typeof", "__typeof__",
}

_TOKEN = re.compile(
    r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
_IDENT = re.compile(r"[A-Za-z_]\w*")


def strip(text: str) -> str:
    """Comments, strings and character literals blanked; preprocessor lines dropped."""

    def blank(m: re.Match) -> str:
        s = m.group(0)
        if s.startswith("/"):
            return " " * len(s) if "\n" not in s else re.sub(r"[^\n]", " ", s)
        return s[0] + " " * (len(s) - 2) + s[-1]

    text = _TOKEN.sub(blank, text)
    out, cont = [], False
    for line in text.split("\n"):
        is_pp = cont or line.lstrip().startswith("#")
        cont = is_pp and line.rstrip().endswith("\\")
        out.append("" if is_pp else line)
    return "\n".join(out)


def includes(path: Path) -> list[str]:
    return re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.M)


def _match(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


class Func:
    def __init__(self, name: str, static: bool, body: str | None, exported: bool = False):
        self.name, self.static, self.body, self.exported = name, static, body, exported


def top_level(text: str) -> list[Func]:
    """Function definitions (body) and prototypes (body None) at file scope."""
    funcs: list[Func] = []
    i, n, start = 0, len(text), 0
    while i < n:
        c = text[i]
        if c in ";":
            start = i + 1
            i += 1
        elif c == "{":
            # a struct, union, enum or initializer at file scope
            i = _match(text, i, "{", "}")
        elif c == "(":
            head = text[start:i]
            m = re.search(r"([A-Za-z_]\w*)\s*$", head)
            close = _match(text, i, "(", ")")
            j = close
            # attributes and the like between ')' and '{' or ';'
            while j < n and text[j] not in "{;=,":
                if text[j] == "(":
                    j = _match(text, j, "(", ")")
                else:
                    j += 1
            name = m.group(1) if m else None
            if name and re.fullmatch(r"[A-Z0-9_]+", name):
                # a macro invocation (an X-macro table): no declaration of its own
                i, start = close, close
                continue
            if text[i + 1:].lstrip().startswith("*"):
                # `R (*name)(...)`: a pointer, not a function
                i = close
                continue
            # `(*name)` declarators and typedefs of function types are not functions
            is_decl = (name and name not in KEYWORDS and not re.search(r"\btypedef\b", head)
                       and not head.rstrip().endswith("*)") and "(" not in head)
            if j < n and text[j] == "{":
                end = _match(text, j, "{", "}")
                if is_decl:
                    funcs.append(Func(name, bool(re.search(r"\bstatic\b", head)), text[j:end],
                                      "SHIM_EXPORT" in head))
                i, start = end, end
            elif j < n and text[j] == ";":
                if is_decl:
                    funcs.append(Func(name, bool(re.search(r"\bstatic\b", head)), None))
                i, start = j + 1, j + 1
            else:
                i = close
        else:
            i += 1
    return funcs


class Module:
    """x.c and x.h together."""

    def __init__(self, name: str):
        self.name = name
        self.defined: dict[str, Func] = {}   # non-static functions of x.c, inline ones of x.h
        self.static: dict[str, Func] = {}    # static functions of x.c
        self.declared: set[str] = set()      # prototypes in x.h
        self.bodies: list[Func] = []


def load() -> dict[str, Module]:
    mods: dict[str, Module] = {}
    for path in sorted(SHIM.glob("*.[ch]")):
        mod = mods.setdefault(path.stem, Module(path.stem))
        for f in top_level(strip(path.read_text())):
            if f.body is None:
                if path.suffix == ".h" and not f.static:
                    mod.declared.add(f.name)
                continue
            mod.bodies.append(f)
            if path.suffix == ".h" or not f.static:
                mod.defined[f.name] = f
            else:
                mod.static[f.name] = f
    return mods


def owner_of(mods: dict[str, Module]) -> dict[str, str]:
    owner = {}
    for m in mods.values():
        for name in m.defined:
            owner[name] = m.name
    return owner


LAYERS = SHIM / "layers.txt"


@pytest.fixture(scope="module")
def shim_graph(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], ModuleGraph]:
    """The module graph of a shim source folder; one cache of compiler dumps for all. The
    graph is gcc's (-fcallgraph-info): where there is no gcc, these tests cannot run."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the shim's call graph is gcc's")
    cache = tmp_path_factory.mktemp("callgraph")
    generated = tmp_path_factory.mktemp("generated")
    spec = importlib.util.spec_from_file_location("shim_build", SHIM / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    if hasattr(build, "tools_ptx_header"):
        (generated / "tools_ptx.h").write_text(build.tools_ptx_header(), encoding="ascii")
    return lambda shim: module_graph(shim, cache, [generated])


def test_every_use_goes_down_the_declared_layers(shim_graph):
    problems = violations(shim_graph(SHIM), read_layers(LAYERS))
    assert not problems, "\n".join(problems)


def test_no_use_cycle_between_files(shim_graph):
    graph = shim_graph(SHIM)
    cycle = find_cycle({m: set(graph.uses.get(m, {})) for m in graph.modules})
    assert not cycle, "use cycle between shim files: " + " -> ".join(cycle)


def test_the_graph_sees_the_launch_path(shim_graph):
    """The checks are only as good as the graph: the launch path must be in it."""
    uses = shim_graph(SHIM).uses
    assert "launch" in uses["hooks"] and "gate" in uses["launch"]
    assert "interpose" in uses["tools"] and "util" in uses["channel"]


def _planted(tmp_path: Path, file: str, code: str) -> Path:
    shim = tmp_path / "shim"
    shutil.copytree(SHIM, shim, ignore=shutil.ignore_patterns("gpu", "diff"))
    with open(shim / file, "a") as f:
        f.write(code)
    return shim


@pytest.mark.parametrize("file, code, edge", [
    # A call inside a macro, invisible to a reader who skips preprocessor lines.
    ("util.c", '\n#include "launch.h"\n#define KICK() launch_run(0, 0, 0)\n'
               "void util_planted(void) { KICK(); }\n", "util (driver) uses launch"),
    # A call many layers up.
    ("tensormap.c", '\n#include "handtune.h"\n'
                    "void tensormap_planted(void) { (void)handtune_hand_off(0, 0); }\n",
     "tensormap (process) uses handtune"),
    # A new cycle: channel already uses util.
    ("util.c", '\n#include "channel.h"\nunsigned util_planted(void) '
               "{ return channel_options(); }\n", "util (driver) uses channel"),
    # A callback: a function of a module above, passed as a value.
    ("stream.c", '\n#include "watch.h"\nvoid *stream_planted(void) '
                 "{ return (void *)watch_serve_newest; }\n", "stream (driver) uses watch"),
])
def test_a_planted_upward_use_is_found(shim_graph, tmp_path, file, code, edge):
    problems = violations(shim_graph(_planted(tmp_path, file, code)), read_layers(LAYERS))
    assert any(p.startswith(edge) for p in problems), "\n".join(problems)


def test_a_planted_cycle_is_named(shim_graph, tmp_path):
    graph = shim_graph(_planted(tmp_path, "util.c", '\n#include "channel.h"\n'
                                "unsigned util_planted(void) { return channel_options(); }\n"))
    pair = {"util", "channel"}
    cycle = find_cycle({m: set(graph.uses.get(m, {})) & pair for m in pair})
    assert cycle and set(cycle) == pair


def test_the_architecture_page_lists_the_layers_in_order():
    """docs/architecture.md's shim table names the modules bottom up, as declared."""
    declared = [m for _name, mods in read_layers(LAYERS) for m in mods]
    page = (SHIM.parent / "docs" / "architecture.md").read_text()
    table = page[page.index("| file | holds |"):]
    table = table[:table.index("\n\n")]
    listed = []
    for row in table.splitlines()[2:]:
        for name in re.findall(r"`(\w+)\.[ch]`", row.split("|")[1]):
            if name not in listed:
                listed.append(name)
    assert listed == declared


def test_one_header_per_file():
    mods = load()
    problems = []
    for m in mods.values():
        has_c = (SHIM / f"{m.name}.c").exists()
        for name, f in m.defined.items():
            if f.static or f.exported:
                continue  # SHIM_EXPORT: the driver's or libc's own names, declared by them
            if not has_c:
                continue
            if name in m.declared:
                continue
            gen = next((g for p, g in GENERATED.items() if name.startswith(p)), None)
            if gen and (gen[2] or gen[0] == f"{m.name}.h"):
                if gen[1] in (SHIM / gen[0]).read_text():
                    continue
            problems.append(f"{m.name}.c defines {name}, not declared in {m.name}.h")
        for name in sorted(m.declared):
            if not has_c:
                problems.append(f"{m.name}.h declares {name} but there is no {m.name}.c")
            elif name not in m.defined:
                problems.append(f"{m.name}.h declares {name}, not defined in {m.name}.c")
    for prefix, (header, _token, anywhere) in GENERATED.items():
        stem = header[:-2]
        for m in mods.values():
            for name, f in m.defined.items():
                if name.startswith(prefix) and not f.static and m.name != stem and not anywhere:
                    problems.append(f"{m.name}.c defines {name}, generated into {header}")
    assert not problems, "\n".join(problems)


def test_no_include_cycle():
    graph = {p.name: {h for h in includes(p) if (SHIM / h).exists()}
             for p in SHIM.glob("*.h")}
    cycle = find_cycle(graph)
    assert not cycle, "include cycle among shim headers: " + " -> ".join(cycle)


_LOCK = re.compile(r"pthread_mutex_(?:timed)?lock\s*\(\s*&\s*([\w.>-]+)")
_UNLOCK = re.compile(r"pthread_mutex_unlock\s*\(\s*&\s*([\w.>-]+)")


def test_no_lock_crosses_a_function():
    problems = []
    for m in load().values():
        for f in m.bodies:
            locked = set(_LOCK.findall(f.body))
            unlocked = set(_UNLOCK.findall(f.body))
            for x in sorted(locked - unlocked):
                problems.append(f"{m.name}: {f.name} locks {x} and never unlocks it")
            for x in sorted(unlocked - locked):
                problems.append(f"{m.name}: {f.name} unlocks {x} it did not lock")
    assert not problems, "\n".join(problems)


def test_scanner_sees_the_shim():
    """The header checks are only as good as the scanner: it must find the launch path."""
    mods = load()
    owner = owner_of(mods)
    assert len(owner) > 50
    assert "launch_run" in owner
