"""Snapshot speed: how long a launch is held when a rule copies a large buffer before and after
it, against a pinned device-to-host copy of the same bytes measured in the same program, and
the end-to-end rate into .npy files on tmpfs against plain file-write bandwidth.

usage: python3 bench/snapshot_speed.py [--mib 256] [--launches 6] [--gap-ms 400]
(GPU, built samples). Three runs under cudump:
  held      launches --gap-ms apart (a program with other work between them): how long each
            launch is held, the bytes reaching the files meanwhile;
  back      launches back to back: each waits for the previous one's files, so the launch
            time is the end-to-end rate;
  no-scratch  back to back with --scratch 0: the launch held for the copies to the host and
            the file writes (the path before deferred copies).
Goals (issue: performance): held <= 1.25x the two pinned copies; end to end >= 80% of the
lesser of pinned D2H and file-write bandwidth.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))

from gpurun import big_buffer_launch_ms, big_buffer_rule, run, sample, under_cudump  # noqa: E402,E501

D2H = re.compile(r"^d2h_ms ([\d.]+)$", re.MULTILINE)


def write_bandwidth(where: Path, mib: int) -> float:
    """GB/s of np.save of `mib` MiB into `where` (tmpfs), median of 3."""
    data = np.ones(mib << 18, np.float32)
    times = []
    for i in range(3):
        t = time.perf_counter()
        np.save(where / f"w{i}.npy", data)
        times.append(time.perf_counter() - t)
        (where / f"w{i}.npy").unlink()
    return data.nbytes / statistics.median(times) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--launches", type=int, default=6)
    parser.add_argument("--gap-ms", type=int, default=400)
    args = parser.parse_args()
    program = [*sample("big_buffer"), str(args.mib), str(args.launches)]
    gapped = [*program, "--gap", str(args.gap_ms)]
    with tempfile.TemporaryDirectory(prefix="cudump-snap-", dir="/dev/shm") as tmp:
        scratch = Path(tmp)
        rule = big_buffer_rule(scratch / "rule.yaml", "npy")
        bare = run(program, scratch)
        bare_gap = run(gapped, scratch)
        runs = {}
        for name, cmd, extra in (("held", gapped, ()), ("back", program, ()),
                                 ("no-scratch", program, ("--scratch", "0"))):
            wrapped = run(under_cudump(cmd, scratch / name, rules=[rule], extra=extra), scratch)
            if bare.returncode or bare_gap.returncode or wrapped.returncode:
                print(bare.stderr[-2000:], wrapped.stderr[-2000:])
                return 1
            runs[name] = statistics.median(big_buffer_launch_ms(wrapped.stdout))
        writes = write_bandwidth(scratch, args.mib)
    nbytes = args.mib << 20
    bare_ms = statistics.median(big_buffer_launch_ms(bare.stdout))
    bare_gap_ms = statistics.median(big_buffer_launch_ms(bare_gap.stdout))
    held_ms = runs["held"] - bare_gap_ms
    old_ms = runs["no-scratch"] - bare_ms
    d2h_ms = float(D2H.search(bare.stdout).group(1))  # type: ignore[union-attr]
    d2h_gbs = nbytes / d2h_ms / 1e6
    copies_ms = 2 * d2h_ms
    e2e_gbs = 2 * nbytes / (runs["back"] - bare_ms) / 1e6
    floor = min(d2h_gbs, writes)
    print(f"buffer {args.mib} MiB, rule before+after, launches 2..{args.launches} (median)")
    print(f"{'what':<52}{'value':>12}")
    print(f"{'launch, bare (ms)':<52}{bare_ms:>12.2f}")
    print(f"{f'held per launch, launches {args.gap_ms} ms apart (ms)':<52}{held_ms:>12.2f}")
    print(f"{'two pinned D2H copies (ms)':<52}{copies_ms:>12.2f}")
    print(f"{'held / copies (goal <= 1.25)':<52}{held_ms / copies_ms:>12.2f}")
    print(f"{'held per launch with --scratch 0 (ms)':<52}{old_ms:>12.2f}")
    print(f"{'pinned D2H (GB/s)':<52}{d2h_gbs:>12.1f}")
    print(f"{'np.save to tmpfs (GB/s)':<52}{writes:>12.1f}")
    print(f"{'end to end into .npy, back to back (GB/s)':<52}{e2e_gbs:>12.1f}")
    print(f"{'end to end / lesser (goal >= 0.80)':<52}{e2e_gbs / floor:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
