"""The in-target tracker (cudump/target/tracker.py) with plain objects shaped like torch's
modules: module paths in their model, the scopes each thread pushes and pops, backward
scopes, steps."""

from __future__ import annotations

import gc
import threading

from cudump.launches.scopes import ScopeKind
from cudump.target import tracker
from cudump.target.tracker import BACKWARD, FORWARD, ModulePaths, Tracker


class Module:
    """named_modules() as torch.nn.Module gives it: itself as '', then each submodule by its
    dotted path, each module once."""

    def __init__(self, **children: Module) -> None:
        self.children = dict(children)

    def named_modules(self, prefix: str = "", seen: set[int] | None = None):
        seen = set() if seen is None else seen
        if id(self) in seen:
            return
        seen.add(id(self))
        yield prefix, self
        for name, child in self.children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name, seen)


class ResNet(Module):
    pass


class Conv(Module):
    pass


class Block(Module):
    pass


class Head(Module):
    pass


class Recorder:
    """The shim's stacks, one per thread, and the step it was told."""

    def __init__(self) -> None:
        self.stacks: dict[int, list[tuple[int, str]]] = {}
        self.events: list[tuple[str, object]] = []
        self.steps: list[int] = []
        self.refuse: set[str] = set()

    def stack(self) -> list[tuple[int, str]]:
        return self.stacks.setdefault(threading.get_ident(), [])

    def push(self, kind: int, name: str) -> bool:
        if name in self.refuse:
            return False
        self.stack().append((kind, name))
        self.events.append(("push", name))
        return True

    def pop(self) -> None:
        assert self.stack(), "popped an empty stack"
        self.events.append(("pop", self.stack().pop()[1]))

    def step(self, wire_step: int) -> None:
        self.steps.append(wire_step)

    def names(self) -> list[str]:
        return [name for _, name in self.stack()]


def resnet() -> ResNet:
    return ResNet(conv1=Conv(),
                  layer1=Module(**{"0": Block(conv1=Conv(), conv2=Conv()),
                                   "1": Block(conv1=Conv(), conv2=Conv())}),
                  fc=Head())


def test_the_kinds_are_the_launch_models():
    assert (tracker.FORWARD, tracker.BACKWARD) == (ScopeKind.FORWARD, ScopeKind.BACKWARD)


def test_forward_scopes_nest_as_the_calls_and_name_each_module_by_its_path():
    model = resnet()
    shim = Recorder()
    t = Tracker(shim)
    conv = model.children["layer1"].children["0"].children["conv1"]
    t.forward_enter(model)
    t.forward_enter(model.children["layer1"])
    t.forward_enter(model.children["layer1"].children["0"])
    t.forward_enter(conv)
    assert shim.stack() == [(FORWARD, "ResNet"), (FORWARD, "layer1"), (FORWARD, "layer1.0"),
                            (FORWARD, "layer1.0.conv1")]
    assert t.forward_exit(conv) == ("ResNet", "layer1", "layer1.0", "layer1.0.conv1")
    assert shim.names() == ["ResNet", "layer1", "layer1.0"]
    # A forward that raised inside: the post-hook of an outer module pops what was left.
    t.forward_enter(model.children["layer1"].children["0"].children["conv2"])
    t.forward_exit(model)
    assert shim.stack() == []
    # A post-hook whose pre-hook was not seen pops nothing.
    assert t.forward_exit(conv) is None and shim.stack() == []


def test_a_module_of_two_models_keeps_its_first_path():
    shared = Conv()
    a = ResNet(body=Module(conv=shared))
    b = Head(other=shared)
    shim = Recorder()
    t = Tracker(shim)
    for model in (a, b):
        t.forward_enter(model)
        t.forward_enter(shared)
        t.forward_exit(shared)
        t.forward_exit(model)
    pushed = [name for what, name in shim.events if what == "push"]
    assert pushed == ["ResNet", "body.conv", "Head", "body.conv"]


def test_a_submodule_called_as_a_model_keeps_its_path_and_names_its_own():
    model = resnet()
    block = model.children["layer1"].children["1"]
    shim = Recorder()
    t = Tracker(shim)
    t.forward_enter(model)
    t.forward_exit(model)
    block.children["extra"] = Conv()          # added after the model was first read
    t.forward_enter(block)
    t.forward_enter(block.children["extra"])
    assert shim.names() == ["layer1.1", "layer1.1.extra"]


def test_a_submodule_added_later_and_a_module_from_outside_the_model():
    model = resnet()
    shim = Recorder()
    t = Tracker(shim)
    t.forward_enter(model)
    t.forward_exit(model)
    model.children["late"] = Conv()
    outsider = Head(proj=Conv())
    t.forward_enter(model)
    t.forward_enter(model.children["late"])
    t.forward_exit(model.children["late"])
    t.forward_enter(model.children["layer1"])
    t.forward_enter(outsider)
    t.forward_enter(outsider.children["proj"])
    assert shim.names() == ["ResNet", "layer1", "layer1.Head", "layer1.Head.proj"]
    assert ("push", "late") in shim.events


class OptimizedModule(Module):
    def __init__(self, model: Module) -> None:
        super().__init__(_orig_mod=model)
        self._orig_mod = model


class DistributedDataParallel(Module):
    def __init__(self, model: Module) -> None:
        super().__init__(module=model)
        self.module = model


def test_a_wrapped_model_is_named_as_the_model():
    model = resnet()
    wrapped = DistributedDataParallel(OptimizedModule(model))
    shim = Recorder()
    t = Tracker(shim)
    conv = model.children["layer1"].children["0"].children["conv1"]
    for module in (wrapped, wrapped.module, model, model.children["layer1"],
                   model.children["layer1"].children["0"], conv):
        t.forward_enter(module)
    assert shim.names() == ["ResNet", "layer1", "layer1.0", "layer1.0.conv1"]
    t.forward_exit(wrapped)
    assert shim.stack() == []


def test_layers_wrapped_inside_a_model_keep_their_paths():
    block = Block(conv1=Conv())
    unit = Module(_fsdp_wrapped_module=block)
    model = ResNet(layers=Module(**{"0": unit}))
    shim = Recorder()
    t = Tracker(shim)
    for module in (model, model.children["layers"], unit, block, block.children["conv1"]):
        t.forward_enter(module)
    assert shim.names() == ["ResNet", "layers", "layers.0", "layers.0.conv1"]


def test_paths_are_forgotten_with_their_modules():
    paths = ModulePaths()
    model = resnet()
    paths.root(model)
    assert len(paths) == 10
    del model
    gc.collect()
    assert len(paths) == 0


def test_a_scope_the_shim_refused_is_not_popped():
    model = resnet()
    shim = Recorder()
    shim.refuse.add("fc")
    t = Tracker(shim)
    t.forward_enter(model)
    t.forward_enter(model.children["fc"])
    assert shim.names() == ["ResNet"]
    t.forward_exit(model.children["fc"])
    assert shim.names() == ["ResNet"]
    t.forward_exit(model)
    assert shim.stack() == []


def test_backward_scopes_follow_the_modules_whose_gradients_are_ready():
    shim = Recorder()
    t = Tracker(shim)
    block = ("ResNet", "layer1", "layer1.0")
    conv2 = (*block, "layer1.0.conv2")
    conv1 = (*block, "layer1.0.conv1")
    assert t.backward_begin(("ResNet", "fc")) is True          # the first of the pass
    assert shim.stack() == [(BACKWARD, "ResNet"), (BACKWARD, "fc")]
    assert t.backward_begin(conv2) is False
    assert shim.names() == list(conv2)
    # The block shares conv2's output: conv2 stays open.
    t.backward_begin(block)
    assert shim.names() == list(conv2)
    t.backward_begin(conv1)
    assert shim.names() == list(conv1)
    assert ("pop", "layer1") not in shim.events                 # the common part stayed
    t.backward_end()
    assert shim.stack() == []


def test_a_backward_pass_that_ends_on_another_thread_closes_at_the_next():
    shim = Recorder()
    t = Tracker(shim)
    done = threading.Event()
    idents: list[int] = []

    def autograd_thread() -> None:
        idents.append(threading.get_ident())
        t.backward_begin(("ResNet", "fc"))
        done.wait(30)
        t.backward_begin(("ResNet",))                 # the next pass: starts clean
        idents.append(len(shim.stack()))

    thread = threading.Thread(target=autograd_thread)
    thread.start()
    while not idents:
        threading.Event().wait(0.01)
    t.backward_end(idents[0])                         # from this thread
    done.set()
    thread.join(30)
    assert idents[1] == 1
    assert [e for e in shim.events if e[0] == "pop"] == [("pop", "fc"), ("pop", "ResNet")]


def test_forward_inside_backward_nests_over_it():
    model = resnet()
    shim = Recorder()
    t = Tracker(shim)
    t.forward_enter(model)
    t.forward_exit(model)
    t.backward_begin(("ResNet", "layer1"))
    block = model.children["layer1"].children["0"]
    t.forward_enter(block)                            # recomputed (checkpointing)
    assert shim.names() == ["ResNet", "layer1", "layer1.0"]
    t.forward_exit(block)
    assert shim.names() == ["ResNet", "layer1"]


def test_steps_count_from_the_first_optimizer_by_the_one_that_stepped_most():
    shim = Recorder()
    t = Tracker(shim)

    class Optimizer:
        pass

    g, d = Optimizer(), Optimizer()
    t.optimizer_created()
    t.optimizer_created()
    assert shim.steps == [1]
    for _ in range(2):
        t.optimizer_stepped(g)
        t.optimizer_stepped(d)
    assert shim.steps == [1, 2, 3] and t.wire_step == 3


def test_threads_have_stacks_of_their_own():
    model = resnet()
    shim = Recorder()
    t = Tracker(shim)
    t.forward_enter(model)
    seen: list[list[str]] = []

    def other() -> None:
        t.forward_enter(model.children["fc"])   # nothing open on this thread: a model
        seen.append(shim.names())
        t.forward_exit(model.children["fc"])
        seen.append(shim.names())

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(30)
    assert seen == [["fc"], []]
    assert shim.names() == ["ResNet"]


def test_a_new_backward_pass_closes_what_an_unseen_end_left_open():
    shim = Recorder()
    t = Tracker(shim)
    assert t.backward_begin(("ResNet", "layer1", "layer1.0"), backward_pass=1) is True
    # The pass's end never came (it raised); the next pass starts from nothing.
    assert t.backward_begin(("ResNet",), backward_pass=2) is True
    assert shim.names() == ["ResNet"]
    assert [e for e in shim.events if e[0] == "pop"] == [("pop", "layer1.0"), ("pop", "layer1"),
                                                         ("pop", "ResNet")]


def test_a_backward_scope_the_shim_refused_still_counts_as_open():
    shim = Recorder()
    shim.refuse.add("layer1")
    t = Tracker(shim)
    t.backward_begin(("ResNet", "layer1", "layer1.0"))
    t.backward_begin(("ResNet", "layer1", "layer1.1"))
    assert shim.names() == ["ResNet", "layer1.1"]
    assert [e for e in shim.events if e[0] == "pop"] == [("pop", "layer1.0")]
    t.backward_end()
    assert shim.stack() == []
