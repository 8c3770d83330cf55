"""Memory of the shim and of the controller over a long traced run: samples/build/empty_launch
with one million launches under `cudump --trace`. Prints the resident memory of the
controller (the cudump process) and of the target (which holds the shim) at intervals and at
the peak: both must stay flat, whatever the number of launches.

usage: python3 bench/trace_memory.py [--launches N]   (needs a GPU and the built samples)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))

from gpurun import sample, under_cudump  # noqa: E402


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cudump-mem-") as tmp:
        cmd = under_cudump([*sample("empty_launch"), str(args.launches)], Path(tmp) / "run",
                           trace=True)
        with open(Path(tmp) / "stderr", "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            samples: list[tuple[float, int, int]] = []
            start = time.monotonic()
            while proc.poll() is None:
                kids = children(proc.pid)
                ctl = rss_kib(proc.pid) or 0
                target = max((rss_kib(k) or 0 for k in kids), default=0)
                samples.append((time.monotonic() - start, ctl, target))
                time.sleep(0.5)
            out = proc.stdout.read() if proc.stdout else ""
        lines = sum(1 for _ in open(Path(tmp) / "run" / "trace.jsonl"))
    print(f"{args.launches} launches under cudump --trace: status {proc.returncode}, "
          f"{lines} trace records, {time.monotonic() - start:.1f} s")
    print(f"{'t (s)':>8}{'controller RSS (MiB)':>24}{'target RSS (MiB)':>20}")
    step = max(1, len(samples) // 10)
    for t, ctl, target in samples[::step]:
        print(f"{t:>8.1f}{ctl / 1024:>24.1f}{target / 1024:>20.1f}")
    if samples:
        print(f"{'peak':>8}{max(s[1] for s in samples) / 1024:>24.1f}"
              f"{max(s[2] for s in samples) / 1024:>20.1f}")
    print(out.strip().splitlines()[-1] if out.strip() else "(no output)")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
