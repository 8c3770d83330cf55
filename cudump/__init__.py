"""cudump: a memory-dump and kernel-argument inspection debugger for CUDA programs."""

__version__ = "0.1.0"
