"""The package's layers, bottom to top: each folder and root module of cudump/ imports only
itself and what is declared below it (anywhere in a module: at its top, inside functions and
under TYPE_CHECKING, for a type named in a signature is a dependency all the same).
tests/test_package_layout.py checks it from the source, and that docs/architecture.md draws
this order (`python3 -m cudump.layers` prints the drawing).

Why this order. Data flows program -> shim -> wire -> controller -> policy -> rundir ->
analysis, but imports follow calls, not data: the controller calls the policies, the
policies call the run directory's writers, and the offline tools call its readers. So:

- target runs inside the traced program, not in cudump: it imports nothing else of cudump
  (the controller only names its folder).
- kernels and wire know nothing of each other: what a launch means, and the shim's
  messages. The launch model (launches/) is the shim's messages read in kernels' terms,
  and every later layer speaks it.
- rundir holds the run directory's files and records, written by the policies and the
  controller and read by the offline tools: it is below both.
- policy decides what to do at a launch and writes what it takes into the run directory.
- analysis, the offline tools, reads run directories and writes rule files (bisect's side
  runs): it is above rundir and policy. It is below the controller because a live run uses
  two of its readers: --inject takes another run's buffers (analysis/transplant) and
  --flight reports the culprit (analysis/flight).
- controller runs the program and drives the policies; the prompt drives the controller's
  debugger through interfaces; the commands put them together, and the command line is on
  top. What the controller needs of a layer above it is handed to it (the prompt, by
  `cudump run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layer:
    name: str       # a folder of cudump/ or a root module's name (without .py)
    holds: str      # one line: what it is


LAYERS: tuple[Layer, ...] = (
    Layer("layers", "this order"),
    Layer("__init__", "the package's version"),
    Layer("errors", "typed exceptions, made messages at the command line's edge"),
    Layer("sizes", "byte sizes, read and written"),
    Layer("console", "cudump's own lines on the terminal"),
    Layer("target", "code run inside the traced Python program: sitecustomize, PyTorch hooks"),
    Layer("kernels", "what a launch means: names and their patterns, signatures, arguments, "
                     "geometry"),
    Layer("wire", "the shim's messages, shared memory and rings; its GPU digests and scans"),
    Layer("launches", "the launch model: a process's functions and launches, a launch held "
                      "at a breakpoint"),
    Layer("rundir", "the run directory: its files and records, written and read back"),
    Layer("policy", "what to do at a launch: rules, breakpoints, trace, snapshots"),
    Layer("analysis", "offline tools on run directories: diff, report, bisect, replay, "
                      "transplant, stats"),
    Layer("controller", "the running program: session, connections, run state, debugger"),
    Layer("prompt", "the gdb-like prompt at a held launch"),
    Layer("commands", "one module per subcommand"),
    Layer("cli", "the command line's edge: options, messages, exit codes"),
    Layer("__main__", "python3 -m cudump"),
)


def drawing() -> str:
    """The order as docs/architecture.md draws it: the top first, as a stack is drawn."""
    here = Path(__file__).parent
    names = [layer.name + ("/" if (here / layer.name).is_dir() else ".py")
             for layer in LAYERS]
    width = max(len(name) for name in names) + 2
    return "\n".join(f"{name:<{width}}{layer.holds}"
                     for name, layer in reversed(list(zip(names, LAYERS, strict=True))))


if __name__ == "__main__":
    print(drawing())
