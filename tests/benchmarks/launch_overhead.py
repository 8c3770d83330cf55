"""Launch overhead of cudump: samples/build/empty_launch run bare, under
`cudump` with no rules, under `cudump` with a breakpoint that is never hit
(the prompt waiting, every process's wants cached), and under `cudump --trace`,
interleaved, several times each. Prints the median launches per second of each
and the overhead against the bare run (goal: no-rule and unhit-breakpoint
overhead <= 3%).

usage: python3 tests/benchmarks/launch_overhead.py [--launches N] [--reps R]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))

from gpurun import run, sample, under_cudump  # noqa: E402

RATE = re.compile(r"^launches_per_second (\d+(?:\.\d+)?)$", re.MULTILINE)
GOAL_PERCENT = 3.0


def one_run(mode: str, launches: int, scratch: Path, rep: int) -> float:
    program = [*sample("empty_launch"), str(launches)]
    out = scratch / f"{mode}-{rep}"
    if mode == "bare":
        cmd = program
    elif mode == "break":
        batch = scratch / "no-commands"
        batch.write_text("")
        cmd = under_cudump(program, out, extra=["--break", "never_launched_kernel",
                                                "--batch", str(batch)])
    else:
        cmd = under_cudump(program, out, trace=(mode == "trace"))
    # --trace prints a line per launch on stderr: into a file, not a pipe.
    result = run(cmd, scratch, stderr_path=scratch / f"{mode}-{rep}.stderr")
    if result.returncode != 0:
        err = (scratch / f"{mode}-{rep}.stderr").read_text()[-2000:]
        raise SystemExit(f"{mode} run {rep} failed with status {result.returncode}:\n{err}")
    match = RATE.search(result.stdout)
    if not match:
        raise SystemExit(f"{mode} run {rep} printed no rate:\n{result.stdout}")
    return float(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    modes = ["bare", "cudump", "break", "trace"]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="cudump-bench-") as tmp:
        scratch = Path(tmp)
        for rep in range(args.reps):
            # Interleaved, so that drift of the machine falls on every mode alike.
            for mode in modes:
                rates[mode].append(one_run(mode, args.launches, scratch, rep))

    bare = statistics.median(rates["bare"])
    print(f"empty_launch, {args.launches} launches, median of {args.reps} runs")
    print(f"{'mode':<16}{'launches/s':>14}{'overhead':>11}{'min':>12}{'max':>12}")
    labels = ["bare", "cudump", "cudump --break", "cudump --trace"]
    for mode, label in zip(modes, labels, strict=True):
        median = statistics.median(rates[mode])
        overhead = (bare / median - 1.0) * 100.0     # extra time per launch, in %
        print(f"{label:<16}{median:>14.0f}{overhead:>10.1f}%"
              f"{min(rates[mode]):>12.0f}{max(rates[mode]):>12.0f}")
    for mode, what in (("cudump", "no-rule"), ("break", "unhit-breakpoint")):
        extra = (bare / statistics.median(rates[mode]) - 1.0) * 100.0
        verdict = "met" if extra <= GOAL_PERCENT else "NOT met"
        print(f"goal: {what} overhead <= {GOAL_PERCENT:.0f}%: {verdict} ({extra:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
