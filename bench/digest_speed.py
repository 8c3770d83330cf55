"""Digest and NaN-scan speed: cudump's kernel over one large float buffer before and after
each launch of samples/big_buffer.cu, against the memory bandwidth the sample's own
kernel (read + write of every float) reaches in the same program.

usage: python3 bench/digest_speed.py [--mib 1024] [--launches 6]   (GPU, built samples)
Goal (issue: find what went wrong): digests at >= 25% of the GPU's memory bandwidth.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))

from gpurun import big_buffer_launch_ms, big_buffer_rule, run, sample, under_cudump  # noqa: E402,E501


def launch_ms(stdout: str) -> float:
    return statistics.median(big_buffer_launch_ms(stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--launches", type=int, default=6)
    args = parser.parse_args()
    program = [*sample("big_buffer"), str(args.mib), str(args.launches)]
    nbytes = args.mib << 20
    with tempfile.TemporaryDirectory(prefix="cudump-digest-", dir="/dev/shm") as tmp:
        scratch = Path(tmp)
        bare = launch_ms(run(program, scratch).stdout)
        print(f"digest speed, {args.mib} MiB float buffer, median of {args.launches - 1} "
              "launches")
        print(f"{'mode':<28}{'ms/launch':>10}{'extra ms':>10}{'GB/s':>9}{'of HBM':>8}")
        hbm = 2 * nbytes / (bare / 1e3) / 1e9   # the kernel reads and writes every byte
        print(f"{'bare (add_one: r+w)':<28}{bare:>10.3f}{'':>10}{hbm:>9.0f}{'':>8}")
        share = 0.0
        for fmt in ("digest", "check-nan"):
            rule = big_buffer_rule(scratch / f"{fmt}.yaml", fmt)
            out = scratch / fmt
            done = run(under_cudump(program, out, rules=[rule]), scratch)
            if done.returncode != 0:
                print(done.stderr[-2000:])
                return 1
            ms = launch_ms(done.stdout)
            extra = ms - bare
            rate = 2 * nbytes / (extra / 1e3) / 1e9 if extra > 0 else float("inf")
            print(f"{'rule format: ' + fmt:<28}{ms:>10.3f}{extra:>10.3f}{rate:>9.0f}"
                  f"{rate / hbm:>8.0%}")
            if fmt == "digest":
                share = rate / hbm
                summary = json.loads((out / "summary.json").read_text())
                print(f"  ({summary['digests']} digests, before and after each launch; extra "
                      "time includes the round trips to cudump)")
        print(f"goal: digests >= 25% of memory bandwidth: {'met' if share >= 0.25 else 'NOT met'}"
              f" ({share:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
