"""How cudump's costs grow: pass-through launch cost over 1 to 10,000 distinct kernels, and
allocation, free and launch cost over 1 to 1,000,000 live allocations, bare and under cudump
(no rules). The curves should be flat.

usage: python3 bench/scaling.py [--launches 100000]   (GPU, cuda-python)
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))

from gpurun import run, sample, under_cudump  # noqa: E402

VALUE = re.compile(r"^(\w+)_us ([\d.]+)$", re.MULTILINE)


def measure(args: list[str], under: bool, scratch: Path, tag: str) -> dict[str, float]:
    program = [*sample("scaling.py"), *args]
    cmd = under_cudump(program, scratch / tag) if under else program
    done = run(cmd, scratch, stderr_path=scratch / f"{tag}.err")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n"
                         + (scratch / f"{tag}.err").read_text()[-2000:])
    return {k: float(v) for k, v in VALUE.findall(done.stdout)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cudump-scale-") as tmp:
        scratch = Path(tmp)
        print(f"launch cost over distinct kernels ({args.launches} launches, round robin)")
        print(f"{'kernels':>10}{'bare us':>10}{'cudump us':>11}{'x':>7}")
        for k in (1, 10, 100, 1000, 10000):
            a = measure(["kernels", str(k), str(args.launches)], False, scratch, f"k{k}b")
            b = measure(["kernels", str(k), str(args.launches)], True, scratch, f"k{k}c")
            print(f"{k:>10}{a['launch']:>10.3f}{b['launch']:>11.3f}"
                  f"{b['launch'] / a['launch']:>7.2f}")
        print("allocation, free and launch cost over live allocations")
        print(f"{'allocs':>10}{'alloc us':>10}{'cudump':>9}{'free us':>9}{'cudump':>9}"
              f"{'launch us':>11}{'cudump':>9}")
        for n in (1, 1000, 10_000, 100_000, 1_000_000):
            a = measure(["allocs", str(n), str(args.launches)], False, scratch, f"a{n}b")
            b = measure(["allocs", str(n), str(args.launches)], True, scratch, f"a{n}c")
            print(f"{n:>10}{a['alloc']:>10.3f}{b['alloc']:>9.3f}{a['free']:>9.3f}"
                  f"{b['free']:>9.3f}{a['launch']:>11.3f}{b['launch']:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
