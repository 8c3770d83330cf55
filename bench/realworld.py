"""Real workloads under cudump and the tools people use instead, in one table of ratios.

Every mode of a workload is measured side by side in one run, interleaved, median of the
repetitions:

  resnet18   torchvision ResNet-18 inference, batch 8 (samples/torch_forward.py)
  bert       a Hugging Face BERT-base encoder built from its config, batch 8 x 128 tokens
  snapshots  samples/big_buffer: a kernel over a 256 MiB buffer, 4 launches back to back, a
             rule taking it before and after each launch (`when: both`)

The two models run bare (which also times the anchor: a forward hook on every module doing
torch.isnan(out).any(), how NaN is looked for without a debugger), under cudump with no rules,
--trace, --check-nan and --digest, and under a minimal CUPTI subscriber (bench/cupti_count.c).
Each prints its own ms per forward (synchronize and perf_counter around the timed forwards),
and a CPU probe timed in the same process before them (µs for one small PyTorch op on the
CPU): the notes give each mode's probe, and name a mode whose processes ran on a CPU of
another speed than bare's (these hosts run the same process at several speeds). So the
forwards are timed in chunks (--chunks: by default 10, where --iters makes them 10 forwards or
more), each after a shorter probe, and each chunk is set against bare's chunks of the same
probe: the ratio at the host's speed of the moment, the table's "at bare's speed". Where at
least half of a mode's chunks found bare chunks of their speed, its goal is judged on that
ratio; else on the ratio of the medians
(as is --check-nan's row against the isnan hooks, which are timed in bare's own processes).
With --turns the model processes of a repetition run all at once and take turns
(bench/turns.py): each times a chunk only while the others wait, round by round, so that each
chunk runs within a fraction of a second of bare's chunk of the same round, at the same host
speed; the goals are then judged on the median of those pairs' ratios (each mode's figure
"at bare's speed"), over the rounds whose two chunks ran on CPUs of one speed (probes within
10%) where there are at least 8, else over every round; bare, first in the ring, times the
isnan hooks once the ring is done.
The snapshot rule runs at the default settings and with --staging 1G: per-launch time bare
against cudump, the snapshots found on disk, the time a launch is held against two pinned
device-to-host copies of the buffer timed in the same process, and the time from the first
launch to the last snapshot on disk against the time the snapshots take at the lesser of the
pinned copy's and the file write's rate (of the run directory's file system).

Goals: --trace <= 1.03x, --check-nan and --digest <= 1.5x, --check-nan below the isnan-hook
anchor; snapshots: held <= 1.25x the two copies, end to end >= 80% of the lesser of the pinned
copy's and the file write's rate (<= 1.25x the time at that rate).

usage: python3 bench/realworld.py [--quick] [--only resnet18,bert,snapshots] [--reps R]
                                  [--without-ahead] [--no-hand-off] [--cpus LIST]
                                  [--modes M,N] [--chunks K] [--turns]
       (GPU: torch, torchvision, transformers, the built samples, cudump installed)
Exits 1 when a run failed or printed what was not expected (its row says FAILED).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.append(str(ROOT))      # cudump's manifest reader, where cudump is not installed

from gpurun import BUILD, cudump_command, sample, under_cudump  # noqa: E402
from launch_overhead import build_cupti  # noqa: E402
from realworld_run import (  # noqa: E402
    Done,
    Say,
    Settings,
    cudump_summary,
    device_name,
    first_line,
    run_in_turns,
    sub_run,
)
from realworld_snapshots import (  # noqa: E402
    SNAP_LAUNCHES,
    SNAP_MIB,
    SnapshotWorkload,
    snapshot_base,
)
from realworld_table import (  # noqa: E402
    WORKLOADS,
    BenchError,
    Goal,
    Row,
    cupti_launches,
    level_notes,
    level_ratio,
    markdown,
    matched_notes,
    noise_notes,
    parse_only,
    ratio_row,
    read_list,
    read_values,
    round_notes,
    round_ratio,
    speed_notes,
)
from turns import Ring  # noqa: E402

# Chunks of forwards a run, each timed after its own CPU probe: the host ran one process at
# several speeds, and a goal is judged at bare's speed of the moment (level_ratio).
DEFAULT_CHUNKS = 10
# Forwards a chunk has at least by default: each chunk begins with the GPU idle (a synchronize
# and the probe), so a chunk of one forward would time its latency, not the program's pace.
CHUNK_FORWARDS = 10
TORCH_MODES = ("bare", "cudump", "trace", "check-nan", "digest", "cupti")
# With --without-ahead: the two scanning modes again with --no-scans-ahead, and with
# --no-hand-off: again without the launcher thread, for comparison in the same run. Each is the
# scanning mode and its extra option.
ALONE_MODES = ("check-nan-alone", "digest-alone")
OWN_MODES = ("check-nan-own", "digest-own")
VARIANTS = {"-alone": "--no-scans-ahead", "-own": "--no-hand-off"}
LABELS = {"bare": "bare", "cudump": "cudump (no rules)", "trace": "cudump --trace",
          "check-nan": "cudump --check-nan", "digest": "cudump --digest",
          "check-nan-alone": "cudump --check-nan --no-scans-ahead",
          "digest-alone": "cudump --digest --no-scans-ahead",
          "check-nan-own": "cudump --check-nan --no-hand-off",
          "digest-own": "cudump --digest --no-hand-off",
          "cupti": "CUPTI subscriber (no cudump)",
          "anchor": "isnan hooks, checked per module (no cudump)",
          "anchor-nosync": "isnan hooks, one check per forward (no cudump)"}
GOALS = {"trace": Goal(1.03), "check-nan": Goal(1.5), "digest": Goal(1.5),
         "check-nan-alone": Goal(1.5), "digest-alone": Goal(1.5),
         "check-nan-own": Goal(1.5), "digest-own": Goal(1.5)}
BELOW_ANCHOR = Goal(1.0, strict=True)
TITLES = {"resnet18": "resnet18 b8", "bert": "bert-base b8x128"}
NEEDS = {"resnet18": "torchvision", "bert": "transformers"}


def scanning_mode(mode: str) -> str:
    """The cudump mode a variant (ALONE_MODES, OWN_MODES) runs."""
    for suffix in VARIANTS:
        mode = mode.removesuffix(suffix)
    return mode


def modes_to_run(s: Settings) -> tuple[list[str], set[str]]:
    """The modes a repetition runs, in order, and those --modes leaves out. A variant
    (--without-ahead, --no-hand-off) runs where its scanning mode runs: `--modes check-nan
    --no-hand-off` runs --check-nan both ways."""
    run: list[str] = []
    left_out: set[str] = set()
    for mode in (*TORCH_MODES, *(ALONE_MODES if s.alone else ()),
                 *(OWN_MODES if s.own_thread else ())):
        if s.modes and mode != "bare" and scanning_mode(mode) not in s.modes:
            left_out.add(mode)
        else:
            run.append(mode)
    return run, left_out


def check_mode(mode: str, out: Path, summary: dict, where: str, min_launches: int) -> str:
    """That the mode did its work (a run that quietly did nothing would measure nothing);
    a note of what it did."""
    asked, repeated = summary.get("planned_launches", 0), summary.get("repeated_launches", 0)
    if mode == "trace":
        try:
            with (out / "trace.jsonl").open() as f:
                lines = sum(1 for _ in f)
        except OSError as err:
            raise BenchError(f"{where}: no trace.jsonl: {err}") from None
        if lines < min_launches or summary.get("trace_dropped", 0):
            raise BenchError(f"{where}: trace.jsonl has {lines} events, "
                             f"{summary.get('trace_dropped', 0)} dropped")
        return f"{lines} trace events"
    mode = scanning_mode(mode)
    if mode == "check-nan" and repeated == 0:
        raise BenchError(f"{where}: no launch was scanned by a kept plan ({asked} asked about):"
                         " are kernel names demangled (cxxfilt) where cudump runs?")
    if mode == "digest" and summary.get("digests", 0) == 0:
        raise BenchError(f"{where}: cudump made no digest ({asked} launches asked about)")
    most = list(summary.get("planned_kernels", {}).items())[:2]   # most asked first
    mostly = ("; asked most: " + ", ".join(f"{name[:60]} ({n})" for name, n in most)
              if most else "")
    ahead = (f" ({summary.get('scans_ahead', 0)} with their scans before them made ahead, "
             f"{summary.get('scans_ahead_void', 0)} made ahead and not used)")
    handed = (f", {summary.get('handed_off', 0)} launches of cudump's kernel made by the "
              "launcher thread" if summary.get("handed_off") else "")
    if summary.get("launcher_trials"):
        handed += (f" and {summary.get('handed_back', 0)} by the launching thread (the launcher "
                   f"won {summary.get('launcher_won', 0)} of {summary['launcher_trials']} trials)")
    if summary.get("tools_waiting"):
        handed += (f", {summary['tools_waiting']} launched with programmatic stream "
                   "serialization")
    return (f"{summary['launches']} launches, {asked} asked about, {repeated} repeated by the "
            f"shim{ahead}{handed}, {summary.get('digests', 0)} digests, "
            f"{summary.get('nan_producers', 0)} NaN/Inf producers{mostly}")


def launcher_said(summary: dict) -> str:
    """A run's launcher trials, as its progress line says them: which way each run went
    (the table's notes keep only the last run's summary)."""
    trials = summary.get("launcher_trials", 0)
    if not trials:
        return ""
    return f" (launcher won {summary.get('launcher_won', 0)}/{trials})"


@dataclass
class TorchWorkload:
    """One model: its modes run one after the other in each repetition."""

    name: str
    ms: dict[str, list[float]] = field(default_factory=dict)
    probes: dict[str, list[float]] = field(default_factory=dict)   # host_probe_us, per mode
    failed: dict[str, str] = field(default_factory=dict)
    outputs: set[float] = field(default_factory=set)
    notes: dict[str, str] = field(default_factory=dict)
    # per repetition: mode -> (ms a forward, CPU probe µs)
    runs: list[dict[str, tuple[float, float]]] = field(default_factory=list)
    # mode label -> (ms a forward, CPU probe µs) of each chunk of forwards (--chunks)
    chunks: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    left_out: set[str] = field(default_factory=set)     # modes --modes did not name
    # --turns: per repetition, mode label -> (ms a forward, CPU probe µs) of each chunk, in
    # turn order
    rounds: list[dict[str, list[tuple[float, float]]]] = field(default_factory=list)
    launcher: str = ""      # the last cudump run's launcher trials, for its progress line

    def rep(self, rep: int, s: Settings, say: Say) -> None:
        program = [*sample("torch_forward.py"), self.name, "--iters", str(s.iters),
                   "--warmup", str(s.warmup), "--chunks", str(s.chunks)]
        self.runs.append({})
        run, left_out = modes_to_run(s)
        self.left_out |= left_out
        run = [mode for mode in run if mode != "cupti" or s.cupti is not None]
        if s.turns:
            self.rounds.append({})
            self._in_turns(run, program, rep, s, say)
            return
        for mode in run:
            where = f"{self.name} {mode} (rep {rep + 1})"
            out = s.scratch / f"{self.name}-{mode}-{rep}"
            try:
                cmd, keys = self._command(mode, program, out, rep, s)
                done = sub_run(s.pinned(cmd), s.scratch, where, s.limit_s)
                values = self._take(mode, done, keys, out, s, where)
            except BenchError as err:
                self.failed.setdefault(mode, first_line(err))
                say(f"FAILED {err}")
                if mode == "bare":
                    return          # no ratio without it: the rest of this rep is skipped
                continue
            finally:
                shutil.rmtree(out, ignore_errors=True)
            self._said(mode, values, rep, s, say)

    def _in_turns(self, run: list[str], program: list[str], rep: int, s: Settings,
                  say: Say) -> None:
        """Every mode of the repetition at once, taking turns chunk by chunk (bench/turns.py):
        bare first in the ring, so that its anchors are timed once the ring is done."""
        wheres = [f"{self.name} {mode} (rep {rep + 1}, in turns)" for mode in run]
        outs = [s.scratch / f"{self.name}-{mode}-{rep}" for mode in run]
        try:
            with Ring(s.scratch / f"ring-{self.name}-{rep}", len(run)) as ring:
                cmds, keys = [], []
                for i, mode in enumerate(run):
                    cmd, printed = self._command(mode, [*program, "--turns", ring.spec(i)],
                                                 outs[i], rep, s)
                    cmds.append((s.pinned(cmd), wheres[i]))
                    keys.append(printed)
                results = run_in_turns(ring, cmds, s.scratch, s.limit_s)
                for i, (mode, result) in enumerate(zip(run, results, strict=True)):
                    try:
                        if isinstance(result, BenchError):
                            raise result
                        values = self._take(mode, result, keys[i], outs[i], s, wheres[i])
                    except BenchError as err:
                        self.failed.setdefault(mode, first_line(err))
                        say(f"FAILED {err}")
                        continue
                    self._said(mode, values, rep, s, say)
        finally:
            for out in outs:
                shutil.rmtree(out, ignore_errors=True)

    def _said(self, mode: str, values: dict[str, float], rep: int, s: Settings,
              say: Say) -> None:
        """A run's figures kept, and its progress line."""
        for key, value in values.items():
            self.ms.setdefault(key, []).append(value)
        label = LABELS.get(mode, mode)
        self.runs[-1][label] = (values[mode], self.probes[mode][-1])
        chunks = self.chunks.get(label, [])[-s.chunks:]
        shown = ("; chunks, ms/probe µs: " + " ".join(f"{ms:.2f}/{probe:.2f}"
                                                      for ms, probe in chunks)
                 if s.chunks > 1 and chunks else "")
        say(f"rep {rep + 1}/{s.reps} {self.name:9} {mode:10} {values[mode]:.3f} "
            f"ms/forward{self.launcher}{shown}")

    @staticmethod
    def runs_cudump(cmd: list[str]) -> bool:
        """Whether a run's command line (held to CPUs by taskset or not) starts cudump: its
        first words are cudump's command (gpurun.cudump_command), decided by position, not
        by a word that contains "cudump" (a checkout's folder, hence a sample's path, may)."""
        if cmd[:2] == ["taskset", "-c"]:
            cmd = cmd[3:]
        head = cudump_command()
        return cmd[:len(head)] == head

    def _command(self, mode: str, program: list[str], out: Path, rep: int, s: Settings
                 ) -> tuple[list[str], list[str]]:
        """The command line of a mode's run, and the values it prints."""
        keys = ["iter_ms", "output_absmean", "host_probe_us"]
        if mode == "bare":
            cmd = [*program, "--anchor", *(["--profile"] if rep == 0 else [])]
            keys += ["anchor_ms", "anchor_nosync_ms", *(["launches_per_iter"] if rep == 0
                                                        else [])]
        elif mode == "cupti":
            assert s.cupti is not None
            cmd = ["env", f"LD_PRELOAD={s.cupti[1]}:{s.cupti[0]}", *program]
        else:
            scan = scanning_mode(mode)
            extra = [f"--{scan}"] if scan in ("check-nan", "digest") else []
            extra += [option for suffix, option in VARIANTS.items() if mode.endswith(suffix)]
            cmd = under_cudump(program, out, trace=mode == "trace", extra=extra)
        return cmd, keys

    def _take(self, mode: str, done: Done, keys: list[str], out: Path, s: Settings,
              where: str) -> dict[str, float]:
        """A finished run's figures, checked (a run that quietly did nothing measures
        nothing)."""
        min_launches = s.iters + s.warmup
        self.launcher = ""
        values = read_values(done.stdout, keys, where)
        chunks = list(zip(read_list(done.stdout, "chunk_ms", s.chunks, where),
                          read_list(done.stdout, "chunk_probe_us", s.chunks, where),
                          strict=True)) if s.chunks > 1 else []
        if mode == "cupti":
            counted = cupti_launches(done.stderr, where)
            if counted < min_launches:
                raise BenchError(f"{where}: the CUPTI subscriber counted {counted} launches")
            self.notes["cupti"] = f"the subscriber counted {counted} launches"
        elif mode != "bare":
            summary = cudump_summary(out, where, min_launches)
            self.notes[mode] = check_mode(mode, out, summary, where, min_launches)
            self.launcher = launcher_said(summary)
        self.outputs.add(values["output_absmean"])
        self.probes.setdefault(mode, []).append(values["host_probe_us"])
        label = LABELS.get(mode, mode)
        if chunks:   # only a run that did its work counts, as its other figures
            self.chunks.setdefault(label, []).extend(chunks)
        if s.turns:
            self.rounds[-1][label] = (list(chunks) if chunks
                                      else [(values["iter_ms"], values["host_probe_us"])])
        result = {mode: values["iter_ms"]}
        if mode == "bare":
            result["anchor"] = values["anchor_ms"]
            result["anchor-nosync"] = values["anchor_nosync_ms"]
            if "launches_per_iter" in values:
                self.notes["bare"] = f"{values['launches_per_iter']:.0f} kernel launches a forward"
        return result

    def _failure(self, mode: str) -> str:
        """Why a row comparing `mode` with the bare run lacks a figure (the anchors are timed
        by the bare run)."""
        if "bare" in self.failed:
            return f"bare: {self.failed['bare']}"
        return "" if mode.startswith("anchor") else self.failed.get(mode, "")

    def rows(self) -> tuple[list[Row], list[str]]:
        title = TITLES[self.name]
        bare = self.ms.get("bare", [])
        rows = []
        for mode in ("cudump", "trace", "check-nan", "digest", *ALONE_MODES, *OWN_MODES,
                     "cupti", "anchor", "anchor-nosync"):
            if mode in self.left_out:
                continue
            if (mode == "cupti" or mode in (*ALONE_MODES, *OWN_MODES)) \
                    and mode not in self.ms \
                    and mode not in self.failed:
                continue
            matched = (round_ratio(self.rounds, LABELS[mode]) if self.rounds
                       else level_ratio(self.chunks.get(LABELS[mode], []),
                                        self.chunks.get("bare", [])))
            rows.append(ratio_row(title, LABELS[mode], bare, self.ms.get(mode, []),
                                  GOALS.get(mode), self._failure(mode), matched))
        if "check-nan" not in self.left_out:
            rows.append(ratio_row(title,
                                  "cudump --check-nan vs the isnan hooks checked per module",
                                  self.ms.get("anchor", []), self.ms.get("check-nan", []),
                                  BELOW_ANCHOR, self._failure("check-nan")))
        same = ("yes" if len(self.outputs) == 1
                else f"NO: {sorted(self.outputs)}" if self.outputs else "-")
        notes = [f"{title}, {LABELS.get(mode, mode)}: {note}"
                 for mode, note in self.notes.items()]
        notes.append(f"{title}: the same output in every run: {same}")
        subscriber = next((row.ratio for row in rows if row.mode == LABELS["cupti"]), None)
        notes += noise_notes(title, bare, subscriber)
        notes += speed_notes(title, {LABELS.get(mode, mode): probes
                                     for mode, probes in self.probes.items()})
        notes += matched_notes(title, self.runs)
        notes += level_notes(title, self.chunks)
        notes += round_notes(title, self.rounds)
        return rows, notes


class Stopped(BaseException):
    """A signal ended the benchmark (SIGTERM: bench/run.sh's timeout): a BaseException, as
    sys.exit's is, so that nothing on the way takes it for a failed run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def stop_on(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def check_needs(workloads: tuple[str, ...]) -> None:
    """Fails at once, before any time is spent, where a workload cannot run."""
    for name in workloads:
        if name in NEEDS:
            for module in ("torch", NEEDS[name]):
                if importlib.util.find_spec(module) is None:
                    raise SystemExit(f"realworld.py: {name} needs {module}, which does not "
                                     "import here (or leave it out with --only)")
        elif not (BUILD / "big_buffer").is_file():
            raise SystemExit("realworld.py: samples/build/big_buffer is not built "
                             "(make -C samples)")


def check_cpus(cpus: str) -> None:
    """Fails at once where --cpus names CPUs this process may not run on."""
    try:
        done = subprocess.run(["taskset", "-c", cpus, "true"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SystemExit(f"realworld.py: --cpus: taskset did not run: {err}") from None
    if done.returncode != 0:
        raise SystemExit(f"realworld.py: --cpus {cpus}: {done.stderr.strip()[:300]}")


def cupti_files(scratch: Path) -> tuple[Path, Path] | None:
    """The subscriber and the libcupti it links, both preloaded by path: no LD_LIBRARY_PATH,
    which could hand the models the toolkit's libraries instead of their own."""
    built = build_cupti(scratch)
    if built is None:
        return None
    libs = sorted(built[1].glob("libcupti.so*"), key=lambda p: len(p.name))
    return (built[0], libs[0]) if libs else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition instead of 3")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, 1 with --quick)")
    parser.add_argument("--only", help=f"comma-separated workloads: {','.join(WORKLOADS)}")
    # Long enough for a steady state: over the first tens of forwards under --check-nan the
    # shim is still learning which launch follows which (scans ahead) and the GPU's queue
    # is filling.
    parser.add_argument("--iters", type=int, default=100, help="timed forwards (default 100)")
    parser.add_argument("--warmup", type=int, default=20, help="forwards before (default 20)")
    parser.add_argument("--limit", type=int, default=240,
                        help="seconds a single run may take (default 240)")
    parser.add_argument("--without-ahead", action="store_true",
                        help="also run --check-nan and --digest with --no-scans-ahead")
    parser.add_argument("--no-hand-off", action="store_true",
                        help="also run --check-nan and --digest with --no-hand-off")
    parser.add_argument("--modes", help="comma-separated modes of the models to run besides "
                        f"bare (default: all): {','.join(TORCH_MODES[1:])}")
    parser.add_argument("--cpus", default="",
                        help="run every model process, bare and under cudump (its controller "
                        "and threads too), on these CPUs only: taskset's list, such as 2-9 "
                        "(default: anywhere)")
    parser.add_argument("--chunks", type=int,
                        help="time each run's forwards in this many chunks, each after a CPU "
                        "probe, and judge the goals on the ratios of chunks that ran at "
                        f"bare's speed (default {DEFAULT_CHUNKS} where it divides --iters "
                        f"into chunks of {CHUNK_FORWARDS} forwards or more, else 1: one timing "
                        "a run)")
    parser.add_argument("--turns", action="store_true",
                        help="run a repetition's model processes all at once, taking turns: "
                        "each times a chunk of its forwards only while the others wait, round "
                        "by round (bench/turns.py), and each goal is judged on the ratios of "
                        "chunks to bare's chunk of the same round, in the rounds whose two "
                        "chunks ran on CPUs of one speed (probes within 10%%) where there are "
                        "at least 8")
    parser.add_argument("--dir", type=Path, help="where the snapshot runs write (default: "
                        "/dev/shm where it has room, else the temporary directory)")
    args = parser.parse_args(argv)
    try:
        workloads = parse_only(args.only) if args.only is not None else WORKLOADS
    except ValueError as err:
        parser.error(str(err))
    modes = tuple(m.strip() for m in (args.modes or "").split(",") if m.strip())
    if set(modes) - set(TORCH_MODES):
        parser.error(f"--modes: choose from {','.join(TORCH_MODES[1:])}")
    reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    if reps < 1 or args.iters < 1 or args.warmup < 0 or args.limit < 1:
        parser.error("--reps, --iters and --limit must be positive, --warmup not negative")
    if args.chunks is None:
        args.chunks = (DEFAULT_CHUNKS if args.iters % DEFAULT_CHUNKS == 0
                       and args.iters >= DEFAULT_CHUNKS * CHUNK_FORWARDS else 1)
    if args.chunks < 1 or args.iters % args.chunks:
        parser.error("--chunks must be positive and divide --iters")
    check_needs(workloads)
    if args.cpus:
        check_cpus(args.cpus)
    # Ended by a signal (bench/run.sh's timeout), it still kills the run in progress and
    # removes its directories.
    signal.signal(signal.SIGTERM, stop_on)
    device = device_name("realworld.py")
    start = time.monotonic()
    stopped = 0     # the exit status a signal asked for, once the table is out

    def say(text: str) -> None:
        print(f"[{time.monotonic() - start:6.1f} s] {text}", flush=True)

    torch_loads = {name: TorchWorkload(name) for name in workloads if name in NEEDS}
    snapshots = SnapshotWorkload() if "snapshots" in workloads else None
    with tempfile.TemporaryDirectory(prefix="cudump-realworld-") as tmp:
        scratch = Path(tmp)
        cupti = cupti_files(scratch) if torch_loads else None
        if torch_loads and cupti is None:
            say("note: no CUPTI subscriber could be built here: its rows are left out")
        base = snapshot_base(args.dir) if snapshots else scratch
        with tempfile.TemporaryDirectory(prefix="cudump-realworld-snap-", dir=base) as snap:
            s = Settings(reps, args.iters, args.warmup, args.limit, scratch, Path(snap), cupti,
                         alone=args.without_ahead, own_thread=args.no_hand_off, modes=modes,
                         cpus=args.cpus, chunks=args.chunks, turns=args.turns)
            if snapshots:
                say(f"snapshot runs write to {base}")
            rep = 0
            current: TorchWorkload | SnapshotWorkload | None = None
            try:
                for rep in range(reps):
                    # Interleaved: drift of the machine falls on every mode alike.
                    for current in [*torch_loads.values(), *([snapshots] if snapshots else [])]:
                        kept = copy.deepcopy(current.__dict__)
                        current.rep(rep, s, say)
                    current = None
            except Stopped as stop:
                # The run in progress is killed and its directories go. The workload it
                # belonged to goes back to what it had before this repetition, so that each
                # workload's medians are over the same repetitions for every mode; the
                # repetitions made before still make the table.
                if current is not None:
                    current.__dict__.update(kept)
                stopped = 128 + stop.signum
                say(f"stopped by a signal during repetition {rep + 1}: the table has the runs "
                    "made before it")
    rows: list[Row] = []
    notes: list[str] = []
    for load in [*torch_loads.values(), *([snapshots] if snapshots else [])]:
        more, more_notes = load.rows()
        rows += more
        notes += more_notes
    if torch_loads and cupti is None:
        notes.append("CUPTI subscriber: not built here (no CUPTI in the toolkit): its rows are "
                     "left out")
    print()
    print(f"device: {device}")
    if stopped:
        print(f"real workloads, medians of the runs made before a signal stopped repetition "
              f"{rep + 1} of {reps}.")
    else:
        print(f"real workloads, median of {reps} interleaved repetitions.")
    if torch_loads:
        print(f"Models: ms per forward, {args.iters} timed after {args.warmup} of warm-up; a "
              "row marked (no cudump) has the other tool's time in the cudump column"
              + (f"; every model process held to CPUs {args.cpus}." if args.cpus else "."))
    if snapshots:
        print(f"Snapshots: ms per launch, launches 2..{SNAP_LAUNCHES} of {SNAP_LAUNCHES} over "
              f"{SNAP_MIB} MiB; held = cudump - bare per launch, against two pinned D2H copies "
              f"timed in the same process; end to end = first launch to last file on disk, "
              f"against the time {2 * SNAP_LAUNCHES}x{SNAP_MIB} MiB take at the lesser of the "
              "pinned D2H and file write rates (those in the bare column).")
    print()
    print(markdown(rows))
    print()
    for note in notes:
        print(f"- {note}")
    failed = [row for row in rows if row.failed]
    for row in failed:
        print(f"FAILED: {row.workload} / {row.mode}: {row.failed}")
    print(f"took {time.monotonic() - start:.0f} s")
    if stopped:
        return stopped
    return 1 if failed or any("NO:" in note for note in notes) else 0


if __name__ == "__main__":
    sys.exit(main())
