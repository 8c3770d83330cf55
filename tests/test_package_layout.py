"""The package's shape, read from the source (ast): no import cycle among cudump's modules, no
module over 500 lines or class over 300 lines, and the data path importing downward only
(nothing under analysis/, rundir/, kernels/, policy/ or wire/ imports the command line, the
prompt or the subcommands)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from graphs import find_cycle

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cudump"

MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300

# The data path: these packages never import the command line, the prompt or the subcommands.
DATA_PATH = ("analysis", "rundir", "kernels", "policy", "wire")
ABOVE_DATA_PATH = ("cudump.commands", "cudump.prompt", "cudump.cli")


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


def test_the_data_path_imports_downward():
    graph = import_graph()
    problems = []
    for name, targets in sorted(graph.items()):
        if name.split(".")[1:2] and name.split(".")[1] in DATA_PATH:
            for target in sorted(targets):
                if any(target == up or target.startswith(up + ".") for up in ABOVE_DATA_PATH):
                    problems.append(f"{name} imports {target}")
    assert not problems, "\n".join(problems)
