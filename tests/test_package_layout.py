"""The package's shape, read from the source (ast): no import cycle among cudump's modules, no
module over 500 lines or class over 300 lines, and every import pointing down the layers that
cudump/layers.py declares (each folder and root module imports only itself and the layers
below it), as docs/architecture.md draws them."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from graphs import find_cycle

from cudump.layers import LAYERS, drawing

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cudump"

MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300

ARCHITECTURE = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Module:
    name: str          # cudump.policy.rules
    path: Path
    is_package: bool   # an __init__.py

    @property
    def relative(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


def modules() -> dict[str, Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


def layer_of(name: str) -> str:
    """The layer a module is in: its folder under cudump/, or the root module's name
    (`__init__` for the package itself)."""
    parts = name.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def _tree(module: Module) -> ast.Module:
    return ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))


def imported(module: Module, known: dict[str, Module]) -> set[str]:
    """cudump modules this one imports, anywhere in it (module level, in functions, under
    TYPE_CHECKING): `from a.b import c` counts as a.b.c where that is a module, else a.b."""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                targets.add(sub if sub in known else origin)
    return {t for t in targets if t in known and t != module.name}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(module, known) for name, module in known.items()}


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_modules_and_classes_are_not_too_long():
    problems = []
    for module in modules().values():
        text = module.path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            problems.append(f"{module.relative}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text, str(module.path))):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_CLASS_LINES:
                    problems.append(f"{module.relative}:{node.lineno}: class {node.name}: "
                                    f"{length} lines (at most {MAX_CLASS_LINES})")
    assert not problems, "\n".join(problems)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a layer declared above the importer's, as a line."""
    rank = {layer.name: n for n, layer in enumerate(LAYERS)}
    problems = []
    for name, targets in sorted(graph.items()):
        here = layer_of(name)
        for target in sorted(targets):
            there = layer_of(target)
            # a layer not declared is the next test's to name
            if here in rank and there in rank and rank[there] > rank[here]:
                problems.append(f"{name} imports {target} ({there} is above {here})")
    return problems


def test_every_folder_and_root_module_has_one_layer():
    names = [layer.name for layer in LAYERS]
    assert len(names) == len(set(names)), f"a layer declared twice: {names}"
    found = {layer_of(name) for name in modules()}
    assert found == set(names), (f"not declared in cudump/layers.py: {sorted(found - set(names))}"
                                 f"; declared but not there: {sorted(set(names) - found)}")


def test_imports_point_down_the_layers():
    problems = upward_imports(import_graph())
    assert not problems, (f"{len(problems)} imports of a layer above (cudump/layers.py):\n"
                          + "\n".join(problems))


def test_imports_in_functions_and_under_type_checking_count(tmp_path):
    """An import made late (inside a function) or for types only (TYPE_CHECKING) is a
    dependency all the same: the layout check sees both."""
    source = tmp_path / "timeline.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n"
                      "    from cudump.controller.session import Session\n"
                      "def f():\n"
                      "    from cudump.prompt import repl\n"
                      "    import cudump.cli\n", encoding="utf-8")
    known = modules()
    module = Module("cudump.rundir.timeline", source, is_package=False)
    graph = {module.name: imported(module, known)}
    assert graph[module.name] == {"cudump.controller.session", "cudump.prompt.repl",
                                  "cudump.cli"}
    assert len(upward_imports(graph)) == 3


def test_the_architecture_draws_the_layers():
    """docs/architecture.md draws the order cudump/layers.py declares
    (`python3 -m cudump.layers` prints it)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert f"```\n{drawing()}\n```" in text, (
        "docs/architecture.md's layers differ from cudump/layers.py; draw them as "
        f"`python3 -m cudump.layers` prints:\n{drawing()}")
