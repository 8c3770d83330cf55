"""Running a test in a forked child, for tests that load the stand-in driver into their
own process with ctypes.

The stand-in's soname is libcuda.so.1: once loaded into the pytest process, it would stand
in for the real driver in every later test of the session (GPU tests included).
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable

import pytest


def isolated(test: Callable[..., None]) -> Callable[..., None]:
    """Runs a test in a forked child; its failure (traceback) fails the test."""

    @functools.wraps(test)
    def wrapper(*args: object, **kwargs: object) -> None:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            status, message = 0, b""
            try:
                test(*args, **kwargs)
            except BaseException:
                status, message = 1, traceback.format_exc().encode()
            os.write(write_end, message[-60000:])
            os._exit(status)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            message = pipe.read()
        _, status = os.waitpid(pid, 0)
        if status != 0:
            pytest.fail(message.decode() or f"test process ended with wait status {status}")

    return wrapper
