"""The prompt's commands, one module each; importing this package registers them all."""

from cudump.prompt.commands import (  # noqa: F401
    break_,
    bt,
    continue_,
    delete,
    detach,
    diff,
    disable,
    dump,
    enable,
    finish,
    help,
    ignore,
    info,
    kill,
    print,
    quit,
    step,
    tbreak,
    x,
)
