pre_hooks = []
post_hooks = []


class Handle:
    def __init__(self, hooks, hook):
        self.hooks, self.hook = hooks, hook

    def remove(self):
        if self.hook in self.hooks:
            self.hooks.remove(self.hook)


def register_module_forward_pre_hook(hook):
    pre_hooks.append(hook)
    return Handle(pre_hooks, hook)


def register_module_forward_hook(hook, *, always_call=False):
    entry = (hook, always_call)
    post_hooks.append(entry)
    return Handle(post_hooks, entry)


class Module:
    def __setattr__(self, name, value):
        if isinstance(value, Module):
            self.__dict__.setdefault("_modules", {})[name] = value
        object.__setattr__(self, name, value)

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, child in self.__dict__.get("_modules", {}).items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def __call__(self, *args):
        for hook in list(pre_hooks):
            hook(self, args)
        try:
            out = self.forward(*args)
        except BaseException:
            for hook, always in list(post_hooks):
                if always:
                    hook(self, args, None)
            raise
        for hook, _ in list(post_hooks):
            hook(self, args, out)
        return out
