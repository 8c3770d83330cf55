"""cudump's sitecustomize, first on the traced program's PYTHONPATH under `cudump --layers` or a
scan (XLA's dump).

With CUDUMP_LAYERS=1 or CUDUMP_XLA_FLAGS it loads cudump/target (by its path, as
`_cudump_target`: the program's Python need not have cudump installed, and the program's own
imports see nothing new) and starts it; then it runs the sitecustomize the program would have
run without this one (the next on sys.path), so that the program's environment behaves as
before. An error of that sitecustomize reaches site.py as it would have. A failure of
cudump's part is one "cudump: "
line on stderr, and the program runs on without it.
"""

import os
import sys


def _cudump_start():
    if "_cudump_target" in sys.modules or (os.environ.get("CUDUMP_LAYERS") != "1"
                                           and not os.environ.get("CUDUMP_XLA_FLAGS")):
        return
    try:
        import importlib.util

        target = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        spec = importlib.util.spec_from_file_location(
            "_cudump_target", os.path.join(target, "__init__.py"),
            submodule_search_locations=[target])
        package = importlib.util.module_from_spec(spec)
        sys.modules["_cudump_target"] = package
        spec.loader.exec_module(package)
        importlib.import_module("_cudump_target.start").start()
    except Exception as err:
        sys.stderr.write(f"cudump: layers and XLA's dump are off in this process: "
                         f"{type(err).__name__}: {err}\n")


def _chain():
    """Import the next sitecustomize on sys.path in place of this one."""
    import importlib.machinery
    import importlib.util

    me = os.path.realpath(__file__)
    here = os.path.dirname(me)
    path = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if (spec is None or spec.loader is None
            or (spec.origin and os.path.realpath(spec.origin) == me)):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop("sitecustomize", None)
        raise


_cudump_start()
_chain()
