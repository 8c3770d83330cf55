"""The real-world matrix: programs nobody on the team wrote, bare and under every mode.

For every cell (program x mode) it checks what a user of a debugger may take for granted:
- the exit status and stdout are the bare run's (lines that print timings are left out);
- the run ends within BOUND of the bare time (10x + 60 s), or it is killed and fails;
- every record in the manifest is either on disk (its files exist) or says why not, and
  no record failed for a reason other than a limit the user set (`--max-bytes`) or a
  launch recorded during stream capture (which does not run, so there is nothing to copy);
  a snapshot "let go" (a held launch's copies not made in time, so cudump let the program's
  stream go without them: a NaN producer's buffers, what the user came for) fails the cell
  and is counted in the table;
- cudump printed no traceback and no internal error;
- for the program that aborts right after a synchronised launch, that launch's `after`
  record is on disk in every mode that takes one.

usage: python3 tests/gpu/matrix/matrix.py [--programs A,B] [--modes X,Y] [--jobs N]
                                          [--json FILE] [--neighbour gemm]
Prints one line per cell as it ends and a table last; exits 1 if any cell failed.
`--neighbour gemm` keeps a second process busy on the same GPU for the whole matrix, bare
runs included (large bf16 GEMMs back to back, neighbour_gemm.py), and stops it at the end.
Programs that reserve most of the GPU's memory (JAX) run alone, after the others.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BUILD = ROOT / "samples" / "build"
BOUND_FACTOR = 10.0
BOUND_EXTRA_S = 60.0
# A failed record is acceptable only for a byte budget (the user's or the default one) or a
# launch that did not run (recorded during stream capture).
ALLOWED_FAILURES = re.compile(r"--max-bytes \d+ reached|byte budget \d+|captur")
# Refused with a reason, and counted apart in the table: digests and NaN scans of kernels
# inside graph launches where the driver gives cudump no way to run its kernel there.
REFUSED = re.compile(r"no way to run its kernel inside this graph launch")
# Recorded with its reason, counted apart, and a failure of the cell: a copy of a held
# launch's buffers that was not made within the shim's bound, or a hold not served in time,
# so the shim let the program's stream go on without them.
LET_GO = re.compile(r"so cudump let the stream go")
# How long the neighbour process may take to start (import torch, its first GEMM).
NEIGHBOUR_START_S = 180.0


@dataclass(frozen=True)
class Program:
    name: str
    argv: tuple[str, ...]              # "py:FILE" runs HERE/FILE with this Python
    needs: str = ""                    # a Python module it imports ("" for a binary)
    drop_lines: str = r"$^"            # stdout lines that differ between runs (timings)
    exclusive: bool = False            # takes most of the GPU's memory: runs alone
    keeps_after: str | None = None     # a kernel whose `after` record must survive
    gpus: int = 1                      # GPUs it needs

    def command(self) -> list[str]:
        head, *rest = self.argv
        if head.startswith("py:"):
            return [sys.executable, str(HERE / head[3:]), *rest]
        return [str(BUILD / head), *rest]

    def missing(self) -> str | None:
        head = self.argv[0]
        if not head.startswith("py:") and not (BUILD / head).is_file():
            return f"samples/build/{head} is not built (make -C samples)"
        if self.needs:
            try:
                __import__(self.needs)
            except Exception as err:  # noqa: BLE001 - any import failure means "not here"
                return f"{self.needs} does not import: {type(err).__name__}"
        if self.gpus > 1 and gpu_count() < self.gpus:
            return f"needs {self.gpus} GPUs, this machine has {gpu_count()}"
        return None


def gpu_count() -> int:
    """The driver's device count (0 where it does not answer)."""
    import ctypes

    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


@dataclass(frozen=True)
class Mode:
    name: str
    options: tuple[str, ...]
    takes_records: bool = False        # writes a record for a launch it was asked to take


PROGRAMS: tuple[Program, ...] = (
    Program("resnet18", ("py:resnet.py",), needs="torchvision"),
    Program("resnet18-inf", ("py:resnet.py", "--inf", "--passes", "6"), needs="torchvision"),
    Program("bert", ("py:bert.py",), needs="transformers"),
    Program("jax-mlp", ("py:jax_mlp.py",), needs="jax", exclusive=True),
    Program("jax-mlp-launches", ("py:jax_mlp.py", "--no-command-buffers"), needs="jax",
            exclusive=True),
    Program("cupy", ("py:cupy_ops.py",), needs="cupy"),
    Program("compile", ("py:compiled.py", "default"), needs="torch"),
    Program("compile-ro", ("py:compiled.py", "reduce-overhead"), needs="torch"),
    Program("side-graph", ("py:side_graph.py",), needs="torch"),
    Program("abort", ("abort_after",), keeps_after="mark"),
    Program("ctx-reset", ("ctx_cycle", "reset", "4")),
    # more contexts, one after another, than the shim keeps anything for at once
    Program("ctx-create", ("ctx_cycle", "create", "40")),
    # a context that lives on while the primary one is reset beside it
    Program("ctx-two", ("ctx_cycle", "two", "4")),
    Program("big-256M", ("big_buffer", "256", "4"), drop_lines=r"^(launch \d+ ms|d2h_ms)"),
    Program("big-1G", ("big_buffer", "1024", "4"), drop_lines=r"^(launch \d+ ms|d2h_ms)"),
    Program("ddp-2gpu", ("py:ddp.py",), needs="torch", exclusive=True, gpus=2),
)

EVERY_KERNEL_RULE = """rules:
  - name: every-kernel
    kernel: "*"
    when: both
    format: npy
"""
# Two stops looked at, then the input runs out and the program runs to its end.
BREAK_BATCH = "info args\ncontinue\ninfo args\ncontinue\n"


def modes(files: Path) -> tuple[Mode, ...]:
    rule = files / "every-kernel.yaml"
    rule.write_text(EVERY_KERNEL_RULE)
    batch = files / "break.batch"
    batch.write_text(BREAK_BATCH)
    return (
        Mode("none", ()),
        Mode("trace", ("--trace",)),
        Mode("rule", ("--rule", str(rule), "--max-bytes", "3G"), takes_records=True),
        Mode("digest", ("--digest",), takes_records=True),
        Mode("check-nan", ("--check-nan",)),
        Mode("digest-alone", ("--digest", "--no-scans-ahead"), takes_records=True),
        Mode("check-nan-alone", ("--check-nan", "--no-scans-ahead")),
        Mode("capture", ("--capture-launch", "*", "--max-bytes", "2G"), takes_records=True),
        Mode("break", ("--break", "*", "--batch", str(batch))),
    )


@dataclass
class Ran:
    status: int | None                 # None: killed at the bound
    stdout: str
    stderr_tail: str
    seconds: float


@dataclass
class Cell:
    program: str
    mode: str
    ok: bool = True
    seconds: float = 0.0
    ratio: float = 0.0
    records: int = 0
    refused: int = 0
    let_go: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    summary: str = ""
    skipped: str | None = None         # not run here, and why

    def fail(self, problem: str) -> None:
        self.ok = False
        self.problems.append(problem)


def cudump_command() -> list[str]:
    script = shutil.which("cudump")
    return [script] if script else [sys.executable, "-m", "cudump"]


def run(cmd: Sequence[str], cwd: Path, limit_s: float) -> Ran:
    """Runs cmd in its own process group; at limit_s the whole group is killed."""
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=limit_s)
            status: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            status = None
        seconds = time.monotonic() - start
        err.seek(0)
        tail = err.read()[-4000:]
    return Ran(status, out, tail, seconds)


def exit_status(status: int | None) -> int | None:
    """A signal N as a shell (and cudump) reports it: 128 + N."""
    return 128 - status if status is not None and status < 0 else status


def kept_stdout(program: Program, text: str) -> list[str]:
    drop = re.compile(program.drop_lines)
    return [line for line in text.splitlines() if not drop.search(line)]


def check_records(cell: Cell, run_dir: Path, program: Program, mode: Mode) -> None:
    from cudump.errors import CudumpError
    from cudump.rundir.manifest import read_manifest

    if not (run_dir / "manifest.jsonl").exists():
        records = []
    else:
        try:
            records = read_manifest(run_dir)
        except CudumpError as err:
            cell.fail(f"manifest unreadable: {err}")
            return
    cell.records = len(records)
    for rec in records:
        if rec.status == "ok":
            for name in (rec.file, rec.png):
                if name and not (run_dir / name).is_file():
                    cell.fail(f"record of launch {rec.launch} names {name}, not on disk")
        elif not rec.reason:
            cell.fail(f"failed record of launch {rec.launch} says no reason")
        else:
            cell.failed[rec.reason[:90]] += 1
            if REFUSED.search(rec.reason):
                cell.refused += 1
            elif LET_GO.search(rec.reason):
                cell.let_go += 1
                cell.ok = False
            elif not ALLOWED_FAILURES.search(rec.reason):
                cell.ok = False
    if cell.let_go:
        cell.problems.append(f"{cell.let_go} snapshots let go (a held launch's buffers lost)")
    if cell.failed and not cell.ok and len(cell.problems) == (1 if cell.let_go else 0):
        worst = cell.failed.most_common(1)[0]
        cell.problems.append(f"{sum(cell.failed.values())} failed records, "
                             f"e.g. {worst[1]}x '{worst[0]}'")
    if program.keeps_after and mode.takes_records:
        kept = [r for r in records if r.phase == "after" and r.status == "ok"
                and program.keeps_after in r.kernel]
        if not kept:
            cell.fail(f"no `after` record of {program.keeps_after} survived the crash")
    summary = run_dir / "summary.json"
    if summary.is_file():
        data = json.loads(summary.read_text())
        cell.summary = (f"{data.get('launches', 0)} launches, {data.get('snapshots', 0)} "
                        f"snapshots, {data.get('snapshot_errors', 0)} failed, "
                        f"{data.get('digests', 0)} digests, "
                        f"{data.get('nan_producers', 0)} NaN/Inf")


def run_cell(program: Program, mode: Mode, bare: Ran, work: Path) -> Cell:
    cell = Cell(program.name, mode.name)
    run_dir = work / f"{program.name}-{mode.name}"
    limit = BOUND_FACTOR * bare.seconds + BOUND_EXTRA_S
    cmd = [*cudump_command(), "--out", str(run_dir), *mode.options, "--",
           *program.command()]
    ran = run(cmd, work, limit)
    cell.seconds = ran.seconds
    cell.ratio = ran.seconds / bare.seconds if bare.seconds else 0.0
    if ran.status is None:
        cell.fail(f"killed at the bound ({limit:.0f} s; bare {bare.seconds:.1f} s)")
    elif ran.status != exit_status(bare.status):
        cell.fail(f"exit {ran.status}, bare {exit_status(bare.status)}")
    if ran.status is not None and kept_stdout(program, ran.stdout) != kept_stdout(program,
                                                                                  bare.stdout):
        cell.fail("stdout differs from bare: "
                  + repr(ran.stdout[-300:]) + " against " + repr(bare.stdout[-300:]))
    for marker in ("Traceback (most recent call last)", "internal error"):
        if marker in ran.stderr_tail:
            cell.fail(f"cudump printed '{marker}'")
    check_records(cell, run_dir, program, mode)
    if not cell.ok:
        cell.problems.append("stderr: " + ran.stderr_tail[-1200:].replace("\n", " | "))
    shutil.rmtree(run_dir, ignore_errors=True)
    return cell


def run_program(program: Program, all_modes: Sequence[Mode], work: Path, jobs: int,
                report: Callable[[Cell], None]) -> list[Cell]:
    missing = program.missing()
    if missing:
        cell = Cell(program.name, "bare", skipped=missing)
        report(cell)
        return [cell]
    bare = run(program.command(), work, 900)
    head = Cell(program.name, "bare", seconds=bare.seconds, ratio=1.0)
    if bare.status is None or (bare.status != 0 and not program.keeps_after):
        head.fail(f"the bare run failed (exit {bare.status}): {bare.stderr_tail[-600:]}")
        report(head)
        return [head]
    head.summary = " / ".join(kept_stdout(program, bare.stdout))[:150]
    report(head)
    cells = [head]
    with ThreadPoolExecutor(max_workers=1 if program.exclusive else jobs) as pool:
        for cell in pool.map(lambda m: run_cell(program, m, bare, work), all_modes):
            report(cell)
            cells.append(cell)
    return cells


def table(cells: Sequence[Cell], mode_names: Sequence[str]) -> str:
    programs = list(dict.fromkeys(c.program for c in cells))
    by = {(c.program, c.mode): c for c in cells}
    header = ["program", "bare s", *mode_names]
    rows = [header, ["---"] * len(header)]
    for name in programs:
        bare = by.get((name, "bare"))
        if bare is not None and bare.skipped:
            rows.append([name, f"not run: {bare.skipped}", *["-"] * len(mode_names)])
            continue
        row = [name, f"{bare.seconds:.1f}" if bare and bare.ok else "FAIL"]
        for mode in mode_names:
            cell = by.get((name, mode))
            if cell is None:
                row.append("-")
            else:
                limited = sum(cell.failed.values()) - cell.refused - cell.let_go
                row.append(f"{'ok' if cell.ok else 'FAIL'} {cell.ratio:.2f}x"
                           + (f", {limited} over budget" if limited and cell.ok else "")
                           + (f", {cell.refused} refused in graphs" if cell.refused else "")
                           + (f", {cell.let_go} let go" if cell.let_go else ""))
        rows.append(row)
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


class Neighbour:
    """A second process on the same GPU for the whole matrix (neighbour_gemm.py), in its
    own process group, stopped with SIGTERM at the end."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.out = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, str(HERE / f"neighbour_{kind}.py")],
                                     stdout=self.out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True,
                                     start_new_session=True)

    def output(self) -> str:
        self.out.seek(0)
        return self.out.read()

    def started(self) -> bool:
        """Waits until it says `ready` (its first GEMM is done); false if it died first."""
        end = time.monotonic() + NEIGHBOUR_START_S
        while time.monotonic() < end and self.proc.poll() is None:
            if "ready" in self.output().split():
                return True
            time.sleep(0.2)
        return "ready" in self.output().split()

    def stop(self) -> str | None:
        """Stops it; why it did not run to the end, or None."""
        early = self.proc.poll()
        if early is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        tail = self.output().strip().splitlines()[-3:]
        print(f"neighbour {self.kind}: {' / '.join(tail)}", flush=True)
        return None if early is None else f"the neighbour ended early (exit {early})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", help="comma-separated names (default: all)")
    parser.add_argument("--modes", help="comma-separated names (default: all)")
    parser.add_argument("--jobs", type=int, default=4, help="cells run at once (default 4)")
    parser.add_argument("--json", type=Path, help="write every cell's result here")
    parser.add_argument("--work", type=Path, help="where run directories go (default: a "
                        "temporary folder, removed at the end)")
    parser.add_argument("--neighbour", choices=["gemm"], help="a second process busy on the "
                        "same GPU for the whole matrix: gemm, bf16 GEMMs back to back")
    args = parser.parse_args(argv)
    neighbour = Neighbour(args.neighbour) if args.neighbour else None
    if neighbour is not None and not neighbour.started():
        print(f"the neighbour did not start: {neighbour.output()[-1500:]}", flush=True)
        neighbour.stop()
        return 1
    work = Path(tempfile.mkdtemp(prefix="cudump-matrix-", dir=args.work))
    all_modes = modes(work)
    if args.modes:
        wanted = args.modes.split(",")
        all_modes = tuple(m for m in all_modes if m.name in wanted)
    programs = PROGRAMS
    if args.programs:
        wanted = args.programs.split(",")
        programs = tuple(p for p in PROGRAMS if p.name in wanted)
    # The others first, together; a program that takes the GPU's memory alone, last.
    order = [p for p in programs if not p.exclusive] + [p for p in programs if p.exclusive]

    def report(cell: Cell) -> None:
        if cell.skipped:
            print(f"{cell.program:14} not run: {cell.skipped}", flush=True)
            return
        line = (f"{cell.program:14} {cell.mode:10} {'ok  ' if cell.ok else 'FAIL'} "
                f"{cell.seconds:7.1f}s {cell.ratio:6.2f}x  {cell.summary}")
        print(line, flush=True)
        for reason, n in cell.failed.most_common(3):
            print(f"    {n} failed: {reason}", flush=True)
        for problem in cell.problems:
            print(f"    {problem[:1500]}", flush=True)

    cells: list[Cell] = []
    try:
        shared = [p for p in order if not p.exclusive]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs // 2)) as pool:
            for result in pool.map(lambda p: run_program(p, all_modes, work,
                                                         max(1, args.jobs // 2), report),
                                   shared):
                cells += result
        for program in order[len(shared):]:
            cells += run_program(program, all_modes, work, 1, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        ended = neighbour.stop() if neighbour is not None else None
    print()
    print(table(cells, [m.name for m in all_modes]))
    if args.json:
        args.json.write_text(json.dumps([cell.__dict__ for cell in cells], indent=1,
                                        default=dict))
    bad = [c for c in cells if not c.ok]
    let_go = sum(c.let_go for c in cells)
    print(f"\n{len(cells) - len(bad)} cells ok, {len(bad)} failed, {let_go} snapshots let go"
          + (f" (beside a {neighbour.kind} neighbour)" if neighbour is not None else ""))
    if ended:
        print(ended)
    return 1 if bad or ended else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
