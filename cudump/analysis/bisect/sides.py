"""The two sides, A and B: their command lines and environments."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from cudump.errors import UsageError


@dataclass(frozen=True)
class Side:
    label: str                            # "A" or "B"
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()  # set in its environment, in order

    def describe(self) -> str:
        text = shlex.join(self.argv)
        if self.env:
            text += " with " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        return text

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Its environment: ours (or `base`) and its settings (the cudump it runs under is
        found without PYTHONPATH: relaunch.py)."""
        env = dict(os.environ if base is None else base)
        env.update(self.env)
        return env


def parse_env(items: Sequence[str], option: str) -> tuple[tuple[str, str], ...]:
    """NAME=VALUE settings of --env-a/--env-b; UsageError for anything else."""
    pairs: list[tuple[str, str]] = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or "\0" in item:
            raise UsageError(f"{option} {item!r}: expected NAME=VALUE")
        pairs.append((name, value))
    return tuple(pairs)


def split_programs(words: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """`[--] PROGRAM_A ARGS... [-- PROGRAM_B ARGS...]` as A's and B's command lines."""
    rest = list(words)
    if rest and rest[0] == "--":
        rest.pop(0)
    if "--" in rest:
        cut = rest.index("--")
        a, b = rest[:cut], rest[cut + 1:]
        if not b:
            raise UsageError("nothing after the second '--': give PROGRAM_B and its arguments, "
                             "or leave the '--' out and use --env-a/--env-b")
    else:
        a, b = rest, None
    if not a:
        raise UsageError("no program given; usage: cudump bisect [options] -- PROGRAM_A "
                         "[ARGS...] [-- PROGRAM_B [ARGS...]] (see 'cudump bisect --help')")
    return a, b


def make_sides(words: Sequence[str], env_a: Sequence[str],
               env_b: Sequence[str]) -> tuple[Side, Side]:
    argv_a, argv_b = split_programs(words)
    settings_a, settings_b = parse_env(env_a, "--env-a"), parse_env(env_b, "--env-b")
    if argv_b is None and not (settings_a or settings_b):
        raise UsageError("one program needs --env-a/--env-b to run it two ways; or give a "
                         "second program after another '--'")
    a = Side("A", tuple(argv_a), settings_a)
    b = Side("B", tuple(argv_b if argv_b is not None else argv_a), settings_b)
    if a.argv == b.argv and dict(a.env) == dict(b.env):
        raise UsageError("A and B would run the same command in the same environment")
    return a, b
