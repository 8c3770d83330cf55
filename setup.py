"""Build hook: compile the C shim into cudump/_lib/libcudump.so, and the controller's native diff
loop into cudump/_lib/libcudumpdiff.so (shim/build.py)."""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("shim_build", ROOT / "shim" / "build.py")
assert _spec is not None and _spec.loader is not None
shim_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shim_build)


class BuildPyWithShim(build_py):
    def run(self) -> None:
        super().run()
        for lib_dir in [Path(self.build_lib) / "cudump" / "_lib",
                        *([ROOT / "cudump" / "_lib"] if self.editable_mode else [])]:
            shim_build.build_shim(lib_dir)
            shim_build.build_diff(lib_dir)


class BinaryDistribution(Distribution):
    """The wheel carries a native library, so it is platform specific."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithShim}, distclass=BinaryDistribution)
