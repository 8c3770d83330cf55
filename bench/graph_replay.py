"""Graph replay cost: samples/graph_replay (a graph of 20 empty kernels replayed 20,000 times)
bare, under cudump with no rules, and under `cudump --trace` (each replay reports its 20 kernel
nodes); interleaved, median of the repetitions. Goal: no rules <= 1.02x bare.

Then the same graph with a buffer of 1024 ints in its first kernel (`--buffer`), replayed
--snap-replays times with a rule snapshotting that buffer after every replay: what a replay
costs when it runs cudump's instrumented copy of the graph (instantiated once, reused) and
hands 4 KiB to the controller.

usage: python3 bench/graph_replay.py [--replays N] [--snap-replays N] [--reps R]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))

from gpurun import run, sample, under_cudump  # noqa: E402

RATE = re.compile(r"^replays_per_second (\d+)$", re.MULTILINE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=20_000)
    parser.add_argument("--snap-replays", type=int, default=2_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    program = [*sample("graph_replay"), str(args.replays)]
    modes = ["bare", "cudump", "trace"]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="cudump-graph-") as tmp:
        scratch = Path(tmp)
        for rep in range(args.reps):
            for mode in modes:
                cmd = program if mode == "bare" else under_cudump(
                    program, scratch / f"{mode}-{rep}", trace=mode == "trace")
                done = run(cmd, scratch, stderr_path=scratch / f"{mode}-{rep}.err")
                if done.returncode != 0:
                    print((scratch / f"{mode}-{rep}.err").read_text()[-2000:])
                    return 1
                rates[mode].append(float(RATE.search(done.stdout).group(1)))  # type: ignore
    bare = statistics.median(rates["bare"])
    print(f"graph of 20 empty kernels, {args.replays} replays, median of {args.reps}")
    print(f"{'mode':<18}{'replays/s':>12}{'x bare':>9}")
    for mode, label in zip(modes, ["bare", "cudump", "cudump --trace"], strict=True):
        median = statistics.median(rates[mode])
        print(f"{label:<18}{median:>12.0f}{bare / median:>9.3f}")
    x = bare / statistics.median(rates["cudump"])
    print(f"goal: no rules <= 1.02x: {'met' if x <= 1.02 else 'NOT met'} ({x:.3f}x)")
    return snapshot_rule(args)


def snapshot_rule(args: argparse.Namespace) -> int:
    program = [*sample("graph_replay"), str(args.snap_replays), "--buffer"]
    rates: dict[str, list[float]] = {"bare": [], "rule": []}
    with tempfile.TemporaryDirectory(prefix="cudump-graph-") as tmp:
        scratch = Path(tmp)
        rule = scratch / "touch.yaml"
        rule.write_text("rules:\n  - kernel: touch_kernel\n    args: [0]\n    when: after\n"
                        "    format: npy\n    overrides:\n      0: {count: arg1}\n")
        for rep in range(args.reps):
            for mode in rates:
                cmd = program if mode == "bare" else under_cudump(
                    program, scratch / f"snap-{rep}", rules=[rule])
                done = run(cmd, scratch, stderr_path=scratch / f"snap-{mode}-{rep}.err")
                if done.returncode != 0:
                    print((scratch / f"snap-{mode}-{rep}.err").read_text()[-2000:])
                    return 1
                rates[mode].append(float(RATE.search(done.stdout).group(1)))  # type: ignore
    bare, rule_rate = statistics.median(rates["bare"]), statistics.median(rates["rule"])
    print(f"same graph, first kernel touching 1024 ints; {args.snap_replays} replays, a rule "
          f"snapshotting that buffer after every replay")
    print(f"{'bare':<18}{bare:>12.0f} replays/s  {1e6 / bare:>8.1f} us/replay")
    print(f"{'cudump + rule':<18}{rule_rate:>12.0f} replays/s  {1e6 / rule_rate:>8.1f} us/replay"
          f"  ({bare / rule_rate:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
