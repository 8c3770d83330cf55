"""The start of a Python target on the stand-in driver: the driver and the shim's exported
scope calls by ctypes, a context, and the `scale(float* x, float s, int n)` kernel as `fn`."""

from __future__ import annotations

DRIVER_START = """\
import ctypes

# PyDLL: the driver is called holding the GIL, as frameworks' launches are.
cuda = ctypes.PyDLL("libcuda.so.1")
shim = ctypes.CDLL(None)
shim.cudump_scope_push.argtypes = [ctypes.c_uint, ctypes.c_char_p]
shim.cudump_scope_current.restype = ctypes.c_uint
shim.cudump_scope_output.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint,
                                     ctypes.c_char_p]


def check(rc):
    assert rc == 0, rc


check(cuda.cuInit(0))
ctx, mod, fn = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
check(cuda.cuCtxSetCurrent(ctx))
check(cuda.cuModuleLoadData(ctypes.byref(mod), b"fakecuda test image"))
check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"scale"))
"""
