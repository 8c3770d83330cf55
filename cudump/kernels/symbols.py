"""Host symbols for `bt`: the function a code address falls in, from the module's ELF tables.

The shim reports each frame as (module path, offset from the module's load
base) where the dynamic loader knows no symbol — static functions of a
release binary, for one. Their names are still in the file's `.symtab` unless
it was stripped; this reads it (ELF64, little endian: every CUDA host) and
falls back to `.dynsym`. Names are returned as stored (mangled); the caller
demangles.

The module path is as the loader holds it: for the program itself, the name it was
started by (argv[0]), which is a bare name when the shell found it on PATH, or a path
relative to the directory it started in. module_file resolves such a name the way the
kernel did: /proc/PID/exe (the file the kernel executed), the process's working directory,
then a PATH lookup.
"""

from __future__ import annotations

import bisect
import os
import shutil
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_SHT_SYMTAB, _SHT_DYNSYM, _PT_LOAD, _STT_FUNC = 2, 11, 1, 2
_MAX_FILE = 1 << 31


@dataclass(frozen=True)
class SymbolTable:
    load_base: int                    # lowest PT_LOAD address, page aligned (0 for PIE/.so)
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    names: tuple[str, ...]

    def lookup(self, module_offset: int) -> tuple[str, int] | None:
        """(symbol, offset into it) for an offset from the module's load base."""
        vaddr = self.load_base + module_offset
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0 or vaddr >= self.ends[i]:
            return None
        return self.names[i], vaddr - self.starts[i]


def _read_table(data: bytes) -> SymbolTable | None:
    if len(data) < _EHDR.size or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    (_, _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum,
     _) = _EHDR.unpack_from(data)
    loads = []
    for i in range(phnum):
        off = phoff + i * phentsize
        if off + _PHDR.size > len(data):
            break
        ptype, _, _, vaddr, *_ = _PHDR.unpack_from(data, off)
        if ptype == _PT_LOAD:
            loads.append(vaddr)
    load_base = (min(loads) & ~0xFFF) if loads else 0
    sections = []
    for i in range(shnum):
        off = shoff + i * shentsize
        if off + _SHDR.size > len(data):
            break
        sections.append(_SHDR.unpack_from(data, off))
    for wanted in (_SHT_SYMTAB, _SHT_DYNSYM):
        found = [s for s in sections if s[1] == wanted]
        if not found:
            continue
        _, _, _, _, sym_off, sym_size, link, _, _, entsize = found[0]
        if link >= len(sections) or entsize < _SYM.size:
            continue
        str_off, str_size = sections[link][4], sections[link][5]
        strtab = data[str_off:str_off + str_size]
        entries = []
        for pos in range(sym_off, min(sym_off + sym_size, len(data)) - _SYM.size + 1, entsize):
            name_off, info, _, shndx, value, size = _SYM.unpack_from(data, pos)
            if info & 0xF != _STT_FUNC or shndx == 0 or value == 0:
                continue
            end = strtab.find(b"\0", name_off)
            name = strtab[name_off:end if end >= 0 else None].decode("utf-8", "replace")
            entries.append((value, value + max(size, 1), name))
        if entries:
            entries.sort()
            return SymbolTable(load_base, tuple(e[0] for e in entries),
                               tuple(e[1] for e in entries), tuple(e[2] for e in entries))
    return None


@lru_cache(maxsize=64)
def symbol_table(path: str) -> SymbolTable | None:
    """The function symbols of an ELF file, or None (unreadable, stripped, not ELF)."""
    try:
        file = Path(path)
        if file.stat().st_size > _MAX_FILE:
            return None
        return _read_table(file.read_bytes())
    except (OSError, struct.error, ValueError):
        return None


def _proc_link(pid: int, name: str) -> str | None:
    try:
        target = os.readlink(f"/proc/{pid}/{name}")
    except OSError:
        return None
    return target.removesuffix(" (deleted)")


def _process_path_variable(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(b"PATH="):
            return entry[5:].decode("utf-8", "replace")
    return None


def module_file(module: str, pid: int | None = None) -> str:
    """The file a module path names, as the process `pid` sees it: an absolute path as it
    is; the program's own name (bare, as found on PATH, or relative) resolved the way the
    kernel resolved it when it started the program."""
    if os.path.isabs(module):
        return module
    if pid is not None:
        exe = _proc_link(pid, "exe")
        # A bare name is the program itself: libraries are held by the paths they were
        # found at. A relative path is the program when the names agree.
        if exe is not None and ("/" not in module
                                or os.path.basename(module) == os.path.basename(exe)):
            return exe
        cwd = _proc_link(pid, "cwd")
        if cwd is not None and "/" in module and os.path.exists(os.path.join(cwd, module)):
            return os.path.join(cwd, module)
    if "/" not in module:
        path = (_process_path_variable(pid) if pid is not None else None) \
            or os.environ.get("PATH")
        found = shutil.which(module, path=path)
        if found is not None:
            return found
    return module


def symbolize(module: str | None, module_offset: int, pid: int | None = None
              ) -> tuple[str, int] | None:
    """The symbol (name, offset into it) at `module_offset` in `module` of process `pid`."""
    if not module:
        return None
    table = symbol_table(module_file(module, pid))
    return table.lookup(module_offset) if table is not None else None
