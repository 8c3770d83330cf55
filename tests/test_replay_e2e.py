"""Capture, replay and extract end to end on the stand-in driver: the shim keeps each module
image exactly, the controller records what a replay needs, and `cudump replay` (cuda-python,
talking to the stand-in) and an extracted folder's own script run the launch again."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cudump.errors import RuleError
from cudump.policy.rules import load_rules

ROOT = Path(__file__).resolve().parent.parent


def captures(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "captures.jsonl").read_text().splitlines()]


@pytest.fixture
def offline(fake, tmp_path):
    """Runs a cudump subcommand (or any command) with the stand-in as libcuda.so.1."""

    def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = fake.env()
        if argv[0].endswith(".py"):   # a script that must run without cudump
            cmd = [sys.executable, *argv]
            env.pop("PYTHONPATH", None)
        else:
            cmd = [sys.executable, "-m", "cudump", *argv]
            env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120,
                              cwd=cwd or tmp_path)

    return run


def test_every_kind_of_module_image_is_kept_byte_for_byte(fake, cudump_run, tmp_path):
    ran = cudump_run([str(fake.programs["modules"])], "--capture-launch", "*")
    assert ran.returncode == 0, ran.stderr
    assert "5 launches captured for replay" in ran.stderr.splitlines()[-1]
    by_kernel = {c["kernel"].split("(")[0]: c for c in captures(ran.run_dir)}
    cwd = tmp_path   # where the program wrote each image it loaded
    expected = {
        "vecAdd": ("image-fatbin.bin", "fatbin"),      # heap buffer freed after the load
        "scale": ("image-cubin.bin", "cubin"),         # ELF in the program's own memory
        "void fill<int>": ("image-wrapped.bin", "fatbin"),   # the runtime's wrapper, followed
        "empty": ("image-ptx.ptx", "ptx"),             # cuModuleLoad of a file
        "add3": ("image-library.bin", "cubin"),        # cuLibraryLoadData, heap, freed
    }
    for kernel, (name, fmt) in expected.items():
        c = by_kernel[kernel]
        assert c["image_format"] == fmt, kernel
        assert (ran.run_dir / c["image"]).read_bytes() == (cwd / name).read_bytes(), kernel
        assert c["problems"] == [], kernel
    assert len(list((ran.run_dir / "modules").iterdir())) == 5


def test_capture_record_holds_parameters_pointers_and_buffers(fake, cudump_run):
    ran = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd")
    assert ran.returncode == 0, ran.stderr
    launches = captures(ran.run_dir)
    assert [c["occurrence"] for c in launches] == [1, 2, 3]
    second = launches[1]                       # vecAdd(dc, db, dc, n): arg 0 is arg 2
    assert second["layout"] == [[0, 8], [8, 8], [16, 8], [24, 4]]
    params = bytes.fromhex(second["params"])
    words = [int.from_bytes(params[i:i + 8], "little") for i in (0, 8, 16)]
    assert words[0] == words[2] != words[1]
    assert int.from_bytes(params[24:28], "little") == 1000
    assert [(p["arg"], p["value"]) for p in second["pointers"]] == list(enumerate(words))
    assert {b["arg"]: (b["dtype"], b["shape"]) for b in second["buffers"]} == {
        0: ("float32", [1000]), 1: ("float32", [1000]), 2: ("float32", [1000])}
    before = np.load(ran.run_dir / second["buffers"][2]["before"])
    after = np.load(ran.run_dir / second["buffers"][2]["after"])
    b = np.load(ran.run_dir / second["buffers"][1]["before"])
    np.testing.assert_array_equal(after, before + b)


def test_replay_runs_every_capture_again_and_finds_it_equal(fake, cudump_run, offline):
    ran = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd")
    for c in captures(ran.run_dir):
        done = offline("replay", str(ran.run_dir), "--launch", str(c["launch"]), "--runs", "2")
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith(f"replay: launch {c['launch']} of vecAdd(float const*, "
                                   f"float const*, float*, int) (occurrence {c['occurrence']}")
        assert lines[1:] == [
            "arg0 (float32 [1000]): equal to the captured after",
            "arg1 (float32 [1000]): equal to the captured after",
            "arg2 (float32 [1000]): equal to the captured after",
            "replay: all 3 buffers equal to the capture",
            "replay: all 2 runs wrote the same bytes"]


def test_aliased_pointers_share_one_buffer_in_the_replay(fake, cudump_run, offline, tmp_path):
    """vecAdd(dc, db, dc): were arg 0 and arg 2 two buffers, the kernel would read the old
    dc and the replay still match; changing the captured "before" of arg 0 only (which the
    replay writes first, then arg 2's over it) shows they are one."""
    ran = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd")
    second = captures(ran.run_dir)[1]
    done = offline("replay", str(ran.run_dir), "--launch", str(second["launch"]), "--out",
                   str(tmp_path / "again"))
    assert done.returncode == 0, done.stdout
    assert "cudump diff" in done.stdout.splitlines()[-1]
    diff = offline("diff", str(ran.run_dir), str(tmp_path / "again"), "--kernel", "vecAdd")
    assert "0 differ" in diff.stdout
    twice = offline("replay", str(ran.run_dir), "--launch", str(second["launch"]), "--out",
                    str(tmp_path / "again"))
    assert twice.returncode == 2
    assert twice.stderr == (f"cudump: error: --out {tmp_path / 'again'} already holds a run; "
                            "give a new or empty directory\n")


def test_pitched_images_replay_and_a_changed_pixel_is_named(fake, cudump_run, offline):
    ran = cudump_run([str(fake.programs["zed"])], "--capture-launch", "device::FrP0k*")
    assert ran.returncode == 0, ran.stderr
    first = captures(ran.run_dir)[0]
    assert {p["alloc"]["kind"] for p in first["pointers"]} == {"pitched"}
    src = next(b for b in first["buffers"] if b["arg"] == 0)
    assert (src["dtype"], src["shape"]) == ("uint8", [360, 640, 4])
    same = offline("replay", str(ran.run_dir), "--launch", str(first["launch"]))
    assert same.returncode == 0, same.stdout + same.stderr
    # One byte of the captured "after" of the left image changed: exactly that is reported.
    left = next(b for b in first["buffers"] if b["arg"] == 2)
    path = ran.run_dir / left["after"]
    after = np.load(path)
    after[5, 12] ^= 0x40
    np.save(path, after)
    changed = offline("replay", str(ran.run_dir), "--launch", str(first["launch"]))
    assert changed.returncode == 1
    line = next(ln for ln in changed.stdout.splitlines() if ln.startswith("arg2 "))
    assert line.startswith("arg2 (uint8 [360, 2560]): 1 of 921,600 elements (")
    assert "largest difference 64 at (5,12)" in line
    assert "replay: 1 of 3 buffers differ from the capture" in changed.stdout


def test_extracted_folder_runs_on_its_own(fake, cudump_run, offline, tmp_path):
    ran = cudump_run([str(fake.programs["cudart_like"])], "--capture-launch", "vecAdd")
    folder = tmp_path / "repro"
    done = offline("extract", str(ran.run_dir), "--kernel", "vecAdd", str(folder))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md", "buffers", "launch.json", "module.ptx", "replay.py", "replay_driver.py",
        "replay_files.py", "replay_spec.py"]
    assert sorted(p.name for p in (folder / "buffers").iterdir()) == [
        f"arg{i}-{phase}.npy" for i in range(3) for phase in ("after", "before")]
    spec = json.loads((folder / "launch.json").read_text())
    assert (spec["format"], spec["mangled"], spec["grid"], spec["block"]) == (
        "cudump-launch/1", "_Z6vecAddPKfS0_Pfi", [4, 1, 1], [128, 1, 1])
    engine = ROOT / "cudump" / "analysis" / "replay_engine"
    for name in ("replay.py", "replay_driver.py", "replay_files.py", "replay_spec.py"):
        assert (folder / name).read_bytes() == (engine / name).read_bytes(), name
    assert "python replay.py" in (folder / "README.md").read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    alone = offline(str(folder / "replay.py"), cwd=elsewhere)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert alone.stdout.splitlines() == [
        f"arg{i} (float32 [512]): equal to the captured after" for i in range(3)]
    assert not (folder / "__pycache__").exists()  # the folder stays as extract wrote it
    # A wrong "after" is a difference, exit status 1.
    after = np.load(folder / "buffers" / "arg2-after.npy")
    after[3] += 1
    np.save(folder / "buffers" / "arg2-after.npy", after)
    wrong = offline(str(folder / "replay.py"), cwd=elsewhere)
    assert wrong.returncode == 1
    assert "arg2 (float32 [512]): 1 of 512 elements differ" in wrong.stdout
    again = offline("extract", str(ran.run_dir), "--kernel", "vecAdd", str(folder))
    assert again.returncode == 2
    assert again.stderr.strip() == (f"cudump: error: {folder} exists and is not an empty "
                                    "directory; give a new one")


def test_rule_replay_true_captures_only_what_it_selects(fake, cudump_run, tmp_path):
    rule = tmp_path / "r.yaml"
    rule.write_text("rules:\n  - kernel: vecAdd\n    skip: 1\n    count: 1\n    replay: true\n")
    ran = cudump_run([str(fake.programs["linked"])], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    assert [c["occurrence"] for c in captures(ran.run_dir)] == [2]


@pytest.mark.parametrize("text,problem", [
    ("  replay: yes please\n", "2: field 'replay': expected true or false, got 'yes please'"),
    ("  replay: true\n  args: [0]\n", "3: field 'args': a rule with 'replay: true' takes "
     "every buffer of the launch, before and after; drop 'args' (or write a second rule)"),
    ("  replay: true\n  format: digest\n", "3: field 'format': 'replay: true' needs the "
     "buffers' bytes; use npy or png, not digest"),
])
def test_replay_rule_errors(tmp_path, text, problem):
    path = tmp_path / "r.yaml"
    path.write_text("- kernel: k\n" + text)
    with pytest.raises(RuleError) as err:
        load_rules([path])
    assert str(err.value) == f"{path}:{problem}"


def test_replay_troubles_are_one_line(fake, cudump_run, offline, tmp_path):
    plain = cudump_run([str(fake.programs["linked"])], "--digest")
    done = offline("replay", str(plain.run_dir))
    assert done.returncode == 2
    assert done.stderr == (f"cudump: error: {plain.run_dir} holds no captured launch "
                           "(captures.jsonl); run the program with --capture-launch PATTERN "
                           "or a rule with 'replay: true'\n")
    ran = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd",
                     run_dir=tmp_path / "cap")
    missing = offline("replay", str(ran.run_dir), "--launch", "99")
    assert missing.returncode == 2
    assert missing.stderr.startswith("cudump: error: no captured launch matches; the run has 3:")
    (ran.run_dir / captures(ran.run_dir)[0]["buffers"][0]["before"]).unlink()
    gone = offline("replay", str(ran.run_dir), "--launch", "1")
    assert gone.returncode == 2
    assert gone.stderr.startswith("cudump: error: arg0: its before snapshot cannot be read:")
    assert gone.stderr.count("\n") == 1


def test_replay_out_never_writes_through_planted_symlinks(fake, cudump_run, offline, tmp_path):
    """A replay's --out is a run too: a dangling symlink named manifest.jsonl, or named like
    one of the snapshot files it writes, is refused in one line and nothing is created
    where the links point."""
    ran = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd",
                     run_dir=tmp_path / "cap")
    first = captures(ran.run_dir)[0]
    outside = tmp_path / "outside"
    outside.mkdir()
    link_manifest, link_files = tmp_path / "m", tmp_path / "f"
    link_manifest.mkdir()
    (link_manifest / "manifest.jsonl").symlink_to(outside / "manifest.jsonl")
    link_files.mkdir()
    for arg in range(3):
        for phase in ("before", "after"):
            name = f"{first['launch']:06d}-{first['pid']}-replay-arg{arg}-{phase}.npy"
            (link_files / name).symlink_to(outside / name)
    for out in (link_manifest, link_files):
        done = offline("replay", str(ran.run_dir), "--launch", str(first["launch"]), "--out",
                       str(out))
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.startswith(f"cudump: error: --out {out} already ")
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert list(outside.iterdir()) == []
    assert not os.path.lexists(link_files / "manifest.jsonl")


def one_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("cudump: error: "), \
        done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_fifos_where_run_files_should_be_are_refused_without_hanging(fake, cudump_run, offline,
                                                                     tmp_path):
    """A FIFO (no writer: opening it for reading would wait for one) under the name of a
    module image, a snapshot, captures.jsonl, or given as --ptx, and a device as the module
    image: `replay` and `extract` say so in one line and never wait on it (the offline
    fixture's timeout would fail the test)."""
    ran = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd",
                     run_dir=tmp_path / "cap")
    first = captures(ran.run_dir)[0]
    image = ran.run_dir / first["image"]
    image.unlink()
    os.mkfifo(image)
    one_line(offline("replay", str(ran.run_dir), "--launch", str(first["launch"])),
             "a FIFO, not a file cudump wrote")
    one_line(offline("extract", str(ran.run_dir), "--launch", str(first["launch"]),
                     str(tmp_path / "x1")), "a FIFO, not a file cudump wrote")
    fifo = tmp_path / "fifo.ptx"
    os.mkfifo(fifo)
    one_line(offline("replay", str(ran.run_dir), "--launch", str(first["launch"]), "--ptx",
                     str(fifo)), "is a FIFO, not a regular file")
    other = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd",
                       run_dir=tmp_path / "cap2")
    snapshot = other.run_dir / captures(other.run_dir)[0]["buffers"][0]["before"]
    snapshot.unlink()
    os.mkfifo(snapshot)
    one_line(offline("replay", str(other.run_dir), "--launch", "1"), "arg0")
    one_line(offline("extract", str(other.run_dir), "--launch", "1", str(tmp_path / "x2")),
             "arg0")
    (other.run_dir / "captures.jsonl").unlink()
    os.mkfifo(other.run_dir / "captures.jsonl")
    one_line(offline("replay", str(other.run_dir)), "captures.jsonl", "FIFO")
    one_line(offline("extract", str(other.run_dir), str(tmp_path / "x3")), "captures.jsonl",
             "FIFO")
    image.unlink()
    try:   # /dev/zero's twin as the module image, where this user may make one
        os.mknod(image, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except OSError:
        return
    one_line(offline("replay", str(ran.run_dir), "--launch", str(first["launch"])),
             "a character device, not a file cudump wrote")
    one_line(offline("extract", str(ran.run_dir), "--launch", str(first["launch"]),
                     str(tmp_path / "x0")), "a character device, not a file cudump wrote")


def test_overlong_and_hostile_names_in_a_run_are_one_line(fake, cudump_run, offline, tmp_path):
    ran = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd",
                     run_dir=tmp_path / "cap")
    lines = captures(ran.run_dir)
    path = ran.run_dir / "captures.jsonl"
    for field, value, word in (("before", "a" * 5000, "arg0"), ("before", "x/" * 2100, "arg0"),
                               ("image", "m" * 5000, "module image"),
                               ("image", "/etc/passwd", "outside the run directory")):
        changed = json.loads(json.dumps(lines[0]))
        if field == "image":
            changed["image"] = value
        else:
            changed["buffers"][0][field] = value
        path.write_text("".join(json.dumps(c) + "\n" for c in [changed, *lines[1:]]))
        one_line(offline("replay", str(ran.run_dir), "--launch", str(changed["launch"])), word)
        one_line(offline("extract", str(ran.run_dir), "--launch", str(changed["launch"]),
                         str(tmp_path / f"x-{field}-{len(value)}")), word)
    path.write_bytes(b'{"kernel": "\xff"}\n')
    one_line(offline("replay", str(ran.run_dir)), "captures.jsonl:1")
    path.write_bytes(b"[" * 100000 + b"\n")
    one_line(offline("replay", str(ran.run_dir)), "captures.jsonl:1")


def test_inputs_from_a_run_whose_manifest_names_an_overlong_file(fake, cudump_run, offline,
                                                                 tmp_path):
    ran = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd",
                     run_dir=tmp_path / "cap")
    manifest = ran.run_dir / "manifest.jsonl"
    records = [json.loads(line) for line in manifest.read_text().splitlines()]
    first = next(r for r in records if r["launch"] == 1 and r["phase"] == "before")
    first["file"] = "a" * 5000
    manifest.write_text("".join(json.dumps(r) + "\n" for r in records))
    one_line(offline("replay", str(ran.run_dir), "--launch", "1", "--inputs-from",
                     str(ran.run_dir)), "--inputs-from", "its name is too long")
