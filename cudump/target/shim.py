"""The shim's scope calls, found in the process by ctypes (the shim is preloaded into it):
`cudump_scope_push(kind, name)`, `cudump_scope_pop()`, `cudump_scope_step(wire_step)`, and
`cudump_scope_output(address, bytes, index, type)` for a tensor a module returned."""

from __future__ import annotations

import ctypes


class ShimScopes:
    """The calling thread's scope stack in the shim (tracker.Scopes).

    Called through ctypes.PyDLL, which keeps the GIL: the calls are short and never wait on
    Python, and giving the GIL up around each would let another thread of the program take
    it for as long as the switch interval at every module call."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._push = lib.cudump_scope_push
        self._push.argtypes = (ctypes.c_uint, ctypes.c_char_p)
        self._push.restype = ctypes.c_int
        self._pop = lib.cudump_scope_pop
        self._pop.argtypes = ()
        self._pop.restype = None
        self._step = lib.cudump_scope_step
        self._step.argtypes = (ctypes.c_uint,)
        self._step.restype = None
        self._names: dict[str, bytes] = {}
        # The line behind a module's launches (sources.py); absent from an older shim.
        self._source = getattr(lib, "cudump_scope_source", None)
        self._restore = getattr(lib, "cudump_scope_source_restore", None)
        if self._source is not None and self._restore is not None:
            self._source.argtypes = (ctypes.c_char_p,)
            self._source.restype = ctypes.c_uint
            self._restore.argtypes = (ctypes.c_uint,)
            self._restore.restype = None
        else:
            self._source = self._restore = None
        # A tensor a module returned (--module-outputs); absent from an older shim.
        self._output = getattr(lib, "cudump_scope_output", None)
        if self._output is not None:
            self._output.argtypes = (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint,
                                     ctypes.c_char_p)
            self._output.restype = ctypes.c_int

    def push(self, kind: int, name: str) -> bool:
        data = self._names.get(name)
        if data is None:
            data = self._names[name] = name.encode("utf-8", "replace")
        return self._push(kind, data) == 0

    def pop(self) -> None:
        self._pop()

    def step(self, wire_step: int) -> None:
        self._step(wire_step)

    @property
    def has_sources(self) -> bool:
        return self._source is not None

    def source(self, text: str) -> int:
        """Says `text` ('file:line') is behind this thread's launches; returns what was."""
        assert self._source is not None
        return int(self._source(text.encode("utf-8", "replace")))

    @property
    def has_outputs(self) -> bool:
        return self._output is not None

    def output(self, address: int, nbytes: int, index: int, type_text: str) -> None:
        """Says the open module returned `type_text` ("float32[8,64]") at `address`."""
        assert self._output is not None
        self._output(address, nbytes, index, type_text.encode("ascii", "replace"))

    def restore(self, before: int) -> None:
        assert self._restore is not None
        self._restore(before)


def shim_scopes() -> ShimScopes | None:
    """The shim's scope calls, or None where this process has no shim that exports them
    (not run under cudump, or a shim without them)."""
    try:
        return ShimScopes(ctypes.PyDLL(None))
    except (AttributeError, OSError):
        return None
