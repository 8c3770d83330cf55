"""A hook on the import of one top-level package (torch): run a function once the package has
been imported, without importing it and without changing what the import gives. The finder
goes first on sys.meta_path, asks the others for the package's spec, and has the spec's
loader call the function after the loader's own exec_module; then it leaves sys.meta_path."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class PostImportFinder:
    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then
        self._busy = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            self.leave()
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            if spec is not None and spec.loader is not None:
                self._wrap(spec.loader)
            return spec
        finally:
            self._busy = False

    def _wrap(self, loader: Any) -> None:
        """The loader's exec_module, then ours, on this loader object only (its class and
        every other module it loads are as they were)."""
        original = getattr(loader, "exec_module", None)
        if original is None:
            return
        name, then = self.name, self.then

        def exec_module(module: ModuleType) -> None:
            if module.__name__ != name:
                original(module)
                return
            try:
                del loader.exec_module
            except AttributeError:
                pass
            original(module)
            then(module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            pass                             # a loader that takes no attribute: no hook

    def leave(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """`then(module)` once top-level package `name` is imported (at once if it is)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
        return
    sys.meta_path.insert(0, PostImportFinder(name, then))
