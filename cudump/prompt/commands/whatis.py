"""`whatis EXPR` (`ptype`): the C type of an argument, from the kernel's signature.

`whatis argN` gives the argument's type; `whatis argN[I]` and `whatis *argN` the type of
the elements it points to. Kernels' parameters have no struct definitions to expand, so
ptype says what whatis says.
"""

from __future__ import annotations

import argparse
import re

from cudump.prompt.context import CommandError, Context
from cudump.prompt.registry import STOPPED, command, make_parser

parser = make_parser(
    "whatis", "The C type of argN, or of what it points to (argN[I], *argN).",
    "Types come from the kernel's signature (its mangled name); a kernel without one\n"
    "(extern \"C\") has only argument sizes.",
    usage="whatis argN | argN[I] | *argN")
parser.add_argument("expression", metavar="EXPR")

_ARG = re.compile(r"^(?P<star>\*\s*)?arg(?P<n>\d+)\s*(?P<index>\[[^\]]*\])?$")


@command(parser, aliases=("ptype",), requires=(STOPPED,), raw=True, complete="args")
def whatis(ctx: Context, args: argparse.Namespace) -> None:
    text = args.expression.strip()
    m = _ARG.match(text)
    if m is None:
        raise CommandError(f"whatis: write argN, argN[I] or *argN, not '{text}'")
    arg = ctx.arg(int(m.group("n")))
    if arg.type is None:
        ctx.say(f"type = <{len(arg.raw)} bytes> (the kernel has no signature: only sizes are "
                "known)")
        return
    derefs = int(m.group("star") is not None) + int(m.group("index") is not None)
    if derefs == 0:
        ctx.say(f"type = {arg.type.text}")
        return
    if derefs > arg.type.pointer_depth or arg.type.function:
        raise CommandError(f"whatis: arg{arg.index} is not a pointer to data (its type is "
                           f"{arg.type.text})")
    depth = arg.type.pointer_depth - derefs
    # As the demangler writes it: `float const`, then its remaining pointers.
    base = f"{arg.type.base} const" if arg.type.const else arg.type.base
    ctx.say(f"type = {base}{'*' * depth}")
