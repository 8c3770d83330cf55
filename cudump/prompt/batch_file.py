"""`--batch FILE`: the prompt's commands, read once and checked before the program starts.

FILE is read whole, once, as it is named: a regular file, a FIFO, /dev/stdin or a process
substitution (`--batch <(...)`, a /dev/fd name that can be read only once). Everything that
can be wrong with it is said before the program runs, in one line naming the file and the
line: it cannot be read, it is not UTF-8 text, a line names no command of the prompt or
gives one arguments it does not take. A problem found only when the program is at a
breakpoint (a buffer that is not there) is still the prompt's to say, as it runs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cudump.errors import UsageError

# Read no more than this (a batch file is a few lines; /dev/zero would never end).
MAX_BATCH_BYTES = 1 << 20


def load_batch(path: Path) -> list[str]:
    """The commands of the batch file, blank lines and `#` comments left out; UsageError
    with one line (file, line) where it cannot be read or a command cannot be parsed."""
    data = _read(path)
    lines: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UsageError(f"--batch {path}, line {number}: not UTF-8 text (byte "
                             f"0x{raw[err.start]:02x} at column {err.start + 1})") from None
        text = text.strip()
        if not text or text.startswith("#"):
            continue
        problem = command_problem(text)
        if problem is not None:
            raise UsageError(f"--batch {path}, line {number}: {problem}")
        lines.append(text)
    return lines


def _read(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:        # follows /dev/stdin, /dev/fd/N as named
            if stat.S_ISDIR(os.fstat(f.fileno()).st_mode):
                raise IsADirectoryError
            data = f.read(MAX_BATCH_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"--batch {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"--batch {path}: is a directory; give a file of commands") from None
    except OSError as err:
        raise UsageError(f"--batch {path}: cannot read it: {err.strerror or err}") from None
    if len(data) > MAX_BATCH_BYTES:
        raise UsageError(f"--batch {path}: more than {MAX_BATCH_BYTES >> 20} MiB; a batch "
                         "file is a list of commands")
    return data


def command_problem(line: str) -> str | None:
    """What keeps `line` from being parsed as a command of the prompt, or None. Only the
    words are checked (the command, its subcommand, /FMT and options): what they name is
    known only at a stop."""
    import cudump.prompt.commands  # noqa: F401  (registers the commands)
    from cudump.prompt.context import CommandError
    from cudump.prompt.registry import REGISTRY, HelpShown, _argv, pick_subcommand, split_line

    try:
        word, suffix, rest = split_line(line)
        cmd, prefix = REGISTRY.resolve(word)
        if prefix:
            rest = f"{prefix} {rest}".strip()
        if cmd.subcommands:
            if suffix is not None:
                return f"{cmd.name} takes no /FMT suffix"
            sub_word, _, rest = rest.partition(" ")
            if not sub_word:
                return (f"{cmd.name} needs a subcommand: "
                        f"{', '.join(sorted(cmd.subcommands))}")
            if sub_word in ("-h", "--help"):
                return None
            cmd = pick_subcommand(cmd, sub_word)
            rest = rest.strip()
        elif suffix is not None and not cmd.slash:
            return f"{cmd.name} takes no /FMT suffix (x/FMT does)"
        cmd.parser.parse_args(_argv(cmd, rest))
    except HelpShown:
        return None
    except CommandError as err:
        return str(err)
    return None
