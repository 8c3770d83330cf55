"""The offline tools on bad input: one line on stderr, exit status 2, never a traceback.

Everything here goes through `cudump.cli.main`, as a user's command line does.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from records import group_line

from cudump import __version__
from cudump.cli import main
from cudump.errors import SnapshotError
from cudump.rundir.layout import MANIFEST_FILE as MANIFEST
from cudump.rundir.manifest import (
    ManifestWriter,
    SnapshotRecord,
    read_manifest,
    template_line,
)

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "void cam::paint<2>(uchar4*, int)"


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def assert_one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cudump: error: "), err
    for word in words:
        assert word in err, err


def record(**changes: object) -> dict:
    data = json.loads(SnapshotRecord(
        kernel=KERNEL, mangled="_Z5paint", launch=1, occurrence=1, pid=9, grid=[1, 1, 1],
        block=[32, 1, 1], stream="0x0", arg=0, type="uchar4*", phase="after",
        address="0x1000", dtype="uint8", shape=[4, 4, 4], file="s0.npy").to_json())
    data.update(changes)
    return data


def write_run(root: Path, lines: list[bytes | dict], data: np.ndarray | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "s0.npy", np.zeros((4, 4, 4), np.uint8) if data is None else data)
    raw = [line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines]
    (root / MANIFEST).write_bytes(b"\n".join(raw) + b"\n")
    return root


# ---------------------------------------------------------------------------------------
# The command line itself


def test_bare_cudump_gives_a_usage_line(capsys) -> None:
    code, out, err = cli([], capsys)
    assert_one_line_error(code, err, "no program given", "usage: cudump", "PROGRAM")
    assert "required: PROGRAM, ARGS" not in err and out == ""


def test_version(capsys) -> None:
    from importlib import metadata

    code, out, err = cli(["--version"], capsys)
    assert code == 0 and err == ""
    assert out == f"cudump {metadata.version('cudump')}\n"


def test_version_falls_back_to_the_package(monkeypatch, capsys) -> None:
    from importlib import metadata

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    code, out, _ = cli(["--version"], capsys)
    assert code == 0 and out == f"cudump {__version__}\n"


@pytest.mark.parametrize("argv,words", [
    (["diff"], ["required: A, B", "cudump diff --help"]),
    (["diff", "a", "b", "-j", "x"], ["invalid int value"]),
    (["ls"], ["required"]),
    (["show", "x", "--index", "one"], ["invalid int value"]),
    (["--max-bytes", "foo", "prog"], ["bad size 'foo'"]),
])
def test_argument_errors_are_one_line(capsys, argv: list[str], words: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    _, err = capsys.readouterr()
    assert_one_line_error(int(str(info.value.code)), err, *words)


@pytest.mark.parametrize("argv,words", [
    ([], ["no program given"]),
    (["--version"], []),
    (["diff", "nope-a", "nope-b"], ["no such file"]),
])
def test_entry_point_never_prints_a_traceback(argv: list[str], words: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "cudump", *argv], capture_output=True,
                          text=True, env=env, timeout=60)
    assert "Traceback" not in done.stderr
    if argv == ["--version"]:
        assert done.returncode == 0 and done.stdout.startswith("cudump ")
        return
    assert_one_line_error(done.returncode, done.stderr, *words)


def test_unexpected_exception_in_an_offline_command_is_one_line(tmp_path: Path, capsys,
                                                                monkeypatch) -> None:
    from cudump.commands.ls import LsCommand

    def broken(self, args):  # noqa: ANN001, ANN202 - a stand-in for a bug
        raise KeyError("boom\nsecond line")

    monkeypatch.setattr(LsCommand, "run", broken)
    code = main(["ls", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    assert err == "cudump: internal error: KeyError: 'boom\\nsecond line' (please report)\n"


def test_recursion_error_in_an_offline_command_is_one_line(tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    import cudump.commands.show as show

    def deep(*_):  # noqa: ANN002, ANN202
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(show, "load_array", deep)
    np.save(tmp_path / "a.npy", np.zeros(3))
    code, _, err = cli(["show", str(tmp_path / "a.npy")], capsys)
    assert code == 2 and err.startswith("cudump: internal error: RecursionError")


def test_broken_pipe_ends_quietly(tmp_path: Path) -> None:
    lines = [record(launch=n, occurrence=n) for n in range(1, 3001)]
    run = write_run(tmp_path / "run", lines)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "cudump", "ls", str(run)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err


# ---------------------------------------------------------------------------------------
# Manifests


BAD_LINES = [
    (b"[1,2,3]", "expected a JSON object, got a list"),
    (b"42", "expected a JSON object, got a number"),
    (b'"text"', "expected a JSON object, got a string"),
    (b"\xff\xfe{}", "not UTF-8 text"),
    (b"{not json", "not valid JSON"),
    (b"[" * 100000 + b"]" * 100000, "not valid JSON"),
    (json.dumps(record(launch=None)).encode(), "field 'launch' should be a whole number, "
                                               "got null"),
    (json.dumps(record(launch="7")).encode(), "field 'launch' should be a whole number"),
    (json.dumps(record(launch=True)).encode(), "field 'launch' should be a whole number, "
                                               "got true"),
    (json.dumps(record(arg=1.5)).encode(), "field 'arg' should be a whole number"),
    (json.dumps(record(kernel=["k"])).encode(), "field 'kernel' should be a string, got a list"),
    (json.dumps(record(grid="1,1,1")).encode(), "field 'grid' should be a list of whole numbers"),
    (json.dumps(record(shape=[4, "4"])).encode(), "field 'shape' should be a list of whole "
                                                  "numbers or null"),
    (json.dumps(record(file=7)).encode(), "field 'file' should be a string or null, got a number"),
    (json.dumps(record(range={"lo": 0})).encode(), "field 'range' should be a list of numbers"),
    (json.dumps(record(device="0")).encode(), "field 'device' should be a whole number or null"),
    (b'{"kernel": "k"}', "record lacks the field 'mangled'"),
    (b'{"launch": 1' + b"0" * 5000 + b"}", "not valid JSON"),
    (b'{"digests_of": "9.1", "launch": 2, "digests": []}',
     "field 'digests_of' names no template of an earlier line"),
    (b'{"digest_template": "9.1", "records": 5}',
     "field 'records' should be a list of objects, got a number"),
    (b'{"digest_template": 1, "records": []}', "field 'digest_template' should be a string"),
]


@pytest.mark.parametrize("line,problem", BAD_LINES)
def test_bad_manifest_lines_name_the_file_and_line(tmp_path: Path, capsys, line: bytes,
                                                   problem: str) -> None:
    run = write_run(tmp_path / "run", [record(), line, record(launch=2)])
    with pytest.raises(SnapshotError) as info:
        read_manifest(run)
    assert str(info.value) == f"{run / MANIFEST}:2: {problem}" or (
        str(info.value).startswith(f"{run / MANIFEST}:2: {problem}"))
    for argv in (["ls", str(run)], ["show", str(run), "--index", "0"],
                 ["diff", str(run), str(run)]):
        code, _, err = cli(argv, capsys)
        assert_one_line_error(code, err, f"{MANIFEST}:2:")


def digest_record(launch: int, arg: int, value: str) -> SnapshotRecord:
    return SnapshotRecord.from_dict(record(launch=launch, occurrence=launch, arg=arg, file=None,
                                           device=0, digest=value, bytes=64))


def test_repeated_digests_are_read_back_as_the_records_they_stand_for(tmp_path: Path) -> None:
    """A repeated plan's template line and its launches' lines give the same records as one
    line per digest would."""
    first = [digest_record(3, arg, f"{arg:016x}") for arg in (0, 2)]
    later = [digest_record(7, arg, f"{arg + 10:016x}") for arg in (0, 2)]
    lines = [line.encode() for line in (
        first[0].to_json(), first[1].to_json(), template_line("9.1", first),
        group_line("9.1", 7, 7, [1, 1, 1], [32, 1, 1], 0, 0, [r.extra["digest"] for r in later]))]
    run = write_run(tmp_path / "run", lines)
    assert ([json.loads(r.to_json()) for r in read_manifest(run)]
            == [json.loads(r.to_json()) for r in first + later])


def test_a_launch_line_with_the_wrong_number_of_digests(tmp_path: Path) -> None:
    template = template_line("9.1", [digest_record(3, 0, "0" * 16)]).encode()
    run = write_run(tmp_path / "run", [template, group_line(
        "9.1", 4, 4, [1, 1, 1], [1, 1, 1], 0, 0, ["1" * 16, "2" * 16]).encode(), record()])
    with pytest.raises(SnapshotError) as info:
        read_manifest(run)
    assert str(info.value) == (f"{run / MANIFEST}:2: field 'digests' should be a list of 1 "
                               "strings, got a list")


def test_a_torn_last_line_is_still_skipped(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [record(), json.dumps(record(launch=2)).encode()[:40]])
    assert [r.launch for r in read_manifest(run)] == [1]
    run = write_run(tmp_path / "utf", [record(), b'{"kernel": "\xe2\x82'])
    assert len(read_manifest(run)) == 1


@pytest.mark.parametrize("content", [
    b"this is not a manifest",                  # no newline: was "0 of 0 snapshots", exit 0
    b"this is not a manifest\n",
    b"\x89PNG\r\n\x1a\n\x00\x00",
    b"   \n\n<html>",
])
def test_a_file_of_garbage_is_not_a_manifest(tmp_path: Path, capsys, content: bytes) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / MANIFEST).write_bytes(content)
    line = 3 if content.startswith(b"   ") else 1
    for argv in (["ls", str(run)], ["show", str(run), "--index", "0"],
                 ["diff", str(run), str(run)]):
        code, out, err = cli(argv, capsys)
        assert_one_line_error(code, err, f"{run / MANIFEST}:{line}: not a cudump manifest")
        assert out == ""


def test_garbage_after_the_records_is_an_error_not_a_torn_line(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [record(), b"garbage"])
    with pytest.raises(SnapshotError) as info:
        read_manifest(run)
    assert str(info.value) == f"{run / MANIFEST}:2: not valid JSON"


def test_a_manifest_that_cannot_be_read(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    (run / MANIFEST).mkdir(parents=True)
    code, _, err = cli(["ls", str(run)], capsys)
    assert_one_line_error(code, err, "not a cudump run directory")


# ---------------------------------------------------------------------------------------
# Images and files


def huge_png(path: Path, width: int, height: int) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                     + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))
    return path


def test_png_of_361_million_pixels_is_refused(tmp_path: Path, capsys) -> None:
    bomb = huge_png(tmp_path / "bomb.png", 19000, 19000)
    small = tmp_path / "small.png"
    from PIL import Image

    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(small)
    code, _, err = cli(["diff", str(bomb), str(small)], capsys)
    assert_one_line_error(code, err, "too large")
    code, _, err = cli(["show", str(bomb)], capsys)
    assert_one_line_error(code, err, "too large")


def test_a_corrupted_png_is_trouble(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nthen nothing useful")
    code, _, err = cli(["diff", str(bad), str(bad)], capsys)
    assert_one_line_error(code, err, "not a PNG file (or a corrupted one)")


def test_diff_jobs_minus_one_through_the_entry_point(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", [record()])
    code, _, err = cli(["diff", str(run), str(run), "-j", "-1"], capsys)
    assert_one_line_error(code, err, "--jobs")


# ---------------------------------------------------------------------------------------
# Corrupted runs, generated: ls, show and diff answer 0, 1 or 2 with one line, nothing else


# Characters from a fixed range: the default alphabet costs seconds of set-up per run.
TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x24F), max_size=20)


def _mutate_value(draw: st.DrawFn) -> object:
    return draw(st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
        TEXT, st.lists(st.integers(-3, 9), max_size=4), st.lists(TEXT, max_size=3),
        st.dictionaries(TEXT, st.integers(), max_size=2)))


@st.composite
def corrupted_runs(draw: st.DrawFn) -> tuple[list[bytes], bytes]:
    """Manifest lines (some mutated, some garbage) and the bytes of s0.npy (maybe cut)."""
    lines: list[bytes] = []
    for n in range(draw(st.integers(1, 4))):
        data = record(launch=n + 1, occurrence=n + 1)
        choice = draw(st.sampled_from(["keep", "field", "drop", "garbage"]))
        if choice == "field":
            data[draw(st.sampled_from(sorted(data)))] = _mutate_value(draw)
        elif choice == "drop":
            del data[draw(st.sampled_from(sorted(data)))]
        if choice == "garbage":
            lines.append(draw(st.binary(max_size=40)).replace(b"\n", b" "))
        else:
            lines.append(json.dumps(data).encode())
    array = draw(st.sampled_from([np.zeros((4, 4, 4), np.uint8), np.ones(7, np.float64),
                                  np.array(["x", "y"]), np.zeros((0, 4), np.uint8),
                                  np.zeros((2, 2, 9), np.int16)]))
    with tempfile.TemporaryFile() as f:
        np.save(f, array)
        f.seek(0)
        content = f.read()
    cut = draw(st.one_of(st.none(), st.integers(0, len(content))))
    return lines, content if cut is None else content[:cut]


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(corrupted_runs(), corrupted_runs())
def test_corrupted_runs_give_one_line_answers(capsys, a, b) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for name, (lines, npy) in (("a", a), ("b", b)):
            root = Path(tmp) / name
            root.mkdir()
            (root / MANIFEST).write_bytes(b"\n".join(lines) + b"\n")
            (root / "s0.npy").write_bytes(npy)
            runs.append(str(root))
        png = str(Path(tmp) / "out.png")
        for argv in (["ls", runs[0]], ["show", runs[0], "--index", "0", "--png", png],
                     ["show", runs[0] + "/s0.npy"], ["diff", *runs], ["diff", "-j", "1", *runs],
                     ["diff", runs[0] + "/s0.npy", runs[1] + "/s0.npy"]):
            code = main(argv)
            _, err = capsys.readouterr()
            event(f"{argv[0]} exits {code}")
            assert code in (0, 1, 2), (argv, code, err)
            assert "internal error" not in err and "Traceback" not in err, (argv, err)
            if code == 2:
                assert_one_line_error(code, err)
            else:
                assert err == "", (argv, err)


def test_manifest_writer_round_trip_still_reads(tmp_path: Path) -> None:
    writer = ManifestWriter(tmp_path)
    writer.append(SnapshotRecord(**{k: v for k, v in record(device=1, range=[0.0, 1.5]).items()
                                    if k != "extra"}))
    writer.close()
    (rec,) = read_manifest(tmp_path)
    assert rec.device == 1 and rec.range == [0.0, 1.5] and rec.launch == 1


# ---------------------------------------------------------------------------------------
# What a run's files hold is shown, never obeyed by the terminal

EVIL_KERNEL = "void evil\x1b[2J\x1b]0;owned\x07<2>(uchar4*, int)\r"
CONTROLS = ("\x1b", "\x07", "\r", "\x00", "\x9b")


def evil_run(root: Path) -> Path:
    return write_run(root, [record(kernel=EVIL_KERNEL, type="uchar4*\x1b[31m",
                                   stream="0x0\x00\x9b", mangled="_Z4evil\x08\x08")])


@pytest.mark.parametrize("command", ["ls", "ls-full", "show", "diff", "diff-self"])
def test_control_characters_in_a_manifest_are_escaped_when_printed(tmp_path: Path, capsys,
                                                                   command: str) -> None:
    a = evil_run(tmp_path / "a")
    b = write_run(tmp_path / "b", [record(kernel=EVIL_KERNEL, type="uchar4*\x1b[31m")],
                  data=np.ones((4, 4, 4), np.uint8))
    argv = {"ls": ["ls", str(a)], "ls-full": ["ls", str(a), "--full-names"],
            "show": ["show", str(a), "--index", "0"], "diff": ["diff", str(a), str(b)],
            "diff-self": ["diff", str(a), str(a), "--kernel", "*evil*"]}[command]
    code, out, err = cli(argv, capsys)
    assert code in (0, 1), err
    for char in CONTROLS:
        assert char not in out and char not in err, (char, out)
    assert "\\x1b[" in out        # shown, escaped


def test_a_table_stays_aligned_with_escaped_names(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "a", [record(type="uchar4*\x1b[31m"), record(launch=2)])
    code, out, _ = cli(["ls", str(run)], capsys)
    assert code == 0
    header, first, second = out.splitlines()[:3]
    assert first.index("after") == second.index("after") == header.index("phase")


def test_control_characters_in_an_error_message_are_escaped(tmp_path: Path, capsys) -> None:
    run = evil_run(tmp_path / "a")
    code, _, err = cli(["ls", str(run), "--kernel", "re:[\x1b[2J"], capsys)
    assert code == 2
    assert "\x1b" not in err and "\\x1b[2J" in err
    with pytest.raises(SystemExit):
        main(["ls", str(run), "--bad\x1b[2J"])
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err
