"""Repeated launches' digests written in bulk: digests.bin and its `digest_batch` lines.

Written by ManifestWriter.append_digests, read by read_manifest; checked against the
per-launch lines earlier versions wrote (still read), against bad or cut files, and against
a write that fails halfway. The drain that makes the batches is exercised end to end by
test_repeat.py and test_digest.py on the stand-in driver.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from records import group_line

from cudump.cli import main
from cudump.errors import SnapshotError
from cudump.policy.snapshot.plan_columns import PlanColumns
from cudump.policy.snapshot.templates import RepeatCopy, RepeatTemplate
from cudump.rundir.digest_batches import DIGEST, HAS_SUM, LAUNCH, DigestBatch
from cudump.rundir.layout import DIGESTS_FILE, MANIFEST_FILE
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord, read_manifest, template_line
from cudump.rundir.watch import RunWatch
from cudump.wire import protocol as p


def record(arg: int, phase: str = "after", sums: bool = True) -> SnapshotRecord:
    extra = {"digest": "0" * 16, "bytes": 64, "row_bytes": 64, "rows": 1}
    if sums:
        extra |= {"sum_of": "float32", "abs_sum": 0.0}
    return SnapshotRecord(kernel="void k(float*, float*)", mangled="_Z1kPfS_", launch=1,
                          occurrence=1, pid=9, grid=[1, 1, 1], block=[32, 1, 1],
                          stream="0x0", arg=arg, type="float*", phase=phase,
                          address=f"0x{0x1000 * (arg + 1):x}", dtype="float32", shape=[16],
                          file=None, device=0, extra=extra)


TEMPLATE = [record(0, "before"), record(1, sums=False), record(1)]


def batch(rows: list[tuple[int, int, int, int]], digests: list[tuple[int, float, int, int]]
          ) -> DigestBatch:
    """Launches (launch, occurrence, stream, device) of plan 9.4, and digests (value, sum,
    row, copy) with a sum where the template's record has one."""
    # Field by field, so that the 4 bytes of padding stay zero: the bytes name the
    # parametrized tests, and the names must be the same in every process that collects
    # them (pytest-xdist's workers).
    launches = np.zeros(len(rows), LAUNCH)
    launches["launch"], launches["occurrence"], launches["stream"], launches["device"] = (
        np.array(rows, dtype=np.int64).T)
    launches["pid"], launches["plan"] = 9, 4
    launches["grid"], launches["block"] = (2, 1, 1), (32, 1, 1)
    records = np.zeros(len(digests), DIGEST)
    for i, (value, total, row, copy) in enumerate(digests):
        has = "abs_sum" in TEMPLATE[copy].extra
        records[i] = (value, total, row, copy, HAS_SUM if has else 0)
    return DigestBatch(launches, records)


GOOD = batch([(5, 2, 0x7f00, 0), (6, 3, 0x7f00, -1)],
             [(0xa, 1.5, 0, 0), (0xb, 0.0, 0, 1), (0xc, float("nan"), 0, 2),
              (0xd, 2.5, 1, 0), (0xe, 0.0, 1, 1), (0xf, float("inf"), 1, 2)])


def written(run: Path, *batches: DigestBatch) -> Path:
    writer = ManifestWriter(run)
    writer.append(TEMPLATE[0])
    lines = [template_line("9.4", TEMPLATE)]
    for one in batches:
        writer.append_digests(lines, one)
        lines = []
    writer.append(record(0))
    writer.close()
    return run


def as_json(records: list[SnapshotRecord]) -> list[dict]:
    return [json.loads(r.to_json()) for r in records]


def test_a_batch_reads_back_as_the_lines_of_earlier_versions_did(tmp_path: Path) -> None:
    """The same launches written as a batch, and as one `digests_of` line each: the same
    records, in the same place among the others."""
    run = written(tmp_path / "batch", GOOD)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / MANIFEST_FILE).write_text("\n".join([
        TEMPLATE[0].to_json(), template_line("9.4", TEMPLATE),
        group_line("9.4", 5, 2, [2, 1, 1], [32, 1, 1], 0x7f00, 0,
                   [f"{v:016x}" for v in (0xa, 0xb, 0xc)], [1.5, None, "nan"]),
        group_line("9.4", 6, 3, [2, 1, 1], [32, 1, 1], 0x7f00, -1,
                   [f"{v:016x}" for v in (0xd, 0xe, 0xf)], [2.5, None, "inf"]),
        record(0).to_json()]) + "\n")
    got = as_json(read_manifest(run))
    assert got == as_json(read_manifest(earlier))
    assert [(r["launch"], r["arg"], r["phase"], r["digest"][-1], r.get("abs_sum"), r["device"])
            for r in got[1:-1]] == [
        (5, 0, "before", "a", 1.5, 0), (5, 1, "after", "b", None, 0),
        (5, 1, "after", "c", "nan", 0), (6, 0, "before", "d", 2.5, None),
        (6, 1, "after", "e", None, None), (6, 1, "after", "f", "inf", None)]
    assert got[0]["launch"] == 1 and got[-1]["launch"] == 1


def test_batches_follow_one_another_in_the_file(tmp_path: Path) -> None:
    later = batch([(9, 4, 0, 0)], [(0x1, 1.0, 0, 0)])
    run = written(tmp_path / "run", GOOD, later)
    lines = [json.loads(x) for x in (run / MANIFEST_FILE).read_text().splitlines()]
    batches = [x for x in lines if "digest_batch" in x]
    assert [(b["offset"], b["launches"], b["digests"], b["launch"]) for b in batches] == [
        (0, 2, 6, 6), (GOOD.nbytes, 1, 1, 9)]
    assert (run / DIGESTS_FILE).stat().st_size == GOOD.nbytes + later.nbytes
    assert [r.launch for r in read_manifest(run)] == [1, 5, 5, 5, 6, 6, 6, 9, 1]


def batch_line(**changes: object) -> str:
    data: dict[str, object] = {"digest_batch": DIGESTS_FILE, "offset": 0, "launches": 2,
                               "digests": 6, "launch": 6}
    data.update(changes)
    return json.dumps(data)


def copy_of(records: np.ndarray) -> np.ndarray:
    """A writable copy, padding and all (ndarray.copy() of a record type with padding leaves
    the padding's bytes undefined)."""
    return np.frombuffer(bytearray(records.tobytes()), records.dtype)


def rows_of(value: int) -> bytes:
    bad = copy_of(GOOD.digests)
    bad["row"][3] = value
    return GOOD.launches.tobytes() + bad.tobytes()


def copies_of(value: int) -> bytes:
    bad = copy_of(GOOD.digests)
    bad["copy"][1] = value
    return GOOD.launches.tobytes() + bad.tobytes()


def plans_of(value: int) -> bytes:
    bad = copy_of(GOOD.launches)
    bad["plan"][1] = value
    return bad.tobytes() + GOOD.digests.tobytes()


@pytest.mark.parametrize("line,data,problem", [
    (batch_line(), None, f"a batch of digests is in {DIGESTS_FILE}, which the run directory "
                         "lacks"),
    (batch_line(), GOOD.to_bytes()[:-1], f"{DIGESTS_FILE} ends before the batch does"),
    (batch_line(offset=8), GOOD.to_bytes(), f"{DIGESTS_FILE} ends before the batch does"),
    (batch_line(digests=7), GOOD.to_bytes(), f"{DIGESTS_FILE} ends before the batch does"),
    (batch_line(offset=-1), GOOD.to_bytes(), "field 'offset' should be a whole number"),
    (batch_line(launches="2"), GOOD.to_bytes(), "field 'launches' should be a whole number"),
    (batch_line(digests=True), GOOD.to_bytes(), "field 'digests' should be a whole number"),
    (batch_line(digest_batch="x.bin"), GOOD.to_bytes(),
     f"field 'digest_batch' should be \"{DIGESTS_FILE}\""),
    (batch_line(), rows_of(2), f"a digest in {DIGESTS_FILE} names a launch its batch lacks"),
    (batch_line(), copies_of(3), "a digest of the batch is number 4 of a template of 3"),
    (batch_line(), plans_of(5), "a launch of the batch names no template of an earlier line "
                                "(9.5)"),
])
def test_bad_batches_name_the_manifest_line(tmp_path: Path, capsys, line: str,
                                            data: bytes | None, problem: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / MANIFEST_FILE).write_text(
        "\n".join([TEMPLATE[0].to_json(), template_line("9.4", TEMPLATE), line]) + "\n")
    if data is not None:
        (run / DIGESTS_FILE).write_bytes(data)
    with pytest.raises(SnapshotError) as info:
        read_manifest(run)
    assert str(info.value) == f"{run / MANIFEST_FILE}:3: {problem}"
    code = main(["ls", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{MANIFEST_FILE}:3: " in err, err


def test_a_write_that_fails_leaves_neither_file_with_any_of_the_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while the batch goes to digests.bin, then while its line goes to the
    manifest: each time the run directory reads as if the batch had never come."""
    writer = ManifestWriter(tmp_path)
    writer.append_digests([template_line("9.4", TEMPLATE)], GOOD)
    real_write = os.write
    size = (tmp_path / DIGESTS_FILE).stat().st_size
    for fail_on in (DIGESTS_FILE, MANIFEST_FILE):
        def short(fd: int, data: bytes, fail_on: str = fail_on) -> int:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(fail_on):
                return real_write(fd, bytes(data)[:len(data) // 2])
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", short)
        with pytest.raises(OSError, match="no space left"):
            writer.append_digests([], batch([(7, 3, 0, 0)], [(0x1, 1.0, 0, 0)]))
        monkeypatch.setattr(os, "write", real_write)
        assert (tmp_path / DIGESTS_FILE).stat().st_size == size
        assert [r.launch for r in read_manifest(tmp_path)] == [5, 5, 5, 6, 6, 6]
    writer.append_digests([], batch([(8, 3, 0, 0)], [(0x1, 1.0, 0, 0)]))
    writer.close()
    assert [r.launch for r in read_manifest(tmp_path)] == [5, 5, 5, 6, 6, 6, 8]


def test_a_growing_manifest_tells_the_last_launch_of_a_batch(tmp_path: Path) -> None:
    watch = RunWatch(tmp_path)
    written(tmp_path, GOOD)
    assert watch.poll().launch == 1      # the record after the batch
    lines = (tmp_path / MANIFEST_FILE).read_text().splitlines()
    (tmp_path / MANIFEST_FILE).write_text("\n".join(lines[:-1]) + "\n")
    assert RunWatch(tmp_path).poll().launch == 6


def template(kinds: list[tuple[p.ToolMode, str, bool]]) -> RepeatTemplate:
    return RepeatTemplate([RepeatCopy(tool, phase, sum_of=p.ToolMode.SCAN_F32 if has else None)
                           for tool, phase, has in kinds], func=None, first=None)  # type: ignore[arg-type]


def test_plan_columns_widen_and_give_rows_back_when_a_plan_goes() -> None:
    digest, scan = p.ToolMode.DIGEST, p.ToolMode.SCAN_F32
    narrow = template([(digest, "before", True), (scan, "after", False)])
    wide = template([(scan, "after", False), (digest, "before", False),
                     (digest, "after", True), (scan, "before", False)])
    table = PlanColumns()
    templates = {3: narrow, 8: wide}
    rows = table.rows(np.array([8, 3, 3, 99, 8], np.uint32), templates)
    assert rows[0] == rows[4] and rows[1] == rows[2] and rows[3] == 0 and len(set(rows)) == 3
    assert table.width == 4
    assert table.digest[rows[0]].tolist() == [False, True, True, False]
    assert table.rank[rows[0]].tolist()[1:3] == [0, 1]
    assert table.has_sum[rows[0]].tolist() == [False, False, True, False]
    assert table.after[rows[1]].tolist() == [False, True, False, False]
    assert table.scans_after[rows].tolist() == [True, True, True, False, True]
    assert table.template(int(rows[1])) is narrow and table.plan(int(rows[0])) == 8
    del templates[3]                     # the controller let plan 3 go
    again = table.rows(np.array([3, 8], np.uint32), templates)
    assert again.tolist() == [0, rows[0]]
    templates[12] = narrow               # its row is free for the next plan
    assert table.rows(np.array([12], np.uint32), templates).tolist() == [rows[1]]
    assert table.digest[rows[1]].tolist() == [True, False, False, False]


def test_rows_of_plans_let_go_are_swept_though_never_seen_again() -> None:
    """A kernel over ever new buffers makes a plan a launch, and the controller keeps only
    the latest: the table gives the rows of the others back, and holds no template of them."""
    table = PlanColumns()
    templates: dict[int, RepeatTemplate] = {}
    digest = p.ToolMode.DIGEST
    for plan in range(1, 20001):
        templates[plan] = template([(digest, "after", True)])
        templates.pop(plan - 8, None)                   # eight kept
        assert table.rows(np.array([plan], np.uint32), templates)[0] > 0
    assert table.held <= 2 * len(templates) + 1024 + 1
    assert len(table.ncopies) <= 4096
