"""The snapshots of a NaN producer held on the GPU are made by the kernel that holds the
stream (the slot's mailbox, GATE_COPY), not on another stream: on a GPU, copies on another
stream can queue behind the held kernel in the hardware queues they share, and were then
let go. The stand-in's FAKECUDA_SHARED_QUEUE=1 makes work on every stream wait for a held
one, as such a queue does; its "device" makes the mailbox's copies as the kernel would."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from records import manifest

INDEX = 37
LET_GO = "so cudump let the stream go"


def stats(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


@pytest.mark.parametrize("staging", [None, "4096"], ids=["whole", "pieces"])
def test_a_producers_snapshots_are_made_by_the_hold_itself(fake, cudump_run, tmp_path,
                                                           staging):
    """nans 6, launch 5 leaves a NaN: its three buffers are snapshotted while the stream is
    held, though nothing on another stream can run meanwhile; in one go, or (a staging
    area of one buffer) piece by piece, each handed over before the next."""
    counted = tmp_path / "stats"
    ran = cudump_run([str(fake.programs["nans"]), "6", str(INDEX), "5"], "--check-nan",
                     *(("--staging", staging) if staging else ()),
                     env_extra={"FAKECUDA_SHARED_QUEUE": "1", "FAKECUDA_STATS": str(counted)})
    assert ran.returncode == 0, ran.stderr
    assert "launches vecAdd=6" in ran.stdout
    records = manifest(ran.run_dir)
    assert not [r for r in records if LET_GO in (r.get("reason") or "")], records
    assert LET_GO not in ran.stderr
    snaps = {r["arg"]: r for r in records if r.get("nan_producer") and r.get("file")}
    assert sorted(snaps) == [0, 1, 2] and all(r["launch"] == 5 for r in snaps.values()), (
        ran.stderr, records)
    c = np.load(ran.run_dir / snaps[2]["file"])
    assert np.isnan(c[INDEX]) and np.isfinite(np.delete(c, INDEX)).all()
    assert stats(counted)["mail_copies"] >= 3


def test_a_hold_the_kernel_gave_up_loses_its_copies_with_the_reason(fake, cudump_run):
    """The kernel opens a gate nobody began to serve by itself (here: at once): nothing is
    asked of a mailbox whose kernel is gone, and the snapshots are recorded as not taken."""
    ran = cudump_run([str(fake.programs["nans"]), "3", str(INDEX), "1"], "--check-nan",
                     env_extra={"FAKECUDA_TOOLS_HOLD_NS": "0", "FAKECUDA_SHARED_QUEUE": "1"})
    assert ran.returncode == 0, ran.stderr
    lost = [r for r in manifest(ran.run_dir) if r.get("nan_producer") and "nonfinite" not in r]
    assert sorted(r["arg"] for r in lost) == [0, 1, 2]
    assert all(r["status"] == "error" and LET_GO in r["reason"] for r in lost)


@pytest.mark.parametrize("how", ["release", "ignore"])
def test_a_mailbox_the_kernel_does_not_answer_lets_the_stream_go(fake, cudump_run, how):
    """The kernel gives up while served (release: as after TOOL_SERVE_NS), or never answers
    (ignore: the shim stops waiting after its bound): the copies are reported failed with
    the reason they always had, the program goes on, and nothing is copied on another
    stream (the shared queue would hold such a copy until the hold ends)."""
    ran = cudump_run([str(fake.programs["nans"]), "6", str(INDEX), "5"], "--check-nan",
                     env_extra={"FAKECUDA_MAIL": how, "FAKECUDA_SHARED_QUEUE": "1"})
    assert ran.returncode == 0, ran.stderr
    assert "launches vecAdd=6" in ran.stdout
    records = manifest(ran.run_dir)
    lost = [r for r in records if r.get("nan_producer") and "nonfinite" not in r]
    assert sorted(r["arg"] for r in lost) == [0, 1, 2], records
    assert all(r["status"] == "error" and r["launch"] == 5 and LET_GO in r["reason"]
               and "did not make the copy" in r["reason"] for r in lost), lost
