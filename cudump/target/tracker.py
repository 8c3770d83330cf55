"""Which module's forward or backward runs on each thread, and the training step, told to the
shim's per-thread scope stacks. Plain Python: modules are anything with `named_modules()`
(as torch.nn.Module has), so that this logic is tested without torch; torch_hooks.py is the
thin adapter that calls it from PyTorch's global hooks.

Names. A module's scope is named by its path in its model (`layer3.0.conv1`, as
`named_modules()` of the model gives it). The model, the root, is the outermost module whose
forward runs while this thread has no module open; it is named by its class name. A module
reached from two roots keeps the first path it was given. Paths are kept by identity, each
with a weak reference, so that a module freed and another made at its address are not
confused, and nothing here keeps a module alive.

Forward scopes nest as the calls do (pushed by the pre-hook, popped by the post-hook, which
runs even when the forward raises). Backward scopes follow autograd, which gives no reliable
end to a module's backward: a module's backward begins when the gradient of its output is
ready, and the thread's backward scopes then become that module's chain (its model, then each
enclosing module by path, then itself) until another module's backward begins or the
backward pass ends. A module whose backward begins while one of its own submodules' is
already open (a Sequential and its last child share their output) leaves the submodule open.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol

# ScopeKind.FORWARD and .BACKWARD of cudump/launches/scopes.py, repeated so that the target
# imports nothing of cudump outside this folder (tests/test_target_tracker.py checks them).
FORWARD = 2
BACKWARD = 3

if TYPE_CHECKING:                # (a program's Python may be older than cudump's: only
                                 # annotations, which are not evaluated, name it)
    Chain = tuple[str, ...]      # the scope names from the model to the module


class Scopes(Protocol):
    """The shim's scope stack of the calling thread."""

    def push(self, kind: int, name: str) -> bool: ...   # False: not pushed
    def pop(self) -> None: ...
    def step(self, wire_step: int) -> None: ...


# Modules that wrap a model, by class name, and the attribute that holds it.
WRAPPERS = {"DistributedDataParallel": "module", "DataParallel": "module",
            "OptimizedModule": "_orig_mod", "FullyShardedDataParallel": "_fsdp_wrapped_module"}


# Attributes by which a wrapper holds a module inside a model (FSDP's units, activation
# checkpointing's wrapper, torch.compile's): left out of paths, so that a wrapped layer keeps
# the path it has unwrapped, and opens no second scope.
HIDDEN = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})


def _unwrapped(module: Any) -> list[Any]:
    """`module`, and the modules it wraps in turn (a wrapper's model, through wrappers of
    wrappers): the model is the last."""
    out = [module]
    for _ in range(8):
        attribute = WRAPPERS.get(type(out[-1]).__name__)
        inner = getattr(out[-1], attribute, None) if attribute else None
        if inner is None:
            break
        out.append(inner)
    return out


class _Strong:
    """A stand-in for a weak reference to an object that takes none."""

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __call__(self) -> object:
        return self.obj


class ModulePaths:
    """Each module's chain of names (its model's, its enclosing modules', its own path)."""

    def __init__(self) -> None:
        self._chains: dict[int, tuple[Any, Chain]] = {}
        self._read: dict[int, None] = {}    # the models whose submodules were named

    def __len__(self) -> int:
        return len(self._chains)

    def get(self, module: object) -> Chain | None:
        entry = self._chains.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        return None

    def _put(self, module: object, chain: Chain) -> None:
        """Name `module`, unless it has a name already (the first path stays)."""
        if self.get(module) is not None:
            return
        key = id(module)
        chains, read = self._chains, self._read

        def forget(ref: object, key: int = key) -> None:
            entry = chains.get(key)
            if entry is not None and entry[0] is ref:
                del chains[key]
                read.pop(key, None)

        try:
            ref: Any = weakref.ref(module, forget)
        except TypeError:
            ref = _Strong(module)
        chains[key] = (ref, chain)

    def root(self, module: Any, again: bool = False) -> Chain:
        """`module`'s chain when its forward runs with no module open: its own if it has one
        (from an earlier model), else its class name, as a model's. Its submodules are named
        the first time (and `again`, for those added since). A wrapper (DDP, DataParallel,
        torch.compile's OptimizedModule) is named as the model it wraps, whose paths stay
        those of the model unwrapped."""
        chain = self.get(module)
        layers = _unwrapped(module)
        model = layers[-1]
        if chain is None:
            chain = self.get(model) or (type(model).__name__,)
            for layer in layers:
                self._put(layer, chain)
        elif not again and id(module) in self._read:
            return chain
        self._read[id(module)] = None
        self._name_submodules(model, chain, chain[-1] + "." if len(chain) > 1 else "")
        return chain

    def inner(self, module: Any, root: Any, parent: Chain) -> Chain:
        """The chain of `module`, whose forward runs inside `root`'s with `parent` the
        innermost open: its path in the model (read again, for a submodule added since), or
        else, for a module that is not the model's, the parent's path and its class name."""
        chain = self.get(module)
        if chain is not None:
            return chain
        self.root(root, again=True)
        chain = self.get(module)
        if chain is not None:
            return chain
        name = type(module).__name__
        chain = (*parent, f"{parent[-1]}.{name}" if len(parent) > 1 else name)
        self._put(module, chain)
        self._name_submodules(module, chain, chain[-1] + ".")
        return chain

    def _name_submodules(self, module: Any, chain: Chain, prefix: str) -> None:
        named = getattr(module, "named_modules", None)
        if named is None:
            return
        model = chain[0]
        for path, sub in named():
            if not path or self.get(sub) is not None:
                continue
            parts = [part for part in (prefix + path).split(".") if part not in HIDDEN]
            self._put(sub, (model, *(".".join(parts[:n]) for n in range(1, len(parts) + 1))))


class _Thread:
    """What one thread has opened, in order: (kind, module id, name, whether the shim took
    it onto its stack)."""

    def __init__(self) -> None:
        self.opened: list[tuple[int, int, str, bool]] = []
        self.modules: list[Any] = []        # the modules whose forward is open, outermost
                                            # first: the model, then those inside it
        self.chains: list[Chain] = []       # their chains, as they were named at the call
        self.backward_ended = False         # the backward pass ended on another thread
        self.backward_pass: object = None   # the pass whose scopes are open (where known)


class Tracker:
    """The scopes and the step of a program, told to `scopes` (the shim)."""

    def __init__(self, scopes: Scopes) -> None:
        self.scopes = scopes
        self.paths = ModulePaths()
        self._local = threading.local()
        self._threads: dict[int, _Thread] = {}
        self._optimizers: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._steps = 0                     # steps of the optimizer that stepped most
        self.wire_step = 0                  # what the shim was told: 0, or steps + 1

    def thread(self) -> _Thread:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = _Thread()
            self._threads[threading.get_ident()] = state
        return state

    # Forward: pushed and popped as the calls nest.

    def forward_enter(self, module: Any) -> None:
        state = self.thread()
        if state.modules:
            chain = self.paths.inner(module, state.modules[0], state.chains[-1])
        else:
            chain = self.paths.root(module)
        # A module named as the one around it (a wrapper's model) opens no scope of its own.
        same = bool(state.modules) and chain == state.chains[-1]
        state.modules.append(module)
        state.chains.append(chain)
        state.opened.append((FORWARD, id(module), chain[-1],
                             not same and self.scopes.push(FORWARD, chain[-1])))

    def innermost(self, module: Any) -> bool:
        """Whether `module`'s forward is the innermost scope this thread has open (its
        outputs are then told as its scope's)."""
        opened = self.thread().opened
        return bool(opened) and opened[-1][0] == FORWARD and opened[-1][1] == id(module)

    def forward_exit(self, module: Any) -> Chain | None:
        """Pop `module`'s forward scope (and any left open inside it); its chain, or None
        where its forward was not seen to begin."""
        state = self.thread()
        key = id(module)
        for depth in range(len(state.opened) - 1, -1, -1):
            kind, opened, _, _ = state.opened[depth]
            if kind == FORWARD and opened == key:
                break
        else:
            return None
        self._pop_to(state, depth)
        chain = None
        for n in range(len(state.modules) - 1, -1, -1):
            if state.modules[n] is module:
                chain = state.chains[n]
                del state.modules[n:]
                del state.chains[n:]
                break
        return chain if chain is not None else self.paths.get(module)

    def _pop_to(self, state: _Thread, depth: int) -> None:
        while len(state.opened) > depth:
            if state.opened.pop()[3]:
                self.scopes.pop()

    # Backward: each module's begins when its output's gradient is ready.

    def backward_begin(self, chain: Chain, backward_pass: object = None) -> bool:
        """The calling thread's backward scopes become `chain`'s; True where this thread had
        no backward scope open (the caller then arranges `backward_end` at the pass's end).
        `backward_pass` names the pass where autograd says (a new one closes the scopes an
        earlier pass left open, should its end not have been seen)."""
        state = self.thread()
        if state.backward_ended or (backward_pass is not None
                                    and backward_pass != state.backward_pass):
            state.backward_ended = False
            self._end_backward(state)
        state.backward_pass = backward_pass
        start = len(state.opened)
        while start > 0 and state.opened[start - 1][0] == BACKWARD:
            start -= 1
        open_names = [entry[2] for entry in state.opened[start:]]
        first = not open_names
        if len(open_names) > len(chain) and tuple(open_names[:len(chain)]) == chain:
            return first                    # inside a submodule of its own already
        common = 0
        while (common < len(open_names) and common < len(chain)
               and open_names[common] == chain[common]):
            common += 1
        self._pop_to(state, start + common)
        for name in chain[common:]:
            state.opened.append((BACKWARD, 0, name, self.scopes.push(BACKWARD, name)))
        return first

    def backward_end(self, ident: int | None = None) -> None:
        """The backward pass ended: the backward scopes of thread `ident` (the calling
        thread's by default) are closed, at once on the calling thread, else at that
        thread's next backward."""
        if ident is None or ident == threading.get_ident():
            self._end_backward(self.thread())
            return
        state = self._threads.get(ident)
        if state is not None:
            state.backward_ended = True

    def _end_backward(self, state: _Thread) -> None:
        start = len(state.opened)
        while start > 0 and state.opened[start - 1][0] == BACKWARD:
            start -= 1
        self._pop_to(state, start)

    def close_thread(self) -> None:
        """Pop everything the calling thread has open (the hooks are going off)."""
        state = self.thread()
        self._pop_to(state, 0)
        state.modules.clear()
        state.chains.clear()

    # Steps: counted once an optimizer exists; the optimizer that stepped most counts.

    def optimizer_created(self) -> None:
        if self.wire_step == 0:
            self._tell(1)

    def optimizer_stepped(self, optimizer: object) -> None:
        try:
            count = self._optimizers.get(optimizer, 0) + 1
            self._optimizers[optimizer] = count
        except TypeError:                   # takes no weak reference: count every step
            count = self._steps + 1
        if count > self._steps:
            self._steps = count
            self._tell(count + 1)
        elif self.wire_step == 0:
            self._tell(self._steps + 1)

    def _tell(self, wire_step: int) -> None:
        self.wire_step = wire_step
        self.scopes.step(wire_step)
