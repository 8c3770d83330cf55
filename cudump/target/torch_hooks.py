"""PyTorch's global hooks, calling the tracker (tracker.py): the thin part that knows torch.

- Forward: `register_module_forward_pre_hook` pushes the module's scope and
  `register_module_forward_hook(..., always_call=True)` pops it, even when the forward raises
  (a PyTorch without always_call, before 2.1, leaves a raising forward's scopes open on its
  thread).
- Backward: PyTorch's global full backward hooks are not used: they wrap every module's
  inputs and outputs in an autograd Function, which makes an in-place operation on a module's
  output (torchvision's ReLU(inplace=True) after a BatchNorm) raise in the program. Instead the
  forward post-hook puts a gradient hook on the module's first output that requires one; it
  runs on autograd's thread when that gradient is ready, and that thread's backward scopes
  become the module's. The backward pass's end (a callback queued on autograd's engine) closes
  them.
- Steps: `torch.optim.Optimizer.__init__` is wrapped so that steps are counted from the first
  optimizer made (the first step's forward and backward are step 0; waiting for the first
  step hook would leave them without a step); `register_optimizer_step_post_hook` advances
  the step after each optimizer step that runs.
- Outputs (CUDUMP_MODULE_OUTPUTS=1, `--module-outputs`): the post-hook tells the shim each
  CUDA tensor the forward returned (the tensor, or those in its tuple, list or dict), its
  address, size and type, while the module's scope is still open: `cudump diff` and
  `bisect` then compare two implementations of a module by exactly those.
- Under torch.compile's tracing (`torch.compiler.is_compiling()`) every hook does nothing: a
  call into the shim would break the graph. Kernels of a compiled region get the scopes open
  around it.

Any exception in a hook takes every hook off, with one "cudump: " line; none reaches the
program.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .sources import UserLines
from .tracker import Tracker

if TYPE_CHECKING:
    from .tracker import Chain, Scopes


def _compiling_check(torch: Any) -> Callable[[], bool]:
    for owner, name in ((getattr(torch, "compiler", None), "is_compiling"),
                        (getattr(torch, "_dynamo", None), "is_compiling")):
        check = getattr(owner, name, None)
        if callable(check):
            return check
    return lambda: False


# Element types as numpy names them; bfloat16 (which numpy lacks) by its own name. Other
# tensors (float8, complex32) are told as their bytes.
_NUMPY_NAMES = frozenset({"float64", "float32", "float16", "bfloat16", "int64", "int32",
                          "int16", "int8", "uint8", "uint16", "uint32", "uint64", "bool",
                          "complex64", "complex128"})
MAX_OUTPUTS = 64        # tensors told of one module's return, at most


def _tensors_in(output: Any, tensor_type: type) -> Iterator[tuple[int, Any]]:
    """The tensors of a module's output with their places: itself, or those in its tuple,
    list or dict (in order)."""
    if isinstance(output, tensor_type):
        yield 0, output
        return
    items = (output.values() if isinstance(output, dict)
             else output if isinstance(output, (tuple, list)) else ())
    for i, item in enumerate(items):
        if isinstance(item, tensor_type):
            yield i, item


def _type_text(tensor: Any) -> str:
    """"float32[8,64,56,56]", or "uint8[N]" (its bytes) for an element type numpy lacks."""
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in _NUMPY_NAMES:
        return f"uint8[{tensor.numel() * tensor.element_size()}]"
    return f"{name}[{','.join(str(int(d)) for d in tensor.shape)}]"


def _first_grad_tensor(output: Any, tensor_type: type) -> Any:
    """The first tensor of a module's output (itself, or in its tuple, list or dict) that
    autograd will give a gradient."""
    return next((t for _, t in _tensors_in(output, tensor_type)
                 if t.requires_grad and t.grad_fn is not None), None)


class TorchHooks:
    """The hooks, installed on a torch imported in this process."""

    def __init__(self, torch: Any, scopes: Scopes) -> None:
        self.torch = torch
        self.tracker = Tracker(scopes)
        self.on = True
        self._handles: list[Any] = []
        self._compiling = _compiling_check(torch)
        self._engine = getattr(getattr(torch.autograd, "Variable", None), "_execution_engine",
                               None)
        self._optimizer_init: Any = None
        # The running backward pass's number, where this PyTorch tells it.
        self._graph_task = getattr(getattr(torch, "_C", None), "_current_graph_task_id", None)
        # The line that called each open module, told to the shim (sources.py), per thread.
        self._shim = scopes if getattr(scopes, "has_sources", False) else None
        self._lines = UserLines() if self._shim is not None else None
        self._befores = threading.local()
        # Each module's returned tensors, told to the shim (--module-outputs).
        self._declare = (scopes if os.environ.get("CUDUMP_MODULE_OUTPUTS") == "1"
                         and getattr(scopes, "has_outputs", False) else None)
        # A forward captured into a CUDA graph runs none of its kernels then: its outputs
        # are not told (they would be placed after launches that did not run).
        self._capturing = getattr(getattr(torch, "cuda", None), "is_current_stream_capturing",
                                  None)

    def install(self) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim_module

        self._handles.append(nn_module.register_module_forward_pre_hook(self._pre))
        try:
            handle = nn_module.register_module_forward_hook(self._post, always_call=True)
        except TypeError:                   # older torch: no always_call
            handle = nn_module.register_module_forward_hook(self._post)
        self._handles.append(handle)
        self._handles.append(optim_module.register_optimizer_step_post_hook(self._stepped))
        optimizer = optim_module.Optimizer
        original = optimizer.__init__
        hooks = self

        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            if hooks.on:
                hooks._guard(hooks.tracker.optimizer_created)

        optimizer.__init__ = __init__
        self._optimizer_init = (optimizer, original, __init__)

    def off(self, why: BaseException, what: str = "a PyTorch hook failed") -> None:
        if not self.on:
            return
        self.on = False
        for handle in self._handles:
            try:
                handle.remove()
            except Exception:
                pass
        if self._optimizer_init is not None:
            optimizer, original, ours = self._optimizer_init
            if optimizer.__dict__.get("__init__") is ours:
                optimizer.__init__ = original
        try:
            self.tracker.close_thread()
        except Exception:
            pass
        try:
            sys.stderr.write(f"cudump: layers are off in this process: {what} "
                             f"({type(why).__name__}: {why})\n")
        except Exception:
            pass                            # no stderr to say it on: the program goes on

    def _guard(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except Exception as err:
            self.off(err)
            return None

    # Each hook makes one guarded call: every module call of the program goes through them.
    def _pre(self, module: Any, args: Any) -> None:
        if self.on and not self._compiling():
            self._guard(self._enter, module)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self.on and not self._compiling():
            self._guard(self._exit, module, output)

    def _enter(self, module: Any) -> None:
        self.tracker.forward_enter(module)
        if self._shim is not None:
            self._source_enter()

    def _exit(self, module: Any, output: Any) -> None:
        if self._declare is not None and self.tracker.innermost(module):
            self._declare_outputs(output)
        self._forward_exit(module, output)
        if self._shim is not None:
            self._source_exit()

    def _declare_outputs(self, output: Any) -> None:
        """Each contiguous CUDA tensor the forward returned, told to the shim while the
        module's scope is open (a strided view is left out: its bytes are not one range)."""
        assert self._declare is not None
        if self._capturing is not None and self._capturing():
            return
        for index, tensor in _tensors_in(output, self.torch.Tensor):
            if index >= MAX_OUTPUTS:
                break
            if not tensor.is_cuda or not tensor.is_contiguous() or tensor.numel() == 0:
                continue
            self._declare.output(tensor.data_ptr(), tensor.numel() * tensor.element_size(),
                                 index, _type_text(tensor))

    def _source_enter(self) -> None:
        assert self._shim is not None and self._lines is not None
        befores = self._befores.__dict__.setdefault("stack", [])
        # The walk starts at the hook's caller: this method's, _enter's, _guard's and
        # _pre's frames are cudump's own (torch's are skipped by the walk).
        line = self._lines.line(5)
        befores.append(self._shim.source(line) if line else None)

    def _source_exit(self) -> None:
        assert self._shim is not None
        befores = self._befores.__dict__.get("stack")
        if befores:
            before = befores.pop()
            if before is not None:
                self._shim.restore(before)

    def _forward_exit(self, module: Any, output: Any) -> None:
        chain = self.tracker.forward_exit(module)
        if chain is None or not self.torch.is_grad_enabled():
            return
        tensor = _first_grad_tensor(output, self.torch.Tensor)
        if tensor is not None:
            try:
                tensor.register_hook(self._backward_hook(chain))
            except RuntimeError:
                pass                        # a tensor that takes no hook: no backward scope

    def _backward_hook(self, chain: Chain) -> Callable[[Any], None]:
        def begin(grad: Any) -> None:
            if self.on and not self._compiling():
                self._guard(self._backward_begin, chain)

        return begin

    def _backward_begin(self, chain: Chain) -> None:
        backward_pass = self._graph_task() if self._graph_task is not None else None
        if self.tracker.backward_begin(chain, backward_pass) and self._engine is not None:
            ident = threading.get_ident()
            self._engine.queue_callback(lambda: self._guard(self.tracker.backward_end, ident))

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.on and not self._compiling():
            self._guard(self.tracker.optimizer_stepped, optimizer)


def install(torch: Any, scopes: Scopes) -> TorchHooks:
    hooks = TorchHooks(torch, scopes)
    try:
        hooks.install()
    except Exception as err:
        hooks.off(err, "its PyTorch hooks could not be installed")
    return hooks
