"""`cudump bisect` on a pitched image pipeline: samples/zed_camera run twice, B with
ZED_GAIN_FROM=1:1.5, which changes one parameter of its second kernel (the gain of
device::FrP0k5607tPV) from frame 1 on. Each frame launches nv12_to_uyvy, then
FrP0k5607tPV, so frame F's are launches 2F + 1 and 2F + 2: bisect must name launch 4
(FrP0k5607tPV's occurrence 2), its left image (arg 2) after it ran, with the 3 launches
before it matched (nv12_to_uyvy's output never changes), and show its pixels differing
exactly where tests/zedref.py says the two gains give other bytes."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zedref
from gpurun import RULES, cudump_command, run, sample
from PIL import Image

from cudump.rundir.manifest import SnapshotRecord, read_manifest
from cudump.wire.digest import digest, digest_hex

pytestmark = pytest.mark.gpu

W, H = zedref.DEFAULT_WIDTH, zedref.DEFAULT_HEIGHT
FRAMES, FROM, GAIN = 3, 1, 1.5
CHANGE = f"ZED_GAIN_FROM={FROM}:{GAIN}"
ZED = [*sample("zed_camera"), str(FRAMES)]
FRP0K = ("void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4*, int, device::uchar8*, "
         "device::uchar8*, int, int, int, float)")
FRP0K_SHORT = "void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>"
NV12 = ("nv12_to_uyvy(unsigned char const*, unsigned int, unsigned char*, unsigned int, "
        "unsigned int, unsigned int)")
LAUNCH, OCCURRENCE = 2 * FROM + 2, FROM + 1      # frame FROM's FrP0k5607tPV
# The digests that differ: frame 1's images after; frame 2's before (frame 1's) and after.
DIFFERING = {(4, 2, "after"), (4, 3, "after"), (6, 2, "before"), (6, 3, "before"),
             (6, 2, "after"), (6, 3, "after")}


def gain(side: str, frame: int) -> float:
    return GAIN if side == "B" and frame >= FROM else zedref.gain_for_frame(frame)


def images(side: str, frame: int) -> tuple[np.ndarray, np.ndarray]:
    """zedref's left and right RGBA images of a frame on one side, (H, W, 4) uint8."""
    uyvy = zedref.nv12_to_uyvy(*zedref.synth_nv12(W, H, frame))
    return zedref.frp0k(uyvy, W, H, gain(side, frame))


def bisect(options: list[str], workdir: Path) -> subprocess.CompletedProcess[str]:
    done = run([*cudump_command(), "bisect", "--env-b", CHANGE, *options, "--", *ZED], workdir)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Traceback" not in done.stdout + done.stderr
    return done


def first_line(matched: int) -> str:
    launches = "launch" if matched == 1 else "launches"
    return (f"first divergent: launch {LAUNCH} of {FRP0K} (occurrence {OCCURRENCE}), arg 2 "
            f"after; {matched} {launches} matched before it")


def snapshots(run_dir: Path) -> dict[tuple[int, str], SnapshotRecord]:
    """A snap run's records by (arg, phase): the divergent launch's, and nothing else."""
    records = read_manifest(run_dir)
    table = {(r.arg, r.phase): r for r in records}
    assert len(table) == len(records) == 6
    for r in records:
        assert (r.kernel, r.launch, r.occurrence) == (FRP0K, LAUNCH, OCCURRENCE)
        assert r.status == "ok" and r.file and r.png, r.reason
    return table


def load(run_dir: Path, record: SnapshotRecord) -> np.ndarray:
    """A snapshot's .npy, checked against its PNG."""
    assert record.file and record.png
    array = np.load(run_dir / record.file)
    with Image.open(run_dir / record.png) as image:
        assert np.array_equal(np.asarray(image), array), record.png
    return array


def share(part: int, whole: int) -> str:
    return f"{part / whole * 100:.3g}%"


def where(index) -> str:
    return "(" + ",".join(str(int(i)) for i in index) + ")"


def buffer_lines(a: np.ndarray, b: np.ndarray) -> list[str]:
    """What bisect must print of a differing buffer, computed from the expected arrays."""
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    spots = np.argwhere(a != b)
    n, size = len(spots), a.size
    top = np.unravel_index(np.argmax(diff), diff.shape)
    first = "; ".join(f"{where(i)} A={a[tuple(i)]} B={b[tuple(i)]}" for i in spots[:10])
    box = ", ".join(f"{lo}:{hi + 1}" for lo, hi in zip(spots.min(0), spots.max(0), strict=True))
    lines = [f"data: uint8 {list(a.shape)}, {size:,} elements",
             f"differing elements: {n:,} of {size:,} ({share(n, size)})  [atol 0, rtol 0]",
             f"largest difference: {diff.max()} at {where(top)} (A={a[top]}, B={b[top]})",
             f"elements that differ: {first} (first 10 of {n:,})",
             f"all of them within [{box}]"]
    if a.ndim == 3:                                  # RGBA pixels
        pixels = H * W
        for ch, name in enumerate("rgba"):
            count = int((a != b)[..., ch].sum())
            lines.append(f"channel {ch} ({name}): {count:,} ({share(count, pixels)})")
        count = int((a != b).any(-1).sum())
        lines.append(f"differing pixels: {count:,} of {pixels:,} ({share(count, pixels)})")
    return lines


def report_block(out: str, arg: int) -> list[str]:
    """The lines bisect printed under `arg N (...) after:`."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines)
                 if ln.startswith(f"  arg {arg} (device::uchar8*) after:"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")),
               len(lines))
    return [ln.strip() for ln in lines[start + 1:end]]


def check_launch(out: str, work: Path, shape: tuple[int, ...]) -> None:
    """Step 4: the divergent launch's table, its snapshots and the printed differences."""
    a_dir, b_dir = work / "a-snap", work / "b-snap"
    a_snap, b_snap = snapshots(a_dir), snapshots(b_dir)
    assert a_snap.keys() == {(arg, phase) for arg in (0, 2, 3) for phase in ("before", "after")}
    # The UYVY input is frame 1's, the same on both sides.
    uyvy = zedref.nv12_to_uyvy(*zedref.synth_nv12(W, H, FROM))
    for phase in ("before", "after"):
        for snap, run_dir in ((a_snap, a_dir), (b_snap, b_dir)):
            assert np.array_equal(load(run_dir, snap[0, phase]).reshape(H, -1), uyvy)
    rows = {}
    for line in out.splitlines():
        m = re.match(rf"\s+{LAUNCH}\s+{re.escape(FRP0K_SHORT)}\s+{OCCURRENCE}\s+(\d)\s+"
                     r"(before|after)\s+(\S+)\s+([\d,]+)\s", line)
        if m:
            rows[int(m[1]), m[2]] = (m[3], int(m[4].replace(",", "")))
    expected_rows = {(0, "before"): ("same", 0), (0, "after"): ("same", 0)}
    for i, arg in enumerate((2, 3)):
        # Before: frame 0's image (gain 1.0 on both sides); after: frame 1's at each gain.
        before = images("A", FROM - 1)[i]
        assert np.array_equal(before, images("B", FROM - 1)[i])
        want_a, want_b = (images(side, FROM)[i].reshape(shape) for side in ("A", "B"))
        a_before = load(a_dir, a_snap[arg, "before"])
        b_before = load(b_dir, b_snap[arg, "before"])
        a_after = load(a_dir, a_snap[arg, "after"])
        b_after = load(b_dir, b_snap[arg, "after"])
        assert a_before.shape == b_before.shape == a_after.shape == shape
        assert np.array_equal(a_before, before.reshape(shape))
        assert np.array_equal(b_before, a_before)
        assert np.array_equal(a_after, want_a) and np.array_equal(b_after, want_b)
        # The gain moves every colour byte that is neither 0 nor saturated at both gains.
        changed = want_a != want_b
        assert changed.any() and not changed.reshape(H, W, 4)[..., 3].any()
        assert np.array_equal(a_after != b_after, changed)
        expected_rows[arg, "before"] = ("same", 0)
        expected_rows[arg, "after"] = ("DIFF", int(changed.sum()))
        block = report_block(out, arg)
        assert block[:2] == [f"A: {a_dir / a_snap[arg, 'after'].file}",
                             f"B: {b_dir / b_snap[arg, 'after'].file}"]
        for line in buffer_lines(want_a, want_b):
            assert line in block, (line, block)
    assert rows == expected_rows


def test_bisect_names_the_launch_whose_parameter_changed_and_its_pixels(workdir, tmp_path):
    """Every buffer of every launch: nv12_to_uyvy's launches all match; the first that
    differs is frame 1's FrP0k5607tPV, its left output after it ran."""
    work, report = tmp_path / "work", tmp_path / "report.html"
    done = bisect(["--out", str(work), "--html", str(report)], workdir)
    out = done.stdout
    lines = [ln.strip() for ln in out.splitlines()]
    records = FRAMES * (2 + 3) * 2         # pointer arguments of the two kernels, both phases
    assert lines[:8] == [
        f"A: {shlex.join(ZED)}",
        f"B: {shlex.join(ZED)} with {CHANGE}",
        "step 1: digests of every buffer of every launch",
        f"A: {records} records in a-digest/, exit status 0",
        f"B: {records} records in b-digest/, exit status 0",
        "step 2: first divergent launch",
        f"{records} pairs compared, {len(DIFFERING)} differ, 0 only in A, 0 only in B",
        first_line(2 * FROM + 1),
    ]
    # Frame 1's launch made the difference from equal inputs; frame 2's outputs held frame
    # 1's differing images before it ran, so it counts as a consequence.
    assert lines[8:10] == [
        f"root cause: launch {LAUNCH} of {FRP0K} (occurrence {OCCURRENCE}), arg 2 after: its "
        "inputs matched, its output differs",
        "divergent launches: 2: 1 root cause, 1 consequence (inputs already differed)",
    ]
    assert lines[10:13] == [
        f"step 3: snapshots of launch {LAUNCH} ({FRP0K_SHORT}, occurrence {OCCURRENCE}), "
        "before and after",
        "A: 6 records in a-snap/, exit status 0",
        "B: 6 records in b-snap/, exit status 0",
    ]

    # The digest runs: launches alternate between the two kernels; only FrP0k5607tPV's
    # images differ, from frame 1 on, and they are zedref's images at each side's gain.
    digests = {}
    for side in ("a", "b"):
        table = {(r.launch, r.arg, r.phase): r for r in read_manifest(work / f"{side}-digest")}
        assert len(table) == records
        for (launch, _, _), r in table.items():
            assert r.status == "ok" and r.file is None, r.reason
            assert r.kernel == (NV12 if launch % 2 else FRP0K)
            assert r.occurrence == (launch + 1) // 2
        digests[side] = table
    assert digests["a"].keys() == digests["b"].keys()
    differ = {k for k, r in digests["a"].items()
              if r.extra["digest"] != digests["b"][k].extra["digest"]}
    assert differ == DIFFERING
    assert all(r.kernel == FRP0K for k, r in digests["a"].items() if k in differ)
    for side in ("a", "b"):
        r = digests[side][LAUNCH, 2, "after"]
        assert r.extra["row_bytes"] == 4 * W and r.extra["rows"] == H
        left = images(side.upper(), FROM)[0]
        assert r.extra["digest"] == digest_hex(digest(left.tobytes(), 4 * W))

    # The variable reached B only: the programs' own checksums, as zedref computes them.
    for side in ("A", "B"):
        log = (work / "logs" / f"{side.lower()}-digest.log").read_text().splitlines()
        want = []
        for f in range(FRAMES):
            left, right = images(side, f)
            want.append(f"frame {f} gain={gain(side, f):.2f} left={zedref.checksum(left)} "
                        f"right={zedref.checksum(right)}")
        assert [ln for ln in log if ln.startswith("frame ")] == want

    # Without rules a uchar8* image is its rows of bytes (the pitch's padding dropped).
    check_launch(out, work, (H, 4 * W))

    page = report.read_text()
    assert f"report: {report}" in lines and f"work directory: {work}" in lines
    assert CHANGE in page and "6 pairs compared, 2 differ" in page
    assert f"{2 * FROM + 1} launches matched before it (in the digest runs)" in page
    # Each differing buffer (args 2 and 3), before and after: A, B and |A - B|.
    shown = set(re.findall(r'src="(report-img/[^"]+\.png)"', page))
    assert {str(p.relative_to(tmp_path)) for p in (tmp_path / "report-img").iterdir()} == shown
    assert len(shown) == 2 * 2 * 3


def test_bisect_with_the_zed_rule_shows_rgba_pixels(workdir, tmp_path):
    """With tests/gpu/rules/zed.yaml only FrP0k5607tPV is recorded, as (H, W, 4) RGBA
    images: the same launch, 1 launch matched before it, differing pixels by channel."""
    work = tmp_path / "work"
    done = bisect(["--rule", str(RULES / "zed.yaml"), "--out", str(work)], workdir)
    lines = [ln.strip() for ln in done.stdout.splitlines()]
    records = FRAMES * 3 * 2
    assert "step 1: digests of the buffers the rules name" in lines
    assert f"A: {records} records in a-digest/, exit status 0" in lines
    assert f"{records} pairs compared, {len(DIFFERING)} differ, 0 only in A, 0 only in B" \
        in lines
    assert first_line(1) in lines
    check_launch(done.stdout, work, (H, W, 4))
    for side in ("a", "b"):
        for r in read_manifest(work / f"{side}-snap"):
            with Image.open(work / f"{side}-snap" / str(r.png)) as image:
                assert image.mode == "RGBA" and image.size == (W, H)
