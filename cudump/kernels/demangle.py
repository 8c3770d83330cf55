"""Demangling of kernel names (Itanium C++ ABI, as nvcc emits them)."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=4096)
def demangle(mangled: str) -> str:
    """The demangled form of `mangled`, or `mangled` itself.

    extern "C" kernels carry plain names; those, and names the demangler
    rejects, come back unchanged so that callers always have something to show
    and to match rules against.
    """
    if not mangled.startswith("_Z"):
        return mangled
    try:
        # Imported here: cxxfilt locates the C++ runtime's demangler when
        # imported and raises if there is none; a missing runtime then only
        # costs readable names, not the run.
        import cxxfilt

        return cxxfilt.demangle(mangled)
    except Exception:  # any failure here means "cannot demangle"
        return mangled
