"""Which of the shim's functions a thread's time went to, from bench/sampler.c's raw samples.

bench/sampler.c with SAMPLER_RAW=FILE writes each sample's frames (library+0xoffset, innermost
first; every frame but the innermost is a return address, looked up here a byte before, at its
call). For every sample with libcudump.so on its stack, this takes the innermost frame of the
shim, names it with addr2line against the same build of libcudump.so (the static functions
too, which the sampler's own report cannot name), and counts the sample for it, split by the
library the thread was in (the driver, libc, the shim itself). So the time in libcuda and libc
is told apart by the shim's call it was under: cudump's own kernel launch against the
program's. (Whether libc was called by the driver or by that function itself, it does not
tell.)

usage: python3 bench/sampler_callers.py RAW libcudump.so [--top N]
Prints each function's share of all samples, and of them the libraries it was in.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SHIM = "libcudump.so"
Resolve = Callable[[Sequence[str]], dict[str, str]]


@dataclass
class Callers:
    samples: int = 0
    with_shim: int = 0
    # the shim's innermost function -> library the thread was in (the shim's own functions
    # named) -> samples
    by_function: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))


def frame_parts(frame: str) -> tuple[str, str]:
    """`lib+0xoff` -> (lib, 0xoff); ('?', '') for a frame the sampler could not place."""
    lib, sep, offset = frame.rpartition("+")
    return (lib, offset) if sep and offset.startswith("0x") else ("?", "")


def addr2line(so: Path) -> Resolve:
    """Names offsets of `so` with binutils' addr2line (function names only)."""
    def resolve(offsets: Sequence[str]) -> dict[str, str]:
        if not offsets:
            return {}
        done = subprocess.run(["addr2line", "-f", "-e", str(so), *offsets],
                              capture_output=True, text=True, check=True)
        names = done.stdout.splitlines()[0::2]
        return dict(zip(offsets, names, strict=True))
    return resolve


def located(frames: Sequence[str]) -> list[tuple[str, str]]:
    """A sample's frames as (library, offset), every frame but the innermost moved back one
    byte: those are return addresses, which point after their call, possibly into the next
    function (or past an inlined one); the call itself is a byte before."""
    out = []
    for k, frame in enumerate(frames):
        lib, offset = frame_parts(frame)
        if k and offset and int(offset, 16) > 0:
            offset = hex(int(offset, 16) - 1)
        out.append((lib, offset))
    return out


def tally(lines: Iterable[str], resolve: Resolve) -> Callers:
    samples = [located(line.split()) for line in lines if line.strip()]
    offsets = sorted({offset for parts in samples for lib, offset in parts if lib == SHIM})
    names = resolve(offsets)
    out = Callers(samples=len(samples))
    for parts in samples:
        shim = [offset for lib, offset in parts if lib == SHIM]
        if not shim:
            continue
        out.with_shim += 1
        leaf_lib, leaf_offset = parts[0]
        where = f"{SHIM}:{names[leaf_offset]}" if leaf_lib == SHIM else leaf_lib
        out.by_function[names[shim[0]]][where] += 1
    return out


def report(c: Callers, top: int) -> str:
    if not c.samples:
        return "no samples"
    def share(n: int) -> str:
        return f"{100 * n / c.samples:6.2f}%"

    lines = [f"{c.samples} samples, {share(c.with_shim)} with the shim on the stack",
             "the shim's innermost function: share of all samples (the libraries it was in)"]
    ranked = sorted(c.by_function.items(), key=lambda kv: -sum(kv[1].values()))
    for name, libs in ranked[:top]:
        inner = ", ".join(f"{lib} {share(n).strip()}" for lib, n in libs.most_common(4))
        lines.append(f"{share(sum(libs.values()))}  {name}  ({inner})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("so", type=Path, help="the libcudump.so the program ran with")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    try:
        with args.raw.open() as f:
            print(report(tally(f, addr2line(args.so)), args.top))
    except (OSError, subprocess.CalledProcessError) as err:
        print(f"sampler_callers.py: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
