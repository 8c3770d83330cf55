"""`--out DIR` names a directory whose contents are not cudump's: nothing the run writes may
leave it through a symlink planted there, nothing is appended to a file that was there, and
a directory cudump cannot write in is one line and exit status 2 before the program runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cudump.policy.snapshot.capture import CaptureWriter, ImageStore
from cudump.policy.snapshot.writer import new_npy_memmap, save_npy, save_whole
from cudump.policy.trace import TraceWriter
from cudump.rundir import files as runfiles
from cudump.rundir.captures import CaptureRecord
from cudump.rundir.manifest import ManifestWriter
from cudump.rundir.summary import RunSummary

ROOT = Path(__file__).resolve().parent.parent
VECADD_RULE = ('rules:\n  - kernel: "*vecAdd*"\n    args: [2]\n    when: after\n'
               '    format: npy\n    overrides:\n      2: {dtype: float32, count: 1000}\n')


def plant(run_dir: Path, outside: Path, *names: str) -> dict[str, Path]:
    """Dangling symlinks in run_dir, each pointing at its own (absent) file in outside."""
    run_dir.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    targets = {}
    for name in names:
        target = outside / f"target-{name.strip('.')}"
        (run_dir / name).symlink_to(target)
        targets[name] = target
    return targets


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("cudump: error: "), stderr
    return lines[0]


# -- end to end ----------------------------------------------------------------------

def test_dangling_symlinks_named_like_the_run_files_are_refused(fake, cudump_run, tmp_path):
    run_dir, outside = tmp_path / "planted", tmp_path / "outside"
    targets = plant(run_dir, outside, "manifest.jsonl", "summary.json", "trace.jsonl")
    rule = tmp_path / "rule.yaml"
    rule.write_text(VECADD_RULE)
    ran = cudump_run([str(fake.programs["linked"])], "--trace", "--rule", str(rule),
                     run_dir=run_dir)
    assert ran.returncode == 2
    assert ran.stdout == ""     # the program did not run
    line = one_error_line(ran.stderr)
    assert f"--out {run_dir}" in line and "symlinks" in line, line
    assert not [t for t in targets.values() if os.path.lexists(t)]
    assert list(outside.iterdir()) == []


def test_a_planted_modules_symlink_takes_no_module_image_out_of_the_run(
        fake, cudump_run, bare_run, tmp_path):
    """modules/ is a folder the run makes; planted as a symlink to a folder elsewhere, it is
    refused (the images are lost, said in a warning) and nothing is written there."""
    run_dir, outside = tmp_path / "planted", tmp_path / "outside"
    run_dir.mkdir()
    outside.mkdir()
    (run_dir / "modules").symlink_to(outside, target_is_directory=True)
    program = [str(fake.programs["linked"])]
    ran = cudump_run(program, "--capture-launch", "vecAdd", run_dir=run_dir)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    assert "module image" in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    assert list(outside.iterdir()) == []
    assert (run_dir / "captures.jsonl").is_file()   # the launches are captured all the same
    assert not (run_dir / "captures.jsonl").is_symlink()


def _unwritable_dir() -> Path:
    """A directory that exists and in which even root cannot create a file: tests run as
    root here, and root ignores permission bits (a chmod 0555 folder would not do), so a
    folder of sysfs or procfs, whose files only the kernel makes (EACCES, or EROFS where
    /sys is mounted read-only), stands in for an --out on a read-only file system."""
    for candidate in ("/sys/kernel", "/proc/self/fdinfo", "/proc"):
        path = Path(candidate)
        if not path.is_dir():
            continue
        try:
            runfiles.check_writable(path)
        except OSError:
            return path
    pytest.skip("no directory here refuses to have a file created in it")


def test_an_out_that_cannot_be_written_is_one_line_before_the_program_runs(
        fake, cudump_run):
    out = _unwritable_dir()
    ran = cudump_run([str(fake.programs["linked"])], "--trace", run_dir=out)
    assert ran.returncode == 2
    assert ran.stdout == ""     # the program did not run
    line = one_error_line(ran.stderr)
    assert line.startswith(f"cudump: error: --out {out}: cannot write in it: "), line


def test_an_out_under_a_regular_file_is_one_line(fake, cudump_run, tmp_path):
    """A path whose parent is a file cannot be made, by root either."""
    (tmp_path / "file").write_text("")
    ran = cudump_run([str(fake.programs["linked"])], "--trace", run_dir=tmp_path / "file" / "x")
    assert ran.returncode == 2 and ran.stdout == ""
    assert one_error_line(ran.stderr).startswith(f"cudump: error: --out {tmp_path}/file/x: ")


def test_no_out_and_an_unwritable_working_directory_is_one_line(fake, shim_lib):
    """Without --out the run directory is cudump-out/<n>/ in the working directory."""
    cwd = _unwritable_dir()
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib),
                        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "cudump", str(fake.programs["linked"])],
                          env=env, capture_output=True, text=True, timeout=60, cwd=cwd)
    assert done.returncode == 2 and done.stdout == ""
    assert "cudump-out" in one_error_line(done.stderr)


# -- each writer of a run file -----------------------------------------------------------

def test_the_manifest_is_created_new_never_through_a_symlink_nor_appended_to(tmp_path):
    targets = plant(tmp_path / "a", tmp_path / "outside", "manifest.jsonl")
    with pytest.raises(FileExistsError):
        ManifestWriter(tmp_path / "a")
    assert not os.path.lexists(targets["manifest.jsonl"])
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.jsonl").write_text("{}\n")
    with pytest.raises(FileExistsError):
        ManifestWriter(tmp_path / "b")
    assert (tmp_path / "b" / "manifest.jsonl").read_text() == "{}\n"


def test_the_trace_file_is_never_written_through_a_symlink(tmp_path):
    targets = plant(tmp_path / "run", tmp_path / "outside", "trace.jsonl")
    with pytest.raises(FileExistsError):
        TraceWriter(tmp_path / "run")
    assert not os.path.lexists(targets["trace.jsonl"])


def test_a_trace_file_that_cannot_be_created_is_a_cudump_error_not_a_traceback(tmp_path):
    """Should trace.jsonl appear after --out was checked, the controller says so in one
    line before the program starts (CudumpError, which the CLI prints)."""
    from cudump.controller.options import RunOptions
    from cudump.controller.run_state import Controller
    from cudump.errors import CudumpError

    plant(tmp_path / "run", tmp_path / "outside", "trace.jsonl")
    with pytest.raises(CudumpError, match="cannot create .*trace.jsonl: File exists"):
        Controller(RunOptions(argv=["true"], run_dir=tmp_path / "run", trace=True))


def test_the_summary_replaces_a_planted_symlink_with_a_real_file(tmp_path):
    run_dir = tmp_path / "run"
    targets = plant(run_dir, tmp_path / "outside", "summary.json")
    RunSummary(exit_status=0).write(run_dir)
    assert not (run_dir / "summary.json").is_symlink()
    assert '"exit_status": 0' in (run_dir / "summary.json").read_text()
    assert not os.path.lexists(targets["summary.json"])
    assert [p.name for p in run_dir.iterdir()] == ["summary.json"]   # no temporary left


def test_a_snapshot_replaces_a_symlink_at_its_name_and_is_not_stopped_by_a_stale_part(
        tmp_path):
    """A `.NAME.part` left by an earlier run, or planted (a symlink), is not the temporary
    name this run writes under: the snapshot is written, and what was there left alone."""
    run_dir = tmp_path / "run"
    targets = plant(run_dir, tmp_path / "outside", "a.npy", ".b.npy.part")
    (run_dir / ".c.npy.part").write_bytes(b"stale")
    array = np.arange(6, dtype=np.float32)
    save_whole(run_dir / "a.npy", lambda f: save_npy(f, array))
    assert not (run_dir / "a.npy").is_symlink()
    np.testing.assert_array_equal(np.load(run_dir / "a.npy"), array)
    for name in ("b.npy", "c.npy"):
        save_whole(run_dir / name, lambda f: save_npy(f, array))
        np.testing.assert_array_equal(np.load(run_dir / name), array)
    assert (run_dir / ".b.npy.part").is_symlink()     # not ours: left alone
    assert (run_dir / ".c.npy.part").read_bytes() == b"stale"
    assert not [t for t in targets.values() if os.path.lexists(t)]
    assert sorted(p.name for p in run_dir.iterdir()) == [".b.npy.part", ".c.npy.part",
                                                         "a.npy", "b.npy", "c.npy"]


@pytest.mark.parametrize("stale", ["file", "symlink", "dangling"])
def test_a_stale_summary_part_neither_loses_nor_redirects_the_summary(tmp_path, stale):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    part, outside = run_dir / ".summary.json.part", tmp_path / "outside.json"
    if stale == "file":
        part.write_text("stale")
    elif stale == "symlink":
        outside.write_text("theirs")
        part.symlink_to(outside)
    else:
        part.symlink_to(outside)
    RunSummary(exit_status=3).write(run_dir)
    assert json.loads((run_dir / "summary.json").read_text())["exit_status"] == 3
    assert os.path.lexists(part)                     # not ours: left as it was
    assert (outside.read_text() == "theirs") if stale == "symlink" else not outside.exists()
    assert sorted(p.name for p in run_dir.iterdir()) == [".summary.json.part", "summary.json"]


def test_temporary_names_are_this_process_own(tmp_path):
    """The streamed snapshot's temporary name holds a token of this process: stable for a
    path, and not the bare `.NAME.part` an earlier run (or anyone) could leave there."""
    name = runfiles.temporary_name(tmp_path / "x.npy")
    assert name == runfiles.temporary_name(tmp_path / "x.npy")
    assert name.name.startswith(".x.npy.") and name.name.endswith(".part")
    assert name.name != ".x.npy.part" and str(os.getpid()) in name.name


def test_a_streamed_snapshot_target_is_never_opened_through_a_symlink(tmp_path):
    run_dir = tmp_path / "run"
    targets = plant(run_dir, tmp_path / "outside", ".c.npy.part")
    with pytest.raises(FileExistsError):
        new_npy_memmap(run_dir / ".c.npy.part", np.dtype(np.float32), (4, 4))
    assert not os.path.lexists(targets[".c.npy.part"])
    target = new_npy_memmap(run_dir / ".d.npy.part", np.dtype(np.uint16), (3, 5))
    target[...] = 7
    target.flush()   # type: ignore[attr-defined]
    loaded = np.load(run_dir / ".d.npy.part")
    assert loaded.dtype == np.uint16 and loaded.shape == (3, 5) and (loaded == 7).all()


def test_captures_are_never_appended_through_a_symlink(tmp_path, capsys):
    run_dir = tmp_path / "run"
    targets = plant(run_dir, tmp_path / "outside", "captures.jsonl")
    writer = CaptureWriter(run_dir)
    record = CaptureRecord(pid=1, launch=1, occurrence=1, kernel="k", mangled="k",
                           grid=[1, 1, 1], block=[1, 1, 1], smem=0, api="cuLaunchKernel",
                           device=0, stream="0x0", image=None, image_format="unknown",
                           params="", layout=None, pointers=[], buffers=[], problems=[])
    writer.append(record)
    writer.append(record)
    assert writer.count == 0
    assert not os.path.lexists(targets["captures.jsonl"])
    assert capsys.readouterr().err.count("captures.jsonl stopped") == 1
    fresh = CaptureWriter(tmp_path)
    fresh.append(record)
    fresh.append(record)
    assert fresh.count == 2 and len((tmp_path / "captures.jsonl").read_text().splitlines()) == 2


def test_module_images_stay_in_a_real_modules_folder(tmp_path):
    from cudump.wire import protocol as p

    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    run_dir.mkdir()
    outside.mkdir()
    (run_dir / "modules").symlink_to(outside, target_is_directory=True)
    store = ImageStore(run_dir)
    image = b"\x7fELF" + bytes(60)
    head = p.IMAGE.pack(module=1, id=1, format=p.IMAGE_FORMATS.index("cubin"),
                        size=len(image), offset=0)
    with pytest.raises(NotADirectoryError):
        store.receive(7, head + image)
    assert list(outside.iterdir()) == []
    (run_dir / "modules").unlink()
    store.receive(7, head + image)
    store.receive(7, head)                   # binds function 1 to the module
    saved = store.of(7, 1)
    assert saved.file is not None and (run_dir / saved.file).read_bytes() == image
    assert not [q for q in (run_dir / "modules").iterdir() if q.name.endswith(".part")]


def test_make_dir_refuses_a_symlink_to_a_folder(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(NotADirectoryError):
        runfiles.make_dir(tmp_path / "link")
    assert runfiles.make_dir(tmp_path / "new").is_dir()
    assert runfiles.make_dir(tmp_path / "new").is_dir()   # a real folder already there


def test_a_name_in_the_way_fails_that_snapshot_only(tmp_path, capsys, monkeypatch):
    """Something at every temporary name one snapshot could take: that snapshot has an
    error record, the next one is written, and writing is not stopped as it is for a full disk."""
    from cudump.policy.snapshot.coordinator import Snapshots
    from cudump.policy.snapshot.writer import WriteJob
    from cudump.rundir.manifest import SnapshotRecord

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    create_file = runfiles.create_file

    def in_the_way(path, mode="wb", encoding=None):    # every temporary name of a.npy taken
        if Path(path).name.startswith(".a.npy."):
            raise FileExistsError(17, "File exists", str(path))
        return create_file(path, mode, encoding)

    monkeypatch.setattr(runfiles, "create_file", in_the_way)
    snapshots = Snapshots([], run_dir, None, ManifestWriter(run_dir))

    def record(name: str) -> SnapshotRecord:
        return SnapshotRecord(kernel="k", mangled="k", launch=1, occurrence=1, pid=1,
                              grid=[1, 1, 1], block=[1, 1, 1], stream="0x0", arg=0, type=None,
                              phase="after", address="0x0", dtype="float32", shape=[4],
                              file=name)

    array = np.arange(4, dtype=np.float32)
    for name in ("a.npy", "b.npy"):
        snapshots.writer.put(WriteJob(record(name), array, frozenset({"npy"}), None))
    snapshots.close()
    snapshots.state.manifest.close()
    lines = [json.loads(x) for x in (run_dir / "manifest.jsonl").read_text().splitlines()]
    assert [(r["file"], r["status"]) for r in lines] == [(None, "error"), ("b.npy", "ok")]
    assert "in the way" in lines[0]["reason"]
    assert snapshots.writer.disk_failed is None and not snapshots.state.stopped
    np.testing.assert_array_equal(np.load(run_dir / "b.npy"), array)
    assert "writing snapshots stopped" not in capsys.readouterr().err


def test_a_line_file_that_cannot_be_written_stops_and_says_so_once(tmp_path):
    """A line file (captures.jsonl, outputs.jsonl) whose file was swapped for a symlink: the
    write is refused, never followed, the file stops, and why is said once however many
    lines come after."""
    from cudump.rundir.files import LineAppender

    said: list[str] = []
    lines = LineAppender(tmp_path / "outputs.jsonl", said.append)
    assert lines.append(b"one\n")
    (tmp_path / "outputs.jsonl").unlink()
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "outputs.jsonl").symlink_to(tmp_path / "elsewhere")
    assert not lines.append(b"two\n")
    assert not lines.append(b"three\n")
    assert (tmp_path / "elsewhere").read_text() == "" and lines.count == 1
    assert len(said) == 1 and said[0].startswith("outputs.jsonl stopped: "), said
