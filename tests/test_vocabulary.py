"""One vocabulary across the subcommands: --kernel PATTERN, --launch [PID:]N, RUN, --force for
every output path that exists, bisect's --batch-size, and the messages they share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from clirun import run_cli

from cudump.cli import _parser
from cudump.commands.bisect import BisectCommand
from cudump.commands.diff import DiffCommand
from cudump.commands.extract import ExtractCommand
from cudump.commands.ls import LsCommand
from cudump.commands.replay import ReplayCommand
from cudump.commands.show import ShowCommand
from cudump.commands.stats import StatsCommand
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord

ROOT = Path(__file__).resolve().parent.parent
PAINT = "cam::paint(float*, int)"


def make_run(root: Path, kernel: str = PAINT, pid: int = 42) -> Path:
    """Launches 1 and 2 of `kernel` in process `pid`: arg 0 before and after (8 snapshots
    would be too many to read; these are 4)."""
    root.mkdir()
    writer = ManifestWriter(root)
    for launch in (1, 2):
        for phase in ("before", "after"):
            name = f"l{launch}_{phase}.npy"
            np.save(root / name, np.arange(12, dtype=np.float32).reshape(3, 4) * launch)
            writer.append(SnapshotRecord(
                kernel=kernel, mangled="_Z5paint", launch=launch, occurrence=launch, pid=pid,
                grid=[1, 1, 1], block=[32, 1, 1], stream="0x0", arg=0, type="float*",
                phase=phase, address="0x7000", dtype="float32", shape=[3, 4], file=name))
    writer.close()
    return root


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run")


@pytest.fixture
def offline(fake, tmp_path):
    """A cudump subcommand in a process of its own, with the stand-in as libcuda.so.1."""

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        env = fake.env()
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run([sys.executable, "-m", "cudump", *argv], env=env,
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)

    return run


# ---- 1. kernels: --kernel PATTERN everywhere; the old positional with a note ---------------

def test_show_takes_kernel_as_an_option_and_the_old_positional_with_a_note(run_dir, capsys):
    code, out, err = run_cli(ShowCommand(), [str(run_dir), "--kernel", "paint", "--launch", "1",
                                             "--phase", "after"], capsys)
    assert code == 0, err
    assert "snapshot #1: cam::paint" in out and err == ""
    code, out, err = run_cli(ShowCommand(), [str(run_dir), "paint", "--launch", "1",
                                             "--phase", "after"], capsys)
    assert code == 0 and "snapshot #1: cam::paint" in out
    assert err == ("cudump show: note: a kernel pattern as a positional argument is deprecated "
                   "and will be removed; write --kernel 'paint'\n")
    code, _, err = run_cli(ShowCommand(), [str(run_dir), "paint", "--kernel", "other"], capsys)
    assert code == 2 and "a kernel pattern twice" in err


def test_extract_and_replay_take_kernel_as_an_option(fake, cudump_run, offline, tmp_path):
    ran = cudump_run([str(fake.programs["linked"])], "--capture-launch", "vecAdd")
    assert ran.returncode == 0, ran.stderr
    done = offline("extract", str(ran.run_dir), "--kernel", "vecAdd", str(tmp_path / "x"))
    assert done.returncode == 0, done.stderr
    assert "deprecated" not in done.stderr
    # 6. extract speaks as extract, never as replay.
    assert done.stdout.startswith("extract: "), done.stdout
    assert "replay:" not in done.stdout
    assert "captured launches match" in done.stdout.splitlines()[0]
    old = offline("extract", str(ran.run_dir), "vecAdd", str(tmp_path / "y"))
    assert old.returncode == 0, old.stderr
    assert "write --kernel 'vecAdd'" in old.stderr
    usage = _parser(ReplayCommand()).format_help()
    assert "--kernel PATTERN" in usage


# ---- 2. launches: --launch [PID:]N in ls, show, replay and extract ----------------------------

def test_launch_is_n_or_pid_colon_n_everywhere(run_dir, capsys):
    code, out, _ = run_cli(LsCommand(), [str(run_dir), "--launch", "2"], capsys)
    assert code == 0 and out.splitlines()[-1] == "2 of 4 records: 2 snapshots"
    code, out, _ = run_cli(LsCommand(), [str(run_dir), "--launch", "42:2"], capsys)
    assert code == 0 and out.splitlines()[-1] == "2 of 4 records: 2 snapshots"
    code, out, _ = run_cli(LsCommand(), [str(run_dir), "--launch", "41:2"], capsys)
    assert code == 0 and out.splitlines()[-1] == "0 of 4 records: 0 snapshots"
    code, out, _ = run_cli(ShowCommand(), [str(run_dir), "--launch", "42:2", "--phase",
                                           "before"], capsys)
    assert code == 0 and "snapshot #2:" in out
    code, _, err = run_cli(ShowCommand(), [str(run_dir), "--launch", "42:2", "--pid", "7"],
                           capsys)
    assert code == 2 and "name two processes" in err
    for command in (ShowCommand(), ReplayCommand(), ExtractCommand(), LsCommand()):
        assert "--launch [PID:]N" in _parser(command).format_help()


# ---- 3. the run directory is RUN in every usage line ------------------------------------------

@pytest.mark.parametrize("command", [LsCommand(), StatsCommand(), ShowCommand(),
                                     ReplayCommand(), ExtractCommand()],
                         ids=lambda c: c.name)
def test_the_run_directory_is_run_in_every_usage(command) -> None:
    usage = _parser(command).format_usage()
    assert f"cudump {command.name}" in usage
    assert " RUN" in usage and " run" not in usage and "target" not in usage, usage


# ---- 4. an output path that exists is refused unless --force ------------------------------

def test_show_png_refuses_an_existing_file_unless_force(run_dir, tmp_path, capsys):
    png = tmp_path / "old.png"
    png.write_bytes(b"keep me")
    args = [str(run_dir), "--index", "0", "--png", str(png)]
    code, out, err = run_cli(ShowCommand(), args, capsys)
    assert code == 2 and "already exists" in err and "--force" in err
    assert out == "" and png.read_bytes() == b"keep me"
    code, out, err = run_cli(ShowCommand(), [*args, "--force"], capsys)
    assert code == 0, err
    assert png.read_bytes().startswith(b"\x89PNG")


def test_diff_out_refuses_existing_pictures_unless_force(run_dir, tmp_path, capsys):
    pictures = tmp_path / "pics"
    pictures.mkdir()
    (pictures / "heatmap.png").write_bytes(b"keep me")
    files = [str(run_dir / "l1_after.npy"), str(run_dir / "l2_after.npy")]
    code, _, err = run_cli(DiffCommand(), [*files, "--out", str(pictures)], capsys)
    assert code == 2 and "heatmap.png: already exists" in err
    assert (pictures / "heatmap.png").read_bytes() == b"keep me"
    code, _, err = run_cli(DiffCommand(), [*files, "--out", str(pictures), "--force"], capsys)
    assert code == 1, err           # they differ: written
    assert (pictures / "heatmap.png").read_bytes().startswith(b"\x89PNG")


def test_diff_html_refuses_an_existing_report_unless_force(tmp_path, capsys):
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b")
    report = tmp_path / "report"
    report.mkdir()
    (report / "index.html").write_text("keep me")
    code, out, err = run_cli(DiffCommand(), [str(a), str(b), "--html", str(report)], capsys)
    assert code == 2 and "already exists" in err and "--force" in err and out == ""
    assert (report / "index.html").read_text() == "keep me"
    code, _, err = run_cli(DiffCommand(), [str(a), str(b), "--html", str(report), "--force"],
                           capsys)
    assert code == 0, err
    assert "<html" in (report / "index.html").read_text().lower()


def test_timeline_refuses_an_existing_file_unless_force(fake, cudump_run, tmp_path):
    timeline = tmp_path / "t.json"
    timeline.write_text("keep me")
    ran = cudump_run([str(fake.programs["linked"])], "--timeline", str(timeline))
    assert ran.returncode == 2
    assert "--timeline" in ran.stderr and "already exists" in ran.stderr
    assert timeline.read_text() == "keep me"
    ran = cudump_run([str(fake.programs["linked"])], "--timeline", str(timeline), "--force",
                     run_dir=tmp_path / "again")
    assert ran.returncode == 0, ran.stderr
    assert "traceEvents" in json.loads(timeline.read_text())


# ---- 5. bisect's batch is --batch-size (--batch K still taken, with a note) ---------------

def test_bisect_batch_size_and_the_old_spelling(capsys):
    code, _, err = run_cli(BisectCommand(), ["--batch-size", "0", "--rtol", "1e-3"], capsys)
    assert code == 2 and "--batch-size must be 1 or more, not 0" in err
    code, _, err = run_cli(BisectCommand(), ["--batch", "0", "--rtol", "1e-3"], capsys)
    assert code == 2
    assert "cudump bisect: note: --batch K is deprecated" in err
    assert "--batch-size must be 1 or more, not 0" in err
    assert "--batch-size K" in _parser(BisectCommand()).format_help()


# ---- 6. messages ----------------------------------------------------------------------------

def test_ls_stats_show_and_diff_say_not_a_run_in_one_wording(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    said = set()
    for command, argv in ((LsCommand(), [str(empty)]), (StatsCommand(), [str(empty)]),
                          (ShowCommand(), [str(empty)]), (DiffCommand(), [str(empty)] * 2)):
        code, _, err = run_cli(command, argv, capsys)
        assert code == 2
        said.add(err)
    assert said == {f"cudump: error: {empty} is not a cudump run directory (none of "
                    "summary.json, trace.jsonl, manifest.jsonl)\n"}


def test_show_index_out_of_range_names_the_range(run_dir, capsys):
    code, _, err = run_cli(ShowCommand(), [str(run_dir), "--index", "99"], capsys)
    assert code == 2
    assert f"--index 99: {run_dir} has snapshots #0 to #3" in err


def test_diff_of_unrelated_runs_says_they_have_nothing_in_common(tmp_path, capsys):
    a = make_run(tmp_path / "a", "cam::paint(float*, int)")
    b = make_run(tmp_path / "b", "net::conv(float*, int)")
    code, out, _ = run_cli(DiffCommand(), [str(a), str(b)], capsys)
    assert code == 1
    assert out.splitlines() == [
        f"A: {a}  B: {b}: nothing in common: no kernel in common; A has 4 snapshots of 1 "
        "kernel, B 4 snapshots of 1 kernel (`cudump stats` lists each run's)"]


@pytest.mark.parametrize("bad", [["--png", "/no/such/dir/x.png"], ["--png", "x.png",
                                                                     "--channels", "q"]])
def test_show_checks_its_options_before_printing_statistics(run_dir, tmp_path, capsys, bad,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(ShowCommand(), [str(run_dir), "--index", "0", *bad], capsys)
    assert code == 2 and err.startswith("cudump: error: ")
    assert out == ""


def test_a_run_no_process_connected_to_says_so(cudump_run):
    ran = cudump_run([sys.executable, "-c", "pass"])
    assert ran.returncode == 0, ran.stderr
    last = ran.stderr.splitlines()[-1]
    assert "ran but no process connected to the controller" in last
    assert "never initialised CUDA" in last
