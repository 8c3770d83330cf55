"""A stand-in for torch: see tests/faketorch/README.md."""

from . import autograd, compiler, nn, optim  # noqa: F401

_tensors = []


class Tensor:
    def __init__(self, requires_grad=True):
        self.requires_grad = requires_grad
        self.grad_fn = object() if requires_grad else None
        self.hooks = []
        if requires_grad:
            _tensors.append(self)

    def register_hook(self, hook):
        self.hooks.append(hook)


def is_grad_enabled():
    return True


def backward():
    """Autograd in reverse: each tensor's gradient hooks, the last made first, then the
    callbacks queued on the engine."""
    while _tensors:
        tensor = _tensors.pop()
        for hook in tensor.hooks:
            hook(None)
    callbacks = autograd.Variable._execution_engine.callbacks
    while callbacks:
        callbacks.pop(0)()
