"""What naming each launch's layer costs (--layers): ResNet-18 batch 8, eager inference, ms an
iteration (300 after 20 of warm-up), bare and under `cudump --trace` and `--check-nan`, each
with and without `--layers`, the modes alternating within each round so that each figure is
set against bare's of the same round.

usage: python3 bench/scope_cost.py [--rounds 2] [--iterations 300]
       (GPU: torch, torchvision, cudump installed)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = """\
import sys, time
import torch, torchvision
m = torchvision.models.resnet18().cuda().eval()
x = torch.randn(8, 3, 224, 224, device="cuda")
with torch.no_grad():
    for _ in range(20):
        m(x)
    torch.cuda.synchronize()
    n = int(sys.argv[1])
    t = time.perf_counter()
    for _ in range(n):
        m(x)
    torch.cuda.synchronize()
print(f"per_iter {(time.perf_counter() - t) / n * 1e3:.3f} ms")
"""

MODES: dict[str, list[str]] = {
    "bare": [],
    "trace": ["--trace"],
    "trace --layers": ["--trace", "--layers"],
    "check-nan": ["--check-nan"],
    "check-nan --layers": ["--check-nan", "--layers"],
}


def one(mode: list[str], program: Path, run_dir: Path, iterations: int) -> float | None:
    cudump = [shutil.which("cudump") or "cudump", "--out", str(run_dir), "--max-bytes", "1G",
              *mode, "--"] if mode else []
    try:
        done = subprocess.run([*cudump, sys.executable, str(program), str(iterations)],
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    found = re.search(r"per_iter ([0-9.]+) ms", done.stdout)
    return float(found.group(1)) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "resnet18_inference.py"
        program.write_text(PROGRAM)
        print("round | mode | ms an iteration | to bare")
        for round_ in range(1, args.rounds + 1):
            bare = None
            for name, mode in MODES.items():
                ms = one(mode, program, Path(tmp) / "run", args.iterations)
                bare = ms if name == "bare" else bare
                ratio = f"{ms / bare:.2f}x" if ms and bare else "-"
                print(f"{round_} | {name} | {ms if ms is not None else 'failed'} | {ratio}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
