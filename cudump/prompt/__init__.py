"""cudump's interactive prompt: gdb-like commands at a launch held at a breakpoint.

Entry point: `run_prompt(debugger, batch=..., stdin_is_tty=...)`. The prompt uses only
the Debugger interface (prompt/debugger.py) and StoppedLaunch (cudump.launches.stop).
"""

from cudump.prompt.repl import run_prompt

__all__ = ["run_prompt"]
