"""Launch overhead of cudump against the tools people use instead: samples/build/empty_launch
run bare, under `cudump` with no rules, under `cudump` with a breakpoint that is never hit,
under `cudump --trace`, under a minimal CUPTI callback subscriber (bench/cupti_count.c, built
where the toolkit has CUPTI), interleaved, several times each; and once under
`compute-sanitizer` (memcheck, fewer launches: it is much slower). Prints the median launches
per second of each and the time per launch against the bare run.

Goals: no rules and an unhit breakpoint within 3%; --trace at most 1.10x bare and cheaper than
the CUPTI subscriber.

With --before TREE (a checkout of an earlier tree, its shim built into TREE/cudump/_lib by
`python3 TREE/shim/build.py`), cudump with no rules and --trace run from that tree too,
interleaved with the rest, so a change is measured side by side with the tree before it.

usage: python3 bench/launch_overhead.py [--launches N] [--reps R] [--before TREE]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))

from gpurun import cudump_command, run, sample, under_cudump  # noqa: E402

RATE = re.compile(r"^launches_per_second (\d+(?:\.\d+)?)$", re.MULTILINE)
GOAL_PERCENT = 3.0


CUDA = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


def build_cupti(scratch: Path) -> tuple[Path, Path] | None:
    """libcupticount.so and the directory of libcupti, or None where there is no CUPTI."""
    for inc, lib in ((CUDA / "extras/CUPTI/include", CUDA / "extras/CUPTI/lib64"),
                     (CUDA / "include", CUDA / "lib64"),
                     (CUDA / "targets/x86_64-linux/include", CUDA / "targets/x86_64-linux/lib")):
        if (inc / "cupti.h").is_file() and list(lib.glob("libcupti.so*")):
            out = scratch / "libcupticount.so"
            done = subprocess.run(["cc", "-O2", "-fPIC", "-shared", f"-I{inc}", f"-I{CUDA}/include",
                                   str(ROOT / "bench" / "cupti_count.c"), f"-L{lib}", "-lcupti",
                                   "-o", str(out)], capture_output=True, text=True)
            if done.returncode == 0:
                return out, lib
            print(f"note: building the CUPTI subscriber failed: {done.stderr[-500:]}")
            return None
    return None


def one_run(mode: str, launches: int, scratch: Path, rep: int,
            cupti: tuple[Path, Path] | None = None, before: Path | None = None) -> float:
    program = [*sample("empty_launch"), str(launches)]
    out = scratch / f"{mode}-{rep}"
    env: dict[str, str] = {}
    if mode.endswith("-before"):
        assert before is not None
        mode = mode.removesuffix("-before")
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(before),
                                                            os.environ.get("PYTHONPATH")])),
               "CUDUMP_SHIM": str(before / "cudump/_lib/libcudump.so")}
    if mode == "bare":
        cmd = program
    elif mode == "cupti":
        assert cupti is not None
        cmd = ["env", f"LD_PRELOAD={cupti[0]}",
               f"LD_LIBRARY_PATH={cupti[1]}:{os.environ.get('LD_LIBRARY_PATH', '')}", *program]
    elif mode == "sanitizer":
        cmd = [str(CUDA / "bin" / "compute-sanitizer"), "--tool", "memcheck", "--print-limit",
               "1", *program]
    elif mode == "break":
        batch = scratch / "no-commands"
        batch.write_text("")
        cmd = under_cudump(program, out, extra=["--break", "never_launched_kernel",
                                                "--batch", str(batch)])
    else:
        cmd = under_cudump(program, out, trace=(mode == "trace"))
        if env:
            # That tree's package and shim, run as a module (not the installed script).
            cmd = ["env", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m", "cudump",
                   *cmd[len(cudump_command()):]]
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
    parser.add_argument("--quick", action="store_true",
                        help="cudump's own modes only (no CUPTI, no compute-sanitizer)")
    parser.add_argument("--before", type=Path, metavar="TREE",
                        help="an earlier checkout (its shim built): its no-rule and --trace "
                             "runs interleaved with this tree's")
    args = parser.parse_args()

    modes = ["bare", "cudump", "break", "trace"]
    labels = {"bare": "bare", "cudump": "cudump", "break": "cudump --break",
              "trace": "cudump --trace", "cupti": "CUPTI subscriber",
              "sanitizer": "compute-sanitizer", "cudump-before": "cudump (before)",
              "trace-before": "--trace (before)"}
    if args.before:
        before = args.before.resolve()
        if not (before / "cudump/_lib/libcudump.so").is_file():
            raise SystemExit(f"--before {before}: no cudump/_lib/libcudump.so (run "
                             f"python3 {before}/shim/build.py)")
        modes += ["cudump-before", "trace-before"]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="cudump-bench-") as tmp:
        scratch = Path(tmp)
        cupti = build_cupti(scratch) if not args.quick else None
        if cupti is not None:
            modes.append("cupti")
            rates["cupti"] = []
        elif not args.quick:
            print("note: no CUPTI in the toolkit here: the CUPTI subscriber is left out")
        for rep in range(args.reps):
            # Interleaved, so that drift of the machine falls on every mode alike.
            for mode in modes:
                rates[mode].append(one_run(mode, args.launches, scratch, rep, cupti,
                                           args.before and args.before.resolve()))
        sanitizer_launches = max(1, args.launches // 10)
        if not args.quick and (CUDA / "bin" / "compute-sanitizer").is_file():
            rates["sanitizer"] = [one_run("sanitizer", sanitizer_launches, scratch, 0)]
            modes.append("sanitizer")

    bare = statistics.median(rates["bare"])
    print(f"empty_launch, {args.launches} launches, median of {args.reps} runs "
          f"(compute-sanitizer: {args.launches // 10} launches, once)")
    print(f"{'mode':<20}{'launches/s':>12}{'us/launch':>11}{'x bare':>9}{'min':>11}{'max':>11}")
    for mode in modes:
        median = statistics.median(rates[mode])
        print(f"{labels[mode]:<20}{median:>12.0f}{1e6 / median:>11.2f}{bare / median:>9.2f}"
              f"{min(rates[mode]):>11.0f}{max(rates[mode]):>11.0f}")
    trace = bare / statistics.median(rates["trace"])
    verdict = "met" if trace <= 1.10 else "NOT met"
    print(f"goal: --trace <= 1.10x bare: {verdict} ({trace:.2f}x)")
    if "cupti" in rates:
        cupti_x = bare / statistics.median(rates["cupti"])
        verdict = "met" if trace < cupti_x else "NOT met"
        print(f"goal: --trace cheaper than the CUPTI subscriber: {verdict} "
              f"({trace:.2f}x against {cupti_x:.2f}x)")
    for mode in ("cudump", "trace"):
        if f"{mode}-before" in rates:
            now, then = (statistics.median(rates[m]) for m in (mode, f"{mode}-before"))
            print(f"{labels[mode]} against the tree before: {then / now:.3f}x its time a launch "
                  f"(runs ranged {min(rates[mode]):.0f}-{max(rates[mode]):.0f} launches/s, "
                  f"before {min(rates[f'{mode}-before']):.0f}-"
                  f"{max(rates[f'{mode}-before']):.0f})")
    for mode, what in (("cudump", "no-rule"), ("break", "unhit-breakpoint")):
        extra = (bare / statistics.median(rates[mode]) - 1.0) * 100.0
        verdict = "met" if extra <= GOAL_PERCENT else "NOT met"
        print(f"goal: {what} overhead <= {GOAL_PERCENT:.0f}%: {verdict} ({extra:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
