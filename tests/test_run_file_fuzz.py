"""Every reader of a run directory's files against damaged files, generated from a seed.

For each file a run writes (manifest.jsonl, digests.bin and its batch lines, captures.jsonl,
flight.jsonl, trace.jsonl, summary.json and its injections), good records are damaged the
ways a disk, an editor or a hostile hand damages them: a value of another type, a field
missing, numbers of 2^63 and beyond or of 5,000 digits, nesting 100,000 deep, bytes that are
not UTF-8, lines cut short, binary records with bytes changed. The reader must read the file
or refuse it with one line naming the file: never a traceback, never another exception.

Each variant is made by random.Random(f"{SEED}:{family}:{number}"), so a failure names the
seed, family and number that reproduce it alone (CUDUMP_FUZZ_SEED picks another seed,
CUDUMP_FUZZ_SCALE=10 makes ten times as many variants).

Files that are not regular files (a FIFO, a device) where a run file should be are in
test_special_files_never_block: each command runs in a child process with a generous bound.
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cudump.cli import main
from cudump.errors import CudumpError
from cudump.rundir.digest_batches import DIGEST, HAS_SUM, LAUNCH, DigestBatch
from cudump.rundir.layout import (
    CAPTURES_FILE,
    DIGESTS_FILE,
    FLIGHT_FILE,
    MANIFEST_FILE,
    SUMMARY_FILE,
    TRACE_FILE,
)

ROOT = Path(__file__).resolve().parent.parent
SEED = int(os.environ.get("CUDUMP_FUZZ_SEED", "20261207"))
SCALE = float(os.environ.get("CUDUMP_FUZZ_SCALE", "1"))    # more variants, for a long campaign
KERNEL = "void k(float*, int)"

# A value of any type and size where a record's value was.
HOSTILE: list[Any] = [
    None, True, False, 0, -1, 7, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, 2**64 + 1, -2**63,
    -2**63 - 1, 10**30, -10**30, 1.5, -0.0, 1e308, -1e308, "", "x", "0x", "0xzz", "\u0000",
    "\x1b[2J", "x" * 5000, "../" * 8 + "etc/passwd", "/dev/zero", "modules/" + "m" * 300,
    [], [0], [1, 2], [1, 2, 3], [2**63, 1, 1], [-1, -1, -1], [2**64, 2**64, 2**64],
    ["a", "b", "c"], [None], [[1]], {}, {"a": 1}, {"": None}, [[[[]]]],
]
# Raw text put where a value was: what json.dumps cannot write.
RAW = ["[" * 100_000 + "]" * 100_000, "9" * 5000, "-" + "9" * 5000, "1e99999", "NaN",
       "Infinity", '{"a":' * 2000 + "1" + "}" * 2000, "1" + "0" * 400 + ".5"]
RAW_MARK = "\u0001raw{}\u0001"


# ---------------------------------------------------------------------------------------
# Damage


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value (keys and list positions, nested)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths(item, (*prefix, i))
    return found


def _damage_value(rng: random.Random, data: Any) -> tuple[Any, dict[str, str]]:
    """`data` with one place given another value, removed, or given raw text."""
    data = json.loads(json.dumps(data))
    raws: dict[str, str] = {}
    places = _paths(data)
    if not places:
        return rng.choice(HOSTILE), raws
    place = rng.choice(places)
    parent = data
    for key in place[:-1]:
        parent = parent[key]
    last = place[-1]
    how = rng.random()
    if how < 0.15 and isinstance(parent, dict):
        del parent[last]
    elif how < 0.3:
        mark = RAW_MARK.format(len(raws))
        raws[json.dumps(mark)] = rng.choice(RAW)
        parent[last] = mark
    else:
        parent[last] = rng.choice(HOSTILE)
    return data, raws


def _text(data: Any, raws: dict[str, str]) -> bytes:
    text = json.dumps(data)
    for mark, raw in raws.items():
        text = text.replace(mark, raw)
    return text.encode()


def _damage_bytes(rng: random.Random, line: bytes) -> bytes:
    """A line with bytes that are not UTF-8, cut, or with bytes changed."""
    how = rng.randrange(5)
    at = rng.randrange(len(line) + 1)
    if how == 0:
        return line[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]) + line[at:]
    if how == 1:
        return line[:at]
    if how == 2:
        return bytes(rng.randrange(256) if rng.random() < 0.05 else b for b in line)
    if how == 3:
        return rng.randbytes(rng.randrange(1, 60)).replace(b"\n", b" ")
    return rng.choice([b"{}", b"[]", b"null", b"42", b'"x"', b"{", b"\x00" * 8, b"true"])


def damaged_lines(rng: random.Random, records: list[Any]) -> bytes:
    """The records as JSON lines, one to three of them damaged; sometimes no newline at the
    end, a blank line, or a line repeated."""
    lines = [json.dumps(r).encode() for r in records]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        i = rng.randrange(len(lines))
        if rng.random() < 0.75:
            data, raws = _damage_value(rng, records[i])
            lines[i] = _text(data, raws)
        else:
            lines[i] = _damage_bytes(rng, lines[i])
    if rng.random() < 0.1:
        lines.insert(rng.randrange(len(lines) + 1), b"")
    if rng.random() < 0.1:
        lines.append(lines[rng.randrange(len(lines))])
    end = b"" if rng.random() < 0.15 else b"\n"
    return b"\n".join(lines) + end


# ---------------------------------------------------------------------------------------
# Good records of each file


def manifest_record(launch: int = 1, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "kernel": KERNEL, "mangled": "_Z1kPfi", "launch": launch, "occurrence": launch,
        "pid": 9, "grid": [1, 1, 1], "block": [32, 1, 1], "stream": "0x0", "arg": 0,
        "type": "float*", "phase": "after", "address": "0x1000", "dtype": "float32",
        "shape": [4], "file": "s0.npy", "png": None, "status": "ok", "reason": None,
        "range": None, "device": 0}
    data.update(changes)
    return data


def digest_record(arg: int) -> dict[str, Any]:
    return manifest_record(arg=arg, file=None, digest="0" * 16, bytes=16, row_bytes=16, rows=1,
                           sum_of="float32", abs_sum=0.0)


def template() -> dict[str, Any]:
    records = []
    for arg in (0, 1):
        record = digest_record(arg)
        for name in ("launch", "occurrence", "grid", "block", "stream", "device", "digest",
                     "abs_sum"):
            record.pop(name)
        records.append(record)
    return {"digest_template": "9.4", "records": records}


def digest_batch() -> DigestBatch:
    launches = np.zeros(2, LAUNCH)
    launches[0] = (5, 0x7f00, 2, 9, 4, 0, (2, 1, 1), (32, 1, 1))
    launches[1] = (6, 0x7f00, 3, 9, 4, -1, (2, 1, 1), (32, 1, 1))
    digests = np.zeros(4, DIGEST)
    for i in range(4):
        digests[i] = (0xa + i, 1.5, i // 2, i % 2, HAS_SUM)
    return DigestBatch(launches, digests)


def capture_record(launch: int = 1) -> dict[str, Any]:
    alloc = {"base": 0x7f0000, "size": 64, "kind": "linear", "pitch": 0, "width": 0,
             "height": 0, "elem": 0}
    return {
        "pid": 9, "launch": launch, "occurrence": launch, "kernel": KERNEL, "mangled": "_Z1kPfi",
        "grid": [1, 1, 1], "block": [32, 1, 1], "smem": 0, "api": "cuLaunchKernel",
        "device": 0, "stream": "0x0", "image": "modules/abc.cubin", "image_format": "cubin",
        "params": "00007f0000000000" + "10000000", "layout": [[0, 8], [8, 4]],
        "pointers": [{"arg": 0, "offset": 0, "value": 0x7f0000, "alloc": alloc}],
        "buffers": [{"arg": 0, "offset": 0, "address": 0x7f0000, "width": 64, "height": 1,
                     "pitch": 64, "dtype": "float32", "shape": [16], "before": "b.npy",
                     "after": "a.npy"}],
        "problems": []}


def flight_records() -> list[dict[str, Any]]:
    process = {"record": "process", "pid": 9, "slots": 8, "recorded": 12, "kept": 2,
               "first_error": 700, "error": "CUDA_ERROR_ILLEGAL_ADDRESS",
               "ended": "failed with CUDA_ERROR_ILLEGAL_ADDRESS"}

    def launch(n: int, status: str) -> dict[str, Any]:
        return {"record": "launch", "pid": 9, "launch": n, "kernel": KERNEL, "status": status,
                "stream": "0x10", "thread": 7, "api": "cuLaunchKernel", "grid": [1, 1, 1],
                "block": [32, 1, 1], "smem": 0, "mangled": "_Z1kPfi", "graph": None, "rc": 0,
                "error": None, "params": "0000adde00000000", "params_size": 12,
                "args": [{"index": 0, "type": "float*", "value": "0xdead0000",
                          "address": 0xdead0000, "allocation": "outside every allocation"},
                         {"index": 1, "type": "int", "value": "16", "address": None,
                          "allocation": None}],
                "culprit": status == "in flight"}

    return [process, launch(11, "completed"), launch(12, "in flight")]


def trace_records() -> list[dict[str, Any]]:
    return [
        {"event": "launch", "launch": 1, "pid": 9, "device": 0, "kernel": KERNEL,
         "mangled": "_Z1kPfi", "grid": [2, 1, 1], "block": [32, 1, 1], "smem": 0,
         "stream": "0x0", "api": "cuLaunchKernel"},
        {"event": "graph-launch", "launch": 2, "pid": 9, "device": 0, "graph": "0x5",
         "stream": "0x0", "api": "cuGraphLaunch"},
        {"event": "graph-kernel", "launch": 2, "pid": 9, "device": 0, "kernel": KERNEL,
         "mangled": "_Z1kPfi", "grid": [2, 1, 1], "block": [32, 1, 1], "graph": 1, "node": 0},
        {"event": "launch", "launch": 3, "pid": 9, "device": 0, "kernel": KERNEL,
         "mangled": "_Z1kPfi", "grid": [4, 1, 1], "block": [64, 1, 1], "captured": True}]


def summary() -> dict[str, Any]:
    injection = {"source": "runA", "launch": 3, "kernel": KERNEL, "occurrence": 1,
                 "source_pid": 9, "status": "written", "source_rank": None, "pid": 10,
                 "live_kernel": KERNEL, "live_occurrence": 1, "buffers": 1, "bytes": 64,
                 "reason": None,
                 "outputs": [{"arg": 0, "offset": 0, "status": "differs", "elements": 16,
                              "differing": 2, "max_abs": 0.5, "file": "s0.npy",
                              "reason": None}]}
    return {"processes": 1, "pids": [9], "launches": 3, "kernels": {KERNEL: 3},
            "graph_kernels": {KERNEL: 1}, "allocations": 2, "peak_bytes": 4096,
            "injections": [injection], "exit_status": 0}


# ---------------------------------------------------------------------------------------
# The readers, and what each must do


class Outcome:
    """What the variants of one family did."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.variants = 0
        self.failures: list[str] = []

    def fail(self, number: int, what: str) -> None:
        self.failures.append(f"{self.family} #{number} (seed {SEED}): {what[:300]}")


def call_reader(out: Outcome, number: int, read: Callable[[], object], names: str) -> None:
    """A reader called directly: it returns, or raises a CudumpError of one line naming one
    of the files (`names`, separated by |)."""
    try:
        read()
    except CudumpError as err:
        text = str(err)
        if "\n" in text or not any(name in text for name in names.split("|")):
            out.fail(number, f"not one line naming {names}: {text!r}")
    except Exception as err:  # noqa: BLE001 - what the campaign is looking for
        out.fail(number, f"{type(err).__name__}: {str(err)[:200]}")


def call_cli(out: Outcome, number: int, argv: list[str], capsys, names: str) -> None:
    """A command: exit status 0 or 1 with nothing on stderr, or 2 with one line naming one
    of the files."""
    code = main(argv)
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    if code in (0, 1) and not err:
        return
    if code != 2 or len(lines) != 1 or not lines[0].startswith("cudump: error: "):
        out.fail(number, f"{' '.join(argv[:1])} exit {code}: {err[:300]!r}")
    elif not any(name in err for name in names.split("|")):
        out.fail(number, f"{' '.join(argv[:1])}: error names no file: {err[:300]!r}")


def put(path: Path, data: bytes) -> None:
    """The file's new bytes, under a new name renamed over it (truncating a file in place
    costs twice as much, and the campaign writes thousands)."""
    part = path.with_name(path.name + ".new")
    part.write_bytes(data)
    os.replace(part, path)


def fresh(run: Path) -> Path:
    run.mkdir(exist_ok=True)
    for child in run.iterdir():
        if child.is_file() or child.is_symlink():
            child.unlink()
    np.save(run / "s0.npy", np.zeros(4, np.float32))
    return run


def fuzz_manifest(rng: random.Random, run: Path, out: Outcome, n: int, capsys) -> None:
    records = [manifest_record(1), manifest_record(2), digest_record(0) | {"launch": 3}]
    put(run / MANIFEST_FILE, damaged_lines(rng, records))
    call_cli(out, n, ["ls", str(run)], capsys, MANIFEST_FILE)
    # `show` may also refuse the snapshot asked for: it names the snapshot or its file
    # (a record damaged into naming another), or says none matches (a record damaged into
    # another launch's).
    call_cli(out, n, ["show", str(run), "--index", str(rng.randrange(3))], capsys,
             f"{MANIFEST_FILE}|{run}/|snapshot #|no snapshot matches|has snapshots #")


def fuzz_watch(rng: random.Random, run: Path, out: Outcome, n: int, capsys) -> None:
    from cudump.rundir.watch import RunWatch

    records = [manifest_record(1), manifest_record(2), json.loads(digest_batch().line(0))]
    # Compact, as the manifest is written: the watch looks for `"launch":N`.
    put(run / MANIFEST_FILE, damaged_lines(rng, records).replace(b'": ', b'":'))
    call_reader(out, n, lambda: RunWatch(run).poll(), MANIFEST_FILE)


def fuzz_digests(rng: random.Random, run: Path, out: Outcome, n: int, capsys) -> None:
    batch = digest_batch()
    data = bytearray(batch.to_bytes())
    line = json.loads(batch.line(0))
    head = [manifest_record(1), template()]
    how = rng.randrange(4)
    if how == 0:                       # the batch line
        data_line, raws = _damage_value(rng, line)
        lines = [json.dumps(r).encode() for r in head] + [_text(data_line, raws)]
    elif how == 1:                     # the template it uses
        data_t, raws = _damage_value(rng, head[1])
        lines = [json.dumps(head[0]).encode(), _text(data_t, raws), json.dumps(line).encode()]
    else:                              # the binary records
        lines = [json.dumps(r).encode() for r in (*head, line)]
        if how == 2:
            for _ in range(rng.randrange(1, 6)):
                at = rng.randrange(len(data))
                data[at] = rng.choice([0, 0xff, 0x7f, 0x80, rng.randrange(256)])
        else:
            records = np.frombuffer(bytes(data), dtype=np.uint8).copy()
            launches = records[:2 * LAUNCH.itemsize].view(LAUNCH)
            digests = records[2 * LAUNCH.itemsize:].view(DIGEST)
            table, name = rng.choice([(launches, n) for n in LAUNCH.names]
                                     + [(digests, n) for n in DIGEST.names])
            info = np.iinfo(table.dtype[name].base) if table.dtype[name].base.kind in "iu" \
                else None
            value = (rng.choice([info.min, info.max, 0, 1, 3]) if info is not None
                     else rng.choice([np.nan, np.inf, -1.0, 1e308]))
            table[name][rng.randrange(len(table))] = value
            data = bytearray(records.tobytes())
        if rng.random() < 0.2:
            data = data[:rng.randrange(len(data))]
    put(run / MANIFEST_FILE, b"\n".join(lines) + b"\n")
    put(run / DIGESTS_FILE, bytes(data))
    call_cli(out, n, ["ls", str(run)], capsys, MANIFEST_FILE + "|" + DIGESTS_FILE)


def fuzz_captures(rng: random.Random, run: Path, out: Outcome, n: int, capsys) -> None:
    from cudump.analysis.replay import read_captures

    put(run / CAPTURES_FILE, damaged_lines(rng, [capture_record(1),
                                                          capture_record(2)]))

    def read() -> None:
        for capture in read_captures(run):
            capture.describe()
            capture.where  # noqa: B018 - read as `replay` reads it

    call_reader(out, n, read, CAPTURES_FILE)


def fuzz_flight(rng: random.Random, run: Path, out: Outcome, n: int, capsys) -> None:
    put(run / FLIGHT_FILE, damaged_lines(rng, flight_records()))
    call_cli(out, n, ["show", str(run), "--flight"], capsys, FLIGHT_FILE)


def fuzz_trace(rng: random.Random, run: Path, out: Outcome, n: int, capsys) -> None:
    put(run / TRACE_FILE, damaged_lines(rng, trace_records()))
    call_cli(out, n, ["stats", str(run)], capsys, TRACE_FILE)


def fuzz_summary(rng: random.Random, run: Path, out: Outcome, n: int, capsys) -> None:
    from cudump.rundir.summary import read_injections

    data, raws = _damage_value(rng, summary())
    text = _text(data, raws)
    if rng.random() < 0.2:
        text = _damage_bytes(rng, text)
    put(run / SUMMARY_FILE, text)
    call_cli(out, n, ["stats", str(run)], capsys, SUMMARY_FILE)
    call_reader(out, n, lambda: read_injections(run), SUMMARY_FILE)


FAMILIES: dict[str, tuple[Callable[..., None], int]] = {   # name -> (fuzz, variants)
    "manifest.jsonl": (fuzz_manifest, 600),
    "digests.bin": (fuzz_digests, 1200),
    "captures.jsonl": (fuzz_captures, 1200),
    "flight.jsonl": (fuzz_flight, 800),
    "trace.jsonl": (fuzz_trace, 800),
    "summary.json": (fuzz_summary, 800),
    "manifest.jsonl as it grows": (fuzz_watch, 800),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_damaged_run_files_give_a_read_or_one_line(family: str, tmp_path: Path, capsys) -> None:
    fuzz, variants = FAMILIES[family]
    out = Outcome(family)
    run = fresh(tmp_path / "run")
    started = time.monotonic()
    for number in range(int(variants * SCALE)):
        rng = random.Random(f"{SEED}:{family}:{number}")
        fuzz(rng, run, out, number, capsys)
        out.variants += 1
    took = time.monotonic() - started
    print(f"{family}: {out.variants} variants in {took:.1f} s, {len(out.failures)} failed")
    assert not out.failures, "\n".join(out.failures[:10])


# ---------------------------------------------------------------------------------------
# Not regular files where run files should be


def _special_run(run: Path, name: str, kind: str) -> Path:
    """A run directory whose `name` is a FIFO or a device, with the files that make the
    commands read it."""
    fresh(run)
    lines = [manifest_record(1)]
    if name == DIGESTS_FILE:
        lines += [template(), json.loads(digest_batch().line(0))]
    if name == "s0.npy":
        (run / name).unlink()
    (run / MANIFEST_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines))
    if name == "modules/abc.cubin":
        (run / "modules").mkdir()
        (run / CAPTURES_FILE).write_text(json.dumps(capture_record()) + "\n")
    elif name == CAPTURES_FILE:
        pass
    target = run / name
    if target.exists():
        target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
        return run
    try:        # a device node of its own, inside the run directory, where one may be made
        os.mknod(target, 0o644 | stat.S_IFCHR, os.makedev(1, 5))     # as /dev/zero
    except OSError:
        target.symlink_to("/dev/zero")
    return run


SPECIAL = [(MANIFEST_FILE, ["ls"]), (DIGESTS_FILE, ["ls"]), (TRACE_FILE, ["stats"]),
           (SUMMARY_FILE, ["stats"]), (FLIGHT_FILE, ["show", "--flight"]),
           ("s0.npy", ["show", "--index", "0"]), (CAPTURES_FILE, ["replay"]),
           ("modules/abc.cubin", ["replay"]), (MANIFEST_FILE, ["watch"])]

# Run in one child process, case after case: each has SIGALRM after a generous bound (a
# reader that blocks on a FIFO is interrupted and said to have blocked) and the child's
# memory is capped (a reader that reads /dev/zero to its end fails, not the machine).
CHILD = """
import contextlib, io, json, resource, signal, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from cudump.cli import main
from cudump.errors import CudumpError
from cudump.analysis.replay import read_captures, read_image
from cudump.rundir.watch import RunWatch

class Blocked(Exception):
    pass

def alarm(*_):
    raise Blocked()

signal.signal(signal.SIGALRM, alarm)
for case in json.loads(sys.argv[1]):
    run, argv = Path(case["run"]), case["argv"]
    err = io.StringIO()
    signal.alarm(60)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if argv == ["watch"]:           # bisect's look at a run as it grows
                RunWatch(run).poll()
                code = 0
            elif argv == ["replay"]:
                try:
                    for capture in read_captures(run):
                        read_image(run, capture, None)
                    code = 0
                except CudumpError as e:
                    print(f"cudump: error: {e}", file=sys.stderr)
                    code = 2
            else:
                code = main([argv[0], str(run), *argv[1:]])
    except Blocked:
        code = "blocked"
    except BaseException as e:
        code = f"{type(e).__name__}: {e}"
    signal.alarm(0)
    print(json.dumps({"case": case["name"], "code": code, "err": err.getvalue()}), flush=True)
"""


def test_special_files_never_block(tmp_path: Path) -> None:
    """A FIFO or a device (/dev/zero) where each run file should be: one line saying so, or
    the file left out; never a wait for a writer, never a read without end."""
    cases = []
    for kind in ("fifo", "device"):
        for i, (name, argv) in enumerate(SPECIAL):
            run = _special_run(tmp_path / f"{kind}{i}", name, kind)
            cases.append({"name": f"{name} as a {kind}", "run": str(run), "argv": argv})
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases)],
                          capture_output=True, text=True, env=env, timeout=600,
                          stdin=subprocess.DEVNULL)
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == len(cases), done.stderr[-2000:]
    bad = []
    for result in results:
        code, err = result["code"], result["err"]
        lines = err.strip().splitlines()
        if code in (0, 1) and not err:
            continue
        name = result["case"].split()[0].rsplit("/", 1)[-1]
        if code != 2 or len(lines) != 1 or not lines[0].startswith("cudump: error: ") or \
                name not in err:
            bad.append(f"{result['case']}: {code}: {err.strip()[:200]}")
        print(f"{result['case']}: {code}: {err.strip()}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------------------
# Cases by name: the message each gives


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize("line,problem", [
    (b'{"pid": 9, "kernel": "\xff"}', "not UTF-8 text"),
    (DEEP, "not valid JSON (nested too deeply)"),
    (b'{"pid": ' + b"9" * 5000 + b"}", "not valid JSON"),
    (json.dumps(capture_record(2) | {"launch": 2**63}).encode(),
     "not a captured launch: field 'launch': expected a whole number from 0 to 2^63-1, got "
     "9223372036854775808"),
    (json.dumps(capture_record(2) | {"grid": [2**32, 1, 1]}).encode(),
     "not a captured launch: field 'grid': expected a list of 3 whole numbers from 0 to "
     "2^32-1, got [4294967296, 1, 1]"),
    (json.dumps(capture_record(2) | {"device": [0]}).encode(),
     "not a captured launch: field 'device': expected a whole number, got [0]"),
], ids=["utf8", "deep", "digits", "2^63", "grid", "device"])
def test_a_bad_capture_line_names_the_file_line_and_field(tmp_path: Path, line: bytes,
                                                          problem: str) -> None:
    from cudump.analysis.replay import read_captures

    run = fresh(tmp_path / "run")
    put(run / CAPTURES_FILE, json.dumps(capture_record(1)).encode() + b"\n" + line + b"\n")
    with pytest.raises(CudumpError) as info:
        read_captures(run)
    assert str(info.value) == f"{run / CAPTURES_FILE}:2: {problem}"


def test_a_capture_line_cut_short_at_the_end_is_skipped(tmp_path: Path) -> None:
    from cudump.analysis.replay import read_captures

    run = fresh(tmp_path / "run")
    whole = json.dumps(capture_record(1)).encode() + b"\n"
    put(run / CAPTURES_FILE, whole + json.dumps(capture_record(2)).encode()[:50])
    assert [c.launch for c in read_captures(run)] == [1]


def flight_with(change: Callable[[list[dict[str, Any]]], None]) -> bytes:
    records = flight_records()
    change(records)
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def test_a_flight_argument_without_a_type_reads_as_one_of_unknown_type(tmp_path: Path,
                                                                        capsys) -> None:
    run = fresh(tmp_path / "run")

    def untyped(records: list[dict[str, Any]]) -> None:
        records[2]["args"][0]["type"] = None
        del records[2]["args"][1]["type"]

    put(run / FLIGHT_FILE, flight_with(untyped))
    assert main(["show", str(run), "--flight"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "arg0   = 0xdead0000  -> outside every allocation" in out


@pytest.mark.parametrize("line,field,problem", [
    (2, ("args", 0, "index"), "not argument 0: field 'index': expected a whole number from 0 "
                              "to 2^63-1, got 9223372036854775808"),
    (2, ("params_size",), "not a recorded launch: field 'params_size': expected a whole "
                          "number from 0 to 2^63-1, got 9223372036854775808"),
    (1, ("kept",), "not a process record: field 'kept': expected a whole number from 0 to "
                   "2^63-1, got 9223372036854775808"),
])
def test_flight_numbers_of_2_to_the_63_are_named(tmp_path: Path, capsys, line: int,
                                                 field: tuple[Any, ...], problem: str) -> None:
    run = fresh(tmp_path / "run")

    def huge(records: list[dict[str, Any]]) -> None:
        target = records[line - 1]
        for key in field[:-1]:
            target = target[key]
        target[field[-1]] = 2**63

    put(run / FLIGHT_FILE, flight_with(huge))
    assert main(["show", str(run), "--flight"]) == 2
    assert capsys.readouterr().err == f"cudump: error: {run / FLIGHT_FILE}:{line}: {problem}\n"


@pytest.mark.parametrize("raw,problem", [
    (b"\xff\n", "not UTF-8 text"), (DEEP + b"\n", "not valid JSON (nested too deeply)"),
    (b"9" * 5000 + b"\n", "not valid JSON")], ids=["utf8", "deep", "digits"])
def test_a_flight_line_that_is_not_json(tmp_path: Path, capsys, raw: bytes,
                                        problem: str) -> None:
    run = fresh(tmp_path / "run")
    put(run / FLIGHT_FILE, flight_with(lambda _: None) + raw)
    assert main(["show", str(run), "--flight"]) == 2
    assert capsys.readouterr().err == f"cudump: error: {run / FLIGHT_FILE}:4: {problem}\n"


def test_a_snapshot_name_of_5000_characters_is_one_line(tmp_path: Path, capsys) -> None:
    run = fresh(tmp_path / "run")
    (run / MANIFEST_FILE).write_text(json.dumps(manifest_record(1, file="a" * 5000)) + "\n")
    assert main(["show", str(run), "--index", "0"]) == 2
    err = capsys.readouterr().err
    assert err == ("cudump: error: snapshot #0 cannot be read: file '" + "a" * 59
                   + "...(5000 characters) cannot be used: its name is too long\n")
    assert main(["ls", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 of 1 record: 1 snapshot, 1 unreadable"


def test_a_batch_line_at_2_to_the_63_is_named(tmp_path: Path, capsys) -> None:
    run = fresh(tmp_path / "run")
    batch = digest_batch()
    line = json.loads(batch.line(0)) | {"offset": 2**63}
    (run / MANIFEST_FILE).write_text("".join(json.dumps(x) + "\n" for x in (
        manifest_record(1), template(), line)))
    put(run / DIGESTS_FILE, batch.to_bytes())
    assert main(["ls", str(run)]) == 2
    assert capsys.readouterr().err == (f"cudump: error: {run / MANIFEST_FILE}:3: field "
                                       "'offset' should be a whole number below 2^63\n")


def test_summary_counts_and_injections_of_2_to_the_63_are_named(tmp_path: Path,
                                                                capsys) -> None:
    from cudump.rundir.summary import read_injections

    run = fresh(tmp_path / "run")
    data = summary()
    data["injections"][0]["bytes"] = 2**64
    (run / SUMMARY_FILE).write_text(json.dumps(data))
    with pytest.raises(CudumpError) as info:
        read_injections(run)
    assert str(info.value) == (f"{run / SUMMARY_FILE}: injections[0]: injection: field "
                               "'bytes': expected a whole number from 0 to 2^63-1, got "
                               "18446744073709551616")
    data["kernels"][KERNEL] = 2**63
    (run / SUMMARY_FILE).write_text(json.dumps(data))
    assert main(["stats", str(run)]) == 2
    assert capsys.readouterr().err == (
        f"cudump: error: {run / SUMMARY_FILE}: field 'kernels' should map kernel names to "
        "launch counts (whole numbers from 0 to 2^63-1)\n")


@pytest.mark.parametrize("argv", [["ls"], ["show"], ["stats"], ["show", "--flight"],
                                  ["show", "--index", "0"]])
def test_a_run_named_by_5000_characters_is_one_line(capsys, argv: list[str]) -> None:
    name = "a" * 5000
    assert main([argv[0], name, *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cudump: error: ") and err.count("\n") == 1, err
    assert "(5000 characters)" in err or "(5013 characters)" in err


def test_the_watch_of_a_growing_manifest_takes_no_launch_of_5000_digits(tmp_path: Path) -> None:
    from cudump.rundir.watch import RunWatch

    run = fresh(tmp_path / "run")
    put(run / MANIFEST_FILE, b'{"launch":7}\n{"launch":' + b"9" * 5000 + b"}\n")
    progress = RunWatch(run).poll()
    assert (progress.lines, progress.launch) == (2, 7)
