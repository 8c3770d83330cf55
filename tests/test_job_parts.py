"""A job's parts without a program: blobs (stored once, names that lead nowhere else),
triggers (one per node, the first kept; a watch that sees another node's), a job's records
read where their bytes are."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from cudump.analysis.job_runs import one_run, open_run
from cudump.errors import SnapshotError, UsageError
from cudump.rundir.blobs import BlobStore, blob_path
from cudump.rundir.job import claim_node
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord
from cudump.rundir.triggers import (
    Trigger,
    TriggerWatch,
    read_trigger,
    read_triggers,
    trigger_path,
    write_trigger,
)


def _npy(path: Path, data: np.ndarray) -> Path:
    np.save(path, data)
    return path


def test_equal_bytes_are_one_blob(tmp_path: Path) -> None:
    job = tmp_path / "job"
    a, b = claim_node(job, "a"), claim_node(job, "b")
    store = BlobStore(job)
    data = np.arange(16, dtype=np.float32)
    first = store.keep(_npy(a / "x.npy", data))
    second = store.keep(_npy(b / "y.npy", data))
    other = store.keep(_npy(b / "z.npy", data + 1))
    assert first == second != other
    assert not (a / "x.npy").exists() and not (b / "y.npy").exists()
    assert (store.tally.stored, store.tally.reused) == (2, 1)
    assert store.tally.bytes_saved == (job / first).stat().st_size
    assert np.array_equal(np.load(blob_path(a, first)), data)


@pytest.mark.parametrize("name", ["../../../etc/passwd", "blobs/ab/" + "a" * 64 + ".npy",
                                  "blobs/aa/" + "a" * 63 + ".npy", "/blobs/aa/x.npy", 7])
def test_a_blob_name_that_is_not_one_is_refused(tmp_path: Path, name: object) -> None:
    with pytest.raises(SnapshotError, match="not a blob's name"):
        blob_path(tmp_path / "job" / "nodes" / "a", name)


def _record(name: str, blob: str | None) -> SnapshotRecord:
    return SnapshotRecord(kernel="k(float*)", mangled="_Z1kPf", launch=1, occurrence=1, pid=7,
                          grid=[1, 1, 1], block=[1, 1, 1], stream="0x0", arg=0,
                          type="float*", phase="after", address="0x10", dtype="float32",
                          shape=[4], file=name, extra={} if blob is None else {"blob": blob})


def test_a_jobs_records_are_read_from_their_blobs(tmp_path: Path) -> None:
    job = tmp_path / "job"
    store = BlobStore(job)
    data = np.ones(4, dtype=np.float32)
    for node in ("a", "b"):
        run = claim_node(job, node)
        blob = store.keep(_npy(run / "k.npy", data))
        writer = ManifestWriter(run)
        writer.append(_record("k.npy", blob))
        writer.append(_record("gone.npy", "blobs/../../../../etc/passwd"))
        writer.close()
    run = open_run(job)
    assert [(s.job_node, s.index) for s in run.snapshots] == [("a", 0), ("a", 1), ("b", 0),
                                                                ("b", 1)]
    assert np.array_equal(run.snapshots[2].load(), data)
    assert not run.snapshots[1].ok and "not a blob's name" in str(run.snapshots[1].problem)
    assert [s.job_node for s in open_run(job, "b").snapshots] == ["b", "b"]
    with pytest.raises(UsageError, match="give --node NAME"):
        one_run(job, None, "stats --by layer")
    assert one_run(job, "a", "stats") == job / "nodes" / "a"


def _trigger(node: str, what: str = "NaN/Inf") -> Trigger:
    return Trigger(node, what, "NaN/Inf in arg 2", 1.5, rank=1, pid=9, launch=3, kernel="k")


def test_a_nodes_first_trigger_is_kept(tmp_path: Path) -> None:
    job = tmp_path / "job"
    assert write_trigger(job, _trigger("a")) == trigger_path(job, "a")
    assert write_trigger(job, _trigger("a", "exit status 1")) is None
    assert [t.what for t in read_triggers(job)] == ["NaN/Inf"]
    assert list((job / "triggers").iterdir()) == [trigger_path(job, "a")]   # no .part left
    bad = trigger_path(job, "b")
    bad.write_text(json.dumps({"node": "b", "what": 3}))
    assert read_trigger(bad) is None and len(read_triggers(job)) == 1


def test_the_watch_hands_over_another_nodes_new_trigger(tmp_path: Path) -> None:
    job = tmp_path / "job"
    write_trigger(job, _trigger("old"))            # there before the watch: not its concern
    seen: list[Trigger] = []
    arrived = threading.Event()

    def on(trigger: Trigger) -> None:
        seen.append(trigger)
        arrived.set()

    watch = TriggerWatch(job, "me", on, interval=0.01)
    watch.start()
    try:
        write_trigger(job, _trigger("me"))         # its own: not handed over
        write_trigger(job, _trigger("other"))
        assert arrived.wait(60)
    finally:
        watch.stop()
    assert [t.node for t in seen] == ["other"]
