"""cudump's interactive prompt: gdb-like commands at a launch held at a breakpoint.

Entry point: `run_prompt(debugger, batch=..., stdin_is_tty=...)`. The prompt uses only
the Debugger and StoppedLaunch interfaces of cudump.controller.target.
"""

from cudump.prompt.repl import read_batch_file, run_prompt

__all__ = ["read_batch_file", "run_prompt"]
