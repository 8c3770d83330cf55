"""The shim's file layout, checked from its C sources (no compiler needed).

The shim is layered: every file calls only files below it, so a change to one
file can be understood by reading it and what it uses, never what uses it.
This test keeps it that way:

(a) no call cycle between files: the graph "x uses a function of y" (a call,
    or a function passed as a callback) over the files of shim/ is a DAG;
(b) one header per file for what that file defines: every non-static function
    of x.c is declared in x.h, x.h declares nothing defined elsewhere, and a
    header without a .c of its own declares no functions;
(c) no #include cycle among the shim's headers;
(d) no lock crosses a function boundary: a function that calls
    pthread_mutex_lock(&X) (or timedlock) also calls pthread_mutex_unlock(&X).

A file and its header are one unit ("module"): a static inline function in
x.h belongs to x. The scanner is deliberately simple: comments, strings and
preprocessor lines are dropped, and functions are found as `name(...) {` at
the top level. Function names made by the X-macro tables of api.h are
matched by their prefix (GENERATED below).
"""

from __future__ import annotations

import re
from pathlib import Path

from graphs import find_cycle

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


def call_graph(mods: dict[str, Module]) -> dict[str, dict[str, set[str]]]:
    """module -> used module -> the names used (calls and functions passed as values)."""
    owner = owner_of(mods)
    graph: dict[str, dict[str, set[str]]] = {m: {} for m in mods}
    for m in mods.values():
        for f in m.bodies:
            for name in set(_IDENT.findall(f.body)):
                if name in m.static or name not in owner or owner[name] == m.name:
                    continue
                graph[m.name].setdefault(owner[name], set()).add(f"{f.name} -> {name}")
    return graph


def test_no_call_cycle_between_files():
    mods = load()
    graph = call_graph(mods)
    cycle = find_cycle({m: set(used) for m, used in graph.items()})
    if cycle:
        detail = []
        for a, b in zip(cycle, cycle[1:], strict=False):
            detail.append(f"  {a} -> {b}: " + ", ".join(sorted(graph[a][b])[:4]))
        raise AssertionError("call cycle between shim files: " + " -> ".join(cycle) + "\n"
                             + "\n".join(detail))


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
    """The checks above are only as good as the scanner: it must find the launch path."""
    mods = load()
    owner = owner_of(mods)
    assert len(owner) > 50
    graph = call_graph(mods)
    assert any(graph[m] for m in graph)
    assert "launch_run" in owner
