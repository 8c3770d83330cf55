"""A real workload: samples/torch_train.py (conv, transformer encoder, AdamW, bf16 autocast)
bare, under cudump with no rules, under `cudump --trace`, and with a rule that snapshots one
kernel's output every 100th launch; interleaved, median of the repetitions.

Also `--digest` (every buffer of every kernel, before and after), a rule digesting every
kernel's buffers after it ran (its outputs), and `--check-nan`; on request (--modes)
`--break-on-nan`, which waits for every launch's scans.
Goals: no rules <= 1.02x bare, --trace <= 1.10x, digests and --check-nan <= 1.5x; the
snapshot rule's cost explained by the bytes it moves.

usage: python3 bench/training_step.py [--steps 300] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))

from gpurun import run, sample, under_cudump  # noqa: E402

STEP = re.compile(r"^step_ms ([\d.]+)$", re.MULTILINE)
LOSS = re.compile(r"^loss (\S+)$", re.MULTILINE)
PER_STEP = re.compile(r"^launches_per_step (\d+)$", re.MULTILINE)
RULE = """rules:
  - kernel: "*elementwise_kernel*"
    every: 100
    args: pointers
    when: after
    format: npy
"""
OUTPUTS = """rules:
  - kernel: "*"
    args: pointers
    when: after
    format: digest
"""


GPU_TOOLS = ("digest", "check-nan", "break-on-nan")   # modes that are a cudump option of that name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--modes", default="bare,cudump,trace,rule,digest,outputs,check-nan",
                        help="comma-separated subset of bare,cudump,trace,rule,digest,outputs,"
                             "check-nan,break-on-nan (not run by default: the program has no "
                             "NaN, so it measures what waiting for every launch's scans costs)")
    args = parser.parse_args()
    program = [*sample("torch_train.py"), str(args.steps)]
    modes = ["bare", *[m for m in args.modes.split(",") if m != "bare"]]
    step_ms: dict[str, list[float]] = {m: [] for m in modes}
    losses: set[str] = set()
    snapshot_bytes: list[int] = []
    tools: dict[str, tuple[int, int, int]] = {}
    per_step = 0
    with tempfile.TemporaryDirectory(prefix="cudump-train-", dir="/dev/shm") as tmp:
        scratch = Path(tmp)
        rule = scratch / "rule.yaml"
        rule.write_text(RULE)
        outputs = scratch / "outputs.yaml"
        outputs.write_text(OUTPUTS)
        rules = {"rule": [rule], "outputs": [outputs]}
        for rep in range(args.reps):
            for mode in modes:
                out = scratch / f"{mode}-{rep}"
                cmd = (program if mode == "bare" else
                       under_cudump(program, out, trace=mode == "trace",
                                    rules=rules.get(mode, []),
                                    extra=[f"--{mode}"] if mode in GPU_TOOLS else []))
                done = run(cmd, scratch, stderr_path=scratch / f"{mode}-{rep}.err")
                if done.returncode != 0:
                    print((scratch / f"{mode}-{rep}.err").read_text()[-3000:])
                    return 1
                step_ms[mode].append(float(STEP.search(done.stdout).group(1)))  # type: ignore
                losses.add(LOSS.search(done.stdout).group(1))  # type: ignore[union-attr]
                per_step = int(PER_STEP.search(done.stdout).group(1))  # type: ignore
                if mode != "bare":
                    summary = json.loads((out / "summary.json").read_text())
                    if mode == "rule":
                        snapshot_bytes.append(summary["snapshot_bytes"])
                    tools[mode] = (summary["launches"], summary.get("repeated_launches", 0),
                                   summary.get("digests", 0),
                                   summary.get("planned_launches", 0))
    bare = statistics.median(step_ms["bare"])
    print(f"training step, {args.steps} steps, ~{per_step} kernel launches per step, "
          f"median of {args.reps}")
    labels = {"bare": "bare", "cudump": "cudump (no rules)", "trace": "cudump --trace",
              "rule": "rule: every 100th", "digest": "cudump --digest",
              "outputs": "digest rule, after",
              "check-nan": "cudump --check-nan", "break-on-nan": "cudump --break-on-nan"}
    print(f"{'mode':<22}{'ms/step':>10}{'x bare':>9}")
    for mode in modes:
        ms = statistics.median(step_ms[mode])
        print(f"{labels[mode]:<22}{ms:>10.3f}{ms / bare:>9.3f}")
    print(f"same loss in every run: {'yes' if len(losses) == 1 else 'NO: ' + str(losses)}")
    for mode in ("rule", "digest", "outputs", "check-nan", "break-on-nan"):
        if mode in tools:
            launches, repeated, digests, asked = tools[mode]
            print(f"{labels[mode]}: {launches} launches, {asked} asked about (a round trip "
                  f"each), {repeated} planned by the shim itself (repeated plans), "
                  f"{digests} digests")
    if snapshot_bytes:
        written = statistics.median(snapshot_bytes)
        extra_s = (statistics.median(step_ms["rule"]) - bare) * args.steps / 1e3
        print(f"rule wrote {written / 2**20:.1f} MiB per run; its cost over bare, "
              f"{extra_s:.2f} s, is {written / 2**20 / max(extra_s, 1e-9):.0f} MiB/s written")
    for mode, goal in (("cudump", 1.02), ("trace", 1.10), ("digest", 1.5), ("outputs", 1.5),
                       ("check-nan", 1.5)):
        if mode not in step_ms:
            continue
        x = statistics.median(step_ms[mode]) / bare
        print(f"goal: {labels[mode]} <= {goal:.2f}x: {'met' if x <= goal else 'NOT met'} "
              f"({x:.3f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
