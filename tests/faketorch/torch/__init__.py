"""A stand-in for torch: see tests/faketorch/README.md."""

from . import autograd, compiler, cuda, nn, optim  # noqa: F401

_tensors = []
_next_address = [0x10000]


class dtype:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __str__(self):
        return f"torch.{self.name}"


float32, bfloat16, float8_e4m3fn = dtype("float32", 4), dtype("bfloat16", 2), \
    dtype("float8_e4m3fn", 1)


class Tensor:
    """A tensor of `shape` and `dtype` at a device address of its own (`cuda`), or in host
    memory."""

    def __init__(self, requires_grad=True, shape=(2, 3), dtype=float32, on_gpu=True,
                 contiguous=True):
        self.requires_grad = requires_grad
        self.grad_fn = object() if requires_grad else None
        self.hooks = []
        self.shape, self.dtype, self.is_cuda = tuple(shape), dtype, on_gpu
        self._contiguous = contiguous
        self._address = _next_address[0]
        _next_address[0] += 0x1000
        if requires_grad:
            _tensors.append(self)

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return self.dtype.size

    def is_contiguous(self):
        return self._contiguous

    def data_ptr(self):
        return self._address

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
