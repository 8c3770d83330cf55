"""`break PATTERN [if EXPR]` (`b`): stop at launches of matching kernels."""

from __future__ import annotations

import argparse

from cudump.policy.breakpoints import Breakpoint
from cudump.prompt.context import Context
from cudump.prompt.registry import command, make_parser

DETAILS = """\
PATTERN is the kernel matcher of rules: a glob on the demangled name (with or without its
return type or parameters, or the bare function name), or re:REGEX. EXPR is a condition
over the launch's argument values (argN), evaluated as rule expressions are; the launch
stops when it is not zero. Examples:
  break vecAdd
  break device::FrP0k5607tPV*
  break re:^void at::native::
  break scale if arg3 - 1024"""

parser = make_parser("break", "Stop at launches of kernels matching PATTERN [if EXPR].", DETAILS,
                     usage="break PATTERN [if EXPR]")
parser.add_argument("spec", metavar="PATTERN [if EXPR]")


def add_breakpoint(ctx: Context, spec: str, temporary: bool) -> Breakpoint:
    bp = ctx.debugger.breakpoints.add(spec, temporary=temporary)
    ctx.debugger.changed()
    what = bp.pattern.text + (f" if {bp.condition.text}" if bp.condition is not None else "")
    kind = "Temporary breakpoint" if temporary else "Breakpoint"
    ctx.say(f"{kind} {bp.number}: {what}")
    if not any(bp.pattern.matches(k.kernel, k.mangled) for k in ctx.debugger.kernels()):
        ctx.say("  (no kernel seen so far matches; it stops when one does)")
    return bp


@command(parser, category="breakpoints", aliases=("b", "br"), raw=True, complete="kernels")
def break_(ctx: Context, args: argparse.Namespace) -> None:
    add_breakpoint(ctx, args.spec, temporary=False)
