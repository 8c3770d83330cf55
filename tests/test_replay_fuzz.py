"""Property-based tests of the replay engine's reading of an extract folder (launch.json, the
module image, the buffers' .npy files), which people send to each other and so cannot trust.

Whatever the folder holds, the engine either has a launch ready for the driver or says why not
in one line (ReplayError, exit status 2): never another exception, never a read of a file
outside the folder, never a wait on a FIFO. All of it happens before the driver is loaded, so
the bulk runs in this process (LaunchSpec.parse, prepare), and a few folders go through the
shipped script as a subprocess, without a driver. Seeded (derandomize): a failure repeats.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cudump.analysis import replay_engine as engine
from cudump.analysis.replay_engine import LaunchSpec, ReplayError, SpecError, prepare
from cudump.analysis.replay_engine import replay_spec as spec_module

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "cudump" / "analysis" / "replay_engine"

# No example database (nothing written into the checkout); the same examples every run.
FUZZ = settings(max_examples=300, deadline=timedelta(seconds=5), database=None,
                derandomize=True, suppress_health_check=[HealthCheck.too_slow])
FOLDERS = settings(FUZZ, max_examples=120)
HANG = 20   # seconds an example may take before it counts as a hang


# ---------------------------------------------------------------- a valid launch to start from

A = np.arange(64, dtype=np.float32)
C = np.linspace(0, 1, 3 * 16, dtype=np.float64).reshape(3, 16)


def base_spec() -> dict[str, Any]:
    """A launch with a linear and a pitched region, three pointers and two buffers."""
    return {
        "format": "cudump-launch/1", "kernel": "k(float*, float*, double*, int)",
        "mangled": "_Z1kPfS_Pdi", "image": "module.fatbin", "image_format": "fatbin",
        "grid": [2, 1, 1], "block": [32, 1, 1], "smem": 0,
        "params": (bytes(24) + (64).to_bytes(4, "little")).hex(),
        "layout": [[0, 8], [8, 8], [16, 8], [24, 4]],
        "regions": [{"size": 512, "kind": "linear", "pitch": 0, "width": 0, "height": 0,
                     "elem": 0},
                    {"size": 512, "kind": "pitched", "pitch": 160, "width": 128, "height": 3,
                     "elem": 8}],
        "pointers": [{"arg": 0, "offset": 0, "region": 0, "delta": 0},
                     {"arg": 1, "offset": 0, "region": 0, "delta": 256},
                     {"arg": 2, "offset": 0, "region": 1, "delta": 0}],
        "buffers": [{"arg": 0, "offset": 0, "region": 0, "delta": 0, "width": 256,
                     "height": 1, "pitch": 256, "dtype": "float32", "shape": [64],
                     "before": "buffers/a-before.npy", "after": "buffers/a-after.npy"},
                    {"arg": 2, "offset": 0, "region": 1, "delta": 0, "width": 128,
                     "height": 3, "pitch": 160, "dtype": "float64", "shape": [3, 16],
                     "before": "buffers/c-before.npy", "after": None}],
    }


# Names a hostile launch.json may give; the folder builder makes each of them something.
NAMES = ["module.fatbin", "buffers/a-before.npy", "buffers/a-after.npy", "buffers/c-before.npy",
         "fifo", "device", "dir", "up", "abs", "zero", "loop", "inner", "big.npy", "short.npy",
         "objects.npy", "fortran.npy", "nope", "../outside/secret.npy", "/etc/passwd",
         "/dev/zero", "buffers/../../outside/secret.npy", "a" * 300, "x/" * 2100, "a\0b",
         "\udc80", "", ".", "buffers", "./module.fatbin", "buffers//a-before.npy"]
INTS = [-1, 0, 1, 3, 8, 1024, 1025, 65535, 65536, 2**31 - 1, 2**31, 2**32, 2**48, 2**48 + 1,
        2**63, 2**64, 2**70, 10**30]
DTYPES = ["float32", "<f4", ">f8", "bool", "uint8", "complex64", "float33", "O", "V8", "U4",
          "(2,)f4", "f4,i4", "M8", "S0", "[('a','<f4')]", "(100000000000,)f4", "float32\0"]
KEYS = list(base_spec()) + ["size", "kind", "pitch", "width", "height", "elem", "arg",
                            "offset", "region", "delta", "dtype", "shape", "before", "after"]

scalars = st.one_of(
    st.sampled_from(INTS), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.text(max_size=12), st.sampled_from(NAMES),
    st.sampled_from(DTYPES), st.sampled_from(["linear", "pitched", "ptx", "cubin", "managed"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), inner, max_size=4)),
    max_leaves=10)


def paths(obj: Any, at: tuple = ()) -> Iterator[tuple]:
    """Every place in a JSON tree, as the keys and indices that lead to it."""
    yield at
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from paths(value, (*at, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from paths(value, (*at, i))


def mutate(data: st.DataObject, obj: dict[str, Any]) -> Any:
    """Up to five changes: a number moved a little, a value replaced, a key or item removed,
    or an entry added."""
    for _ in range(data.draw(st.integers(0, 5), label="changes")):
        places = [p for p in paths(obj) if p]
        if not places:
            break
        place = data.draw(st.sampled_from(places), label="place")
        parent = obj
        for step in place[:-1]:
            parent = parent[step]
        how = data.draw(st.sampled_from(["tweak", "tweak", "replace", "replace", "remove",
                                         "add"]), label="how")
        old = parent[place[-1]]
        if how == "tweak" and isinstance(old, int) and not isinstance(old, bool):
            parent[place[-1]] = data.draw(st.integers(max(0, old - 8), old + 8), label="near")
        elif how == "remove":
            del parent[place[-1]]
        elif how == "add" and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(KEYS), label="key")] = data.draw(values)
        elif how == "add" and isinstance(parent, list):
            parent.append(data.draw(values))
        else:
            parent[place[-1]] = data.draw(values, label="value")
    if data.draw(st.integers(0, 19), label="whole") == 0:
        return data.draw(values, label="whole value")
    return obj


NUMBER = re.compile(rb"-?\d+")


def corrupt(data: st.DataObject, text: bytes) -> bytes:
    """launch.json's bytes, mostly as they are, else damaged the ways files get damaged."""
    how = data.draw(st.sampled_from(["none"] * 6 + ["digits", "truncate", "insert", "deep",
                                                    "utf8", "bom", "empty"]), label="bytes")
    event(f"bytes: {how}")
    numbers = list(NUMBER.finditer(text))
    if how == "digits" and numbers:
        m = data.draw(st.sampled_from(numbers), label="number")
        return text[:m.start()] + b"7" * data.draw(st.sampled_from([41, 5000])) + text[m.end():]
    if how == "truncate":
        return text[:data.draw(st.integers(0, len(text)), label="cut")]
    if how == "insert":
        at = data.draw(st.integers(0, len(text)), label="at")
        return text[:at] + data.draw(st.binary(min_size=1, max_size=8)) + text[at:]
    if how == "deep" and numbers:
        m = data.draw(st.sampled_from(numbers), label="number")
        depth = data.draw(st.sampled_from([50, 5000, 100000]), label="depth")
        return text[:m.start()] + b"[" * depth + b"]" * depth + text[m.end():]
    if how == "utf8":
        at = data.draw(st.integers(0, len(text)), label="at")
        return text[:at] + b"\xff\xc3" + text[at:]
    if how == "bom":
        return b"\xef\xbb\xbf" + text
    if how == "empty":
        return b""
    return text


@st.composite
def launch_files(draw: st.DrawFn) -> bytes:
    data = draw(st.data())
    obj = mutate(data, base_spec())
    try:
        text = json.dumps(obj, indent=1).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        text = b"{}"
    return corrupt(data, text)


def check_refusal(err: ReplayError) -> None:
    """One line, saying which file (and, for a field, which one) it is about."""
    message = str(err)
    assert "\n" not in message and "\r" not in message, message
    assert len(message) < 1000, message
    assert message.startswith(("launch.json: ", "no launch.json in ")), message


def check_spec(spec: LaunchSpec) -> None:
    """What a spec that was accepted may be relied on for."""
    for value, limits in ((spec.grid, spec_module.GRID_LIMITS),
                          (spec.block, spec_module.BLOCK_LIMITS)):
        assert all(1 <= v <= most for v, most in zip(value, limits, strict=True))
    assert np.prod(spec.block) <= 1024 and 0 <= spec.smem < 2**32
    assert len(spec.params) <= spec_module.MAX_PARAM_BYTES
    assert all(1 <= r.size <= spec_module.MAX_BYTES for r in spec.regions)
    assert engine.name_problem(spec.image) is None
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in spec.kernel + spec.mangled)
    for b in spec.buffers:
        assert b.delta + b.extent <= spec.regions[b.region].size
        assert np.dtype(b.dtype).kind in "biufc"
        assert int(np.prod(b.shape)) * np.dtype(b.dtype).itemsize == b.width * b.height
        for name in (b.before, b.after):
            assert name is None or engine.name_problem(name) is None
    for p in spec.pointers:
        assert p.offset + 8 <= spec.layout[p.arg][1] and p.delta <= spec.regions[p.region].size


@contextlib.contextmanager
def no_hang() -> Iterator[None]:
    """Fails the example (rather than waiting forever) if it takes HANG seconds: a blocking
    open of a FIFO is interrupted by the alarm."""
    def expired(signum: int, frame: Any) -> None:
        raise AssertionError(f"no answer in {HANG} s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(HANG)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- launch.json alone


@FUZZ
@given(launch_files())
def test_any_launch_json_is_a_checked_spec_or_one_line(text: bytes) -> None:
    with no_hang():
        try:
            spec = LaunchSpec.parse(text)
        except SpecError as err:
            event("refused")
            check_refusal(err)
            return
    event("accepted")
    check_spec(spec)


def test_the_fuzz_reaches_both_answers() -> None:
    """The base spec is accepted as it is (so mutations start from a launch that reads)."""
    spec = LaunchSpec.parse(json.dumps(base_spec()).encode())
    check_spec(spec)


# ---------------------------------------------------------------- whole folders


def save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.save(f, array)


def build_folder(root: Path, launch: bytes, how: str) -> Path:
    """An extract folder holding `launch` as launch.json (or, by `how`, something else under
    that name), the files the base spec names, and one of each hostile kind of file."""
    outside = root / "outside"
    folder = root / "folder"
    outside.mkdir(parents=True)
    folder.mkdir()
    # Outside: files that would read well (a valid secret array, a valid launch.json), so
    # that reading them would show as success rather than as an error.
    save(outside / "secret.npy", A)
    (outside / "launch.json").write_bytes(launch)
    (folder / "module.fatbin").write_bytes(b"\x50\xed\x55\xba fake fatbin")
    save(folder / "buffers/a-before.npy", A)
    save(folder / "buffers/a-after.npy", A + 1)
    save(folder / "buffers/c-before.npy", C)
    os.mkfifo(folder / "fifo")
    with contextlib.suppress(OSError):   # a device node, where this user may make one
        os.mknod(folder / "device", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    (folder / "dir").mkdir()
    (folder / "up").symlink_to("../outside/secret.npy")
    (folder / "abs").symlink_to("/etc/passwd")
    (folder / "zero").symlink_to("/dev/zero")
    (folder / "loop").symlink_to("loop")
    (folder / "inner").symlink_to("buffers/a-before.npy")
    header = b"\x93NUMPY\x01\x00" + b"{'descr': '<f4', 'fortran_order': False, 'shape': " \
                                    b"(1099511627776,), }".ljust(117) + b"\n"
    (folder / "big.npy").write_bytes(header + bytes(256))
    (folder / "short.npy").write_bytes((folder / "buffers/a-before.npy").read_bytes()[:200])
    (folder / "objects.npy").write_bytes(
        b"\x93NUMPY\x01\x00" + b"{'descr': '|O', 'fortran_order': False, 'shape': (32,), }"
        .ljust(117) + b"\n" + bytes(256))
    save(folder / "fortran.npy", np.asfortranarray(A.reshape(8, 8)))
    spec = folder / "launch.json"
    if how == "fifo":
        os.mkfifo(spec)
    elif how == "outside":
        spec.symlink_to("../outside/launch.json")
    elif how == "dir":
        spec.mkdir()
    else:
        spec.write_bytes(launch)
    return folder


@st.composite
def folders(draw: st.DrawFn) -> tuple[bytes, str]:
    how = draw(st.sampled_from(["file"] * 17 + ["fifo", "outside", "dir"]), label="launch.json")
    event(f"launch.json: {how}")
    return draw(launch_files()), how


@FOLDERS
@given(folders())
def test_any_folder_is_ready_for_the_driver_or_one_line(case: tuple[bytes, str]) -> None:
    launch, how = case
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp), launch, how)
        real = os.path.realpath(folder)
        opened: list[str] = []

        def watch(real: Any) -> Any:
            def watched(path: Any, *args: Any, **kwargs: Any) -> Any:
                if isinstance(path, (str, bytes, os.PathLike)):
                    opened.append(os.fsdecode(path))
                return real(path, *args, **kwargs)
            return watched

        # Every way a file is opened by name (os.open, open, io.open) is watched.
        with no_hang(), mock.patch("os.open", watch(os.open)), \
                mock.patch("builtins.open", watch(open)), mock.patch("io.open", watch(io.open)):
            try:
                ready = prepare(folder)
            except ReplayError as err:
                event("refused")
                check_refusal(err)
                ready = None
        for path in opened:
            assert os.path.realpath(path).startswith(real + os.sep), path
        if ready is None:
            return
        event("ready")
        check_spec(ready.spec)
        assert how == "file"
        names = [ready.spec.image] + [n for b in ready.spec.buffers for n in (b.before, b.after)
                                      if n is not None]
        for name in names:
            assert os.path.realpath(folder / name).startswith(real + os.sep), name
        assert ready.image == (folder / ready.spec.image).read_bytes()
        for buffer, before, after in zip(ready.spec.buffers, ready.before, ready.after,
                                         strict=True):
            for name, array in ((buffer.before, before), (buffer.after, after)):
                assert (name is None) == (array is None)
                if array is not None:
                    assert array.shape == buffer.shape and array.dtype == buffer.dtype


# ---------------------------------------------------------------- the shipped script


def run_shipped(folder: Path) -> subprocess.CompletedProcess[str]:
    """`python FOLDER/replay.py` as a person runs it: the engine's files copied in, without
    cudump on the path and without a CUDA driver (so that a launch that reads well stops at
    loading the driver, in one line)."""
    for path in engine.shipped_files():
        shutil.copyfile(path, folder / path.name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH",
                                                              "LD_PRELOAD")}
    return subprocess.run([sys.executable, str(folder / "replay.py")], env=env,
                          capture_output=True, text=True, timeout=120, cwd=folder.parent)


def check_shipped(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1, 2), done.stderr
    if done.returncode == 2:
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("replay: "), done.stderr


HOSTILE = {
    "image /etc/passwd": ({"image": "/etc/passwd"}, "launch.json: image \"/etc/passwd\" is an "
                                                    "absolute path"),
    "image ../": ({"image": "../outside/secret.npy"}, "climbs out with '..'"),
    "image symlink out": ({"image": "up"}, "outside the folder"),
    "image fifo": ({"image": "fifo"}, "is a FIFO, not a regular file"),
    "image device": ({"image": "device"}, "is a device, not a regular file"),
    "image /dev/zero link": ({"image": "zero"}, "outside the folder"),
    "before outside": ({"buffers": [dict(base_spec()["buffers"][0], before="up")]},
                       "launch.json: buffers[0].before: \"up\" leads to"),
    "region 2**70": ({"regions": [{"size": 2**70}]}, "regions[0].size must be at most"),
    "grid 2**40": ({"grid": [2**40, 1, 1]}, "grid x is 1099511627776, more than CUDA allows"),
    "dtype": ({"buffers": [dict(base_spec()["buffers"][0], dtype="(2,)f4")]},
              "buffers[0].dtype \"(2,)f4\" is not a numpy dtype of plain data"),
    "npy too big": ({"buffers": [dict(base_spec()["buffers"][0], before="big.npy")]},
                    "buffers[0].before: \"big.npy\""),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_shipped_script_refuses_hostile_folders_in_one_line(tmp_path: Path,
                                                                case: str) -> None:
    changes, words = HOSTILE[case]
    spec = base_spec() | changes
    folder = build_folder(tmp_path, json.dumps(spec).encode(), "file")
    if case == "image device" and not (folder / "device").exists():
        pytest.skip("this user cannot make a device node")
    done = run_shipped(folder)
    check_shipped(done)
    assert done.returncode == 2 and words in done.stderr, done.stderr


@pytest.mark.parametrize("raw", ["fifo", "deep", "digits", "utf8"])
def test_the_shipped_script_refuses_hostile_launch_json_in_one_line(tmp_path: Path,
                                                                    raw: str) -> None:
    text = json.dumps(base_spec()).encode()
    words = {"fifo": "launch.json: \"", "deep": "nested too deeply",
             "digits": "launch.json: smem must be an integer, not a 5000-digit number",
             "utf8": "launch.json: not UTF-8 text (byte 0 is 0xff)"}[raw]
    if raw == "deep":
        text = b"[" * 100000 + b"]" * 100000
    elif raw == "digits":
        text = text.replace(b'"smem": 0', b'"smem": ' + b"9" * 5000)
    elif raw == "utf8":
        text = b"\xff" + text
    folder = build_folder(tmp_path, text, "fifo" if raw == "fifo" else "file")
    done = run_shipped(folder)
    check_shipped(done)
    assert done.returncode == 2 and words in done.stderr, done.stderr


@settings(FUZZ, max_examples=5)
@given(folders())
def test_the_shipped_script_on_fuzzed_folders(case: tuple[bytes, str]) -> None:
    launch, how = case
    with tempfile.TemporaryDirectory() as tmp:
        check_shipped(run_shipped(build_folder(Path(tmp), launch, how)))
