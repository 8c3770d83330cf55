from . import modules  # noqa: F401
from .modules.module import Module  # noqa: F401
