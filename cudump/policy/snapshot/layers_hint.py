"""Whether a NaN/Inf report should name `--layers`: the process announced no scope, and it
is a Python program using PyTorch, whose module paths that flag would have named."""

from __future__ import annotations

from pathlib import Path

from cudump.launches.process import ProcessState

HINT = ("cudump: hint: run with --layers to name the PyTorch module, step and line behind "
        "each NaN/Inf report")


def _uses_torch(pid: int, exe: str) -> bool:
    """PyTorch's library mapped into the process (read once, at the first report); where
    the process has gone, whether it is a Python interpreter."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if b"CUDUMP_LAYERS=1" in environ:
            return False        # layers were asked for: none opened before this launch
        maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Path(exe).name.startswith("python")
    return "libtorch" in maps


def wants_layers_hint(proc: ProcessState) -> bool:
    return not proc.scopes.nodes and _uses_torch(proc.pid, proc.exe)
