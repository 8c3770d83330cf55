"""Writes that fail for want of room: a file size limit (`ulimit -f`, SIGXFSZ ignored, as
RLIMIT_FSIZE makes writes fail with EFBIG) stands in for a full disk. No partial file is
left in the run directory, each snapshot not written says why, naming the limit, and the
program runs on with its own output and exit status."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cudump.policy.snapshot.writer import new_npy_memmap
from cudump.rundir import files as runfiles

ROOT = Path(__file__).resolve().parent.parent
ZED_RULE = ROOT / "rules" / "zed.yaml"


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """This process may write no file larger than `limit` bytes, meanwhile."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def limited(limit: int):
    def start() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return start


def run_limited(fake, shim_lib: Path, tmp_path: Path, limit: int, program: list[str],
                *options: str) -> subprocess.CompletedProcess:
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib),
                        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "cudump", *options, "--out",
                           str(tmp_path / "run"), "--", *program], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, preexec_fn=limited(limit))


def test_a_streamed_snapshot_file_past_the_limit_is_not_left_half_made(tmp_path):
    target = tmp_path / ".a.npy.part"
    with file_size_limit(64 << 10):
        with pytest.raises(OSError) as raised:
            new_npy_memmap(target, np.dtype(np.float32), (1 << 20,))
        said = runfiles.write_error(raised.value)
    assert raised.value.errno == errno.EFBIG
    assert not os.path.lexists(target)          # not its header alone
    assert said == "File too large (the file size limit, ulimit -f, is 64.0 KiB)"


def test_what_a_write_left_under_this_run_temporary_names_is_removed(tmp_path):
    ours = runfiles.temporary_name(tmp_path / "a.npy")
    ours.write_bytes(b"half")
    theirs = tmp_path / ".b.npy.1-abc.part"
    theirs.write_bytes(b"another run's")
    assert runfiles.remove_own_temporaries(tmp_path) == [ours.name]
    assert not ours.exists() and theirs.exists()


def test_snapshots_past_the_file_size_limit_leave_no_partial_file(
        fake, shim_lib, bare_run, tmp_path):
    """Images of 2048x2048 (16 MiB a snapshot) under a limit of 12 MiB, which the process's
    shared file (its staging area and rings) fits under."""
    program = [str(fake.programs["zed"]), "1", "--size", "2048x2048"]
    done = run_limited(fake, shim_lib, tmp_path, 12 << 20, program, "--rule", str(ZED_RULE),
                       "--staging", "1M", "--write-behind", "0", "--scratch", "0")
    assert done.returncode == 0, done.stderr
    assert done.stdout == bare_run(program).stdout
    assert "Traceback" not in done.stderr
    run_dir = tmp_path / "run"
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".part")]
    records = [json.loads(line) for line in (run_dir / "manifest.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == "error" and r["file"] is None for r in records)
    assert all("(the file size limit, ulimit -f, is 12.0 MiB)" in r["reason"]
               for r in records), records[0]["reason"]
    assert "ulimit -f" in done.stderr
    assert json.loads((run_dir / "summary.json").read_text())["snapshot_errors"] == len(records)


def test_a_shared_file_past_the_limit_names_the_limit_not_the_staging_area(
        fake, shim_lib, bare_run, tmp_path):
    program = [str(fake.programs["roomy"]), "info", "2"]
    done = run_limited(fake, shim_lib, tmp_path, 100 << 10, program, "--staging", "16K",
                       "--rule", str(ZED_RULE))
    assert done.returncode == 0, done.stderr
    assert done.stdout == bare_run(program).stdout
    (line,) = [ln for ln in done.stderr.splitlines() if "shared memory" in ln]
    assert "the file size limit, ulimit -f, is 100.0 KiB" in line, line
    assert "smaller --staging" not in line, line


def test_a_manifest_that_takes_no_more_records_is_said_once_and_the_run_goes_on(
        tmp_path, capsys):
    """A failed snapshot's record past the file size limit: said once, and no error reaches
    the thread recording it (a connection's thread would drop its process silently; the
    writer's would stop, and the program wait on its queue)."""
    from cudump.policy.snapshot.failures import Failures
    from cudump.policy.snapshot.state import SnapshotState
    from cudump.rundir.manifest import ManifestWriter, SnapshotRecord

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    manifest = ManifestWriter(run_dir)
    failures = Failures(SnapshotState(run_dir, manifest))

    def record(launch: int) -> SnapshotRecord:
        return SnapshotRecord(kernel="k", mangled="k", launch=launch, occurrence=1, pid=1,
                              grid=[1, 1, 1], block=[1, 1, 1], stream="0x0", arg=0,
                              type=None, phase="after", address="0x0", dtype="float32",
                              shape=[4], file="x.npy")

    failures.fail(record(1), "no room")
    size = (run_dir / "manifest.jsonl").stat().st_size
    with file_size_limit(size + 10):
        failures.fail(record(2), "no room")     # not a whole line under the limit
        failures.fail(record(3), "no room")
    manifest.close()
    err = capsys.readouterr().err
    assert err.count("records are no longer written to manifest.jsonl") == 1, err
    assert (run_dir / "manifest.jsonl").stat().st_size == size     # whole lines only


FILL_TWO = """
import errno, sys
from pathlib import Path
import numpy as np
from cudump.policy.snapshot.writer import new_npy_memmap
disk = Path(sys.argv[1])
a = new_npy_memmap(disk / "a.npy", np.dtype(np.uint8), (700_000,))
a[:] = 1
a.flush()
try:
    b = new_npy_memmap(disk / "b.npy", np.dtype(np.uint8), (700_000,))
except OSError as err:
    assert err.errno == errno.ENOSPC, err
    print("b refused:", err.strerror, sorted(p.name for p in disk.iterdir()))
    sys.exit(0)
b[:] = 1      # a page the disk cannot back: SIGBUS
print("b filled")
"""


def test_a_streamed_snapshot_file_the_disk_cannot_hold_fails_without_sigbus(tmp_path):
    """Two mapped .npy files of 700 KB on a 1 MiB tmpfs: the second's pages cannot all be
    backed. Filling them would be SIGBUS, ending cudump; its blocks are reserved when it
    is made, so making it fails with ENOSPC (a failed snapshot) and leaves no file."""
    probe = tmp_path / "probe"
    probe.mkdir()
    if subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"],
                      capture_output=True, timeout=30).returncode != 0:
        pytest.skip("cannot mount a tmpfs in a user namespace here (unshare -rm)")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f"mount -t tmpfs -o size=1m tmpfs {disk} || exit 99; "
              f"exec {sys.executable} -c '{FILL_TWO}' {disk}")
    env = os.environ | {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout == "b refused: No space left on device ['a.npy']\n"
