"""GPU digests (format: digest, --digest): the definition, and the shim's kernel on the
stand-in driver, which runs the same per-thread code as shim/gpu/tools.cu."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudump.errors import RuleError, SnapshotError
from cudump.policy.rules import load_rules
from cudump.rundir.layout import MANIFEST_FILE
from cudump.rundir.manifest import SnapshotRecord, read_manifest, template_line
from cudump.wire.digest import (
    GOLDEN,
    SCAN_ELEMENT_SIZE,
    SUM_DTYPES,
    Scan,
    abs_sum,
    digest,
    digest_hex,
    scan,
    sums_within,
    words,
)
from cudump.wire.protocol import ToolMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from records import group_line, manifest
from zedref import pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ZED_RULE = ROOT / "rules" / "zed.yaml"
W, H = 64, 48
MASK = (1 << 64) - 1


def slow_digest(data: bytes, width: int) -> int:
    """The definition with Python integers, word by word, for checking the numpy one."""
    def mix(x: int) -> int:
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & MASK
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & MASK
        return x ^ (x >> 31)

    total, i = 0, 0
    for start in range(0, len(data), width):
        row = data[start:start + width]
        row += bytes(-len(row) % 4)
        for k in range(0, len(row), 4):
            total = (total + mix((int.from_bytes(row[k:k + 4], "little") + i * GOLDEN) & MASK)) \
                & MASK
            i += 1
    return total


@pytest.mark.parametrize("width,rows", [(1, 1), (3, 5), (4, 4), (7, 3), (64, 2), (1000, 1)])
def test_numpy_digest_matches_the_definition(width, rows):
    data = np.random.default_rng(width * rows).integers(0, 256, width * rows,
                                                        dtype=np.uint8).tobytes()
    assert digest(data, width) == slow_digest(data, width)


def test_digest_sees_position_and_row_padding():
    one_two, two_one = bytes([1, 0, 0, 0, 2, 0, 0, 0]), bytes([2, 0, 0, 0, 1, 0, 0, 0])
    assert digest(one_two) != digest(two_one)
    # three rows of three bytes are three zero-padded words, not 9 packed bytes
    assert words(bytes(range(9)), 3).tolist() == [0x020100, 0x050403, 0x080706]
    assert digest(bytes(range(1, 10)), 3) != digest(bytes(range(1, 10)))
    assert digest(b"") == 0 and digest_hex(5) == "0000000000000005"


def test_scan_finds_the_first_nonfinite():
    assert scan(np.array([1, np.nan, 2, -np.inf], np.float32)) == Scan(2, 1)
    assert scan(np.ones(4, np.float16)) == Scan(0, None)
    assert scan(np.array([0x3F80, 0x7FC0, 0xFF80], np.uint16)) == Scan(2, 1)  # bfloat16 bits
    assert Scan.from_words(3, ~7 & MASK) == Scan(3, 7)


def test_digest_format_stands_alone(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("rules:\n  - kernel: k\n    format: digest\n")
    (rule,) = load_rules([good])
    assert rule.is_digest and rule.formats == frozenset({"digest"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - kernel: k\n    format: [digest, npy]\n")
    with pytest.raises(RuleError) as err:
        load_rules([bad])
    assert "bad.yaml:3" in str(err.value) and "format" in str(err.value)
    assert "digest stands alone" in str(err.value)



def key(r: dict) -> tuple:
    return (r["occurrence"], r["arg"], r.get("offset", 0), r["phase"])


def test_digests_of_pitched_images_equal_digests_of_their_snapshots(fake, cudump_run, tmp_path):
    """The shim's kernel, over pitched rows of uchar4 (width not the pitch), agrees with the
    numpy definition over the bytes a snapshot of the same launch copied."""
    program = [str(fake.programs["zed"]), "2", "--size", f"{W}x{H}"]
    snap = cudump_run(program, "--rule", str(ZED_RULE), run_dir=tmp_path / "snap")
    rule = tmp_path / "zed-digest.yaml"
    rule.write_text(ZED_RULE.read_text().replace("format: both", "format: digest"))
    dig = cudump_run(program, "--rule", str(rule), run_dir=tmp_path / "dig")
    assert snap.returncode == 0 and dig.returncode == 0, dig.stderr
    summary = dig.stderr.splitlines()[-1]
    assert "12 digests" in summary and "snapshot" not in summary
    snaps = {key(r): r for r in manifest(snap.run_dir)}
    digests = {key(r): r for r in manifest(dig.run_dir)}
    assert snaps.keys() == digests.keys() and len(digests) == 12
    assert not list(dig.run_dir.glob("*.npy"))
    for k, r in digests.items():
        array = np.load(snap.run_dir / snaps[k]["file"])
        row_bytes = array.shape[1] * array.shape[2] * array.itemsize
        assert (r["status"], r["file"], r["algorithm"]) == ("ok", None, "cudump-sum64")
        assert (r["row_bytes"], r["rows"], r["bytes"]) == (row_bytes, H, row_bytes * H)
        assert r["digest"] == digest_hex(digest(array.tobytes(), row_bytes)), k
    # the frames differ, and so do their digests
    uyvy0, _, _ = pipeline(W, H, 0)
    first = digests[(1, 0, 0, "before")]
    assert first["digest"] == digest_hex(digest(uyvy0.tobytes(), W * 4))
    assert first["digest"] != digests[(2, 0, 0, "before")]["digest"]


def test_digest_option_takes_words_inside_structs(fake, cudump_run):
    """--digest: every kernel, every buffer, before and after; the values follow the data."""
    ran = cudump_run([str(fake.programs["structs"])], "--digest")
    assert ran.returncode == 0, ran.stderr
    records = {(r["offset"] if "offset" in r else 0, r["phase"]): r for r in manifest(ran.run_dir)}
    assert len(records) == 6 and "6 digests" in ran.stderr
    n = 256
    a = np.arange(n, dtype=np.float32)
    # each piece runs to where the next begins: the output, then the two inputs, unchanged
    assert records[(0, "before")]["digest"] == digest_hex(digest(np.zeros(n, np.float32)))
    assert records[(0, "after")]["digest"] == digest_hex(digest((1.5 * a).tobytes()))
    assert records[(8, "before")]["digest"] == digest_hex(digest(a.tobytes()))
    assert records[(8, "after")]["digest"] == records[(8, "before")]["digest"]
    assert records[(16, "after")]["digest"] == digest_hex(digest((0.5 * a).tobytes()))
    assert [records[(k, "after")]["extent"] for k in (0, 8, 16)] == [
        "to-next-buffer", "to-next-buffer", "allocation-rest"]
    assert all(r["bytes"] == n * 4 for r in records.values())


def test_a_digest_outside_its_allocation_is_refused(fake, cudump_run, tmp_path):
    """cudump's kernel never reads past an allocation (that would fault the program's
    context): the plan refuses it (and the shim would too), the record says why, and the
    program runs on."""
    rule = tmp_path / "over.yaml"
    rule.write_text("rules:\n  - kernel: add3\n    args: [0]\n    when: after\n"
                    "    format: digest\n    overrides:\n"
                    "      0: {field: 16, dtype: float32, count: 100000}\n")
    ran = cudump_run([str(fake.programs["structs"])], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    (record,) = manifest(ran.run_dir)
    assert record["status"] == "error"
    assert "but the allocation has 1024 left" in record["reason"]
    assert "launches add3=1" in ran.stdout


def _shim_build():
    import importlib.util

    spec = importlib.util.spec_from_file_location("shim_build", ROOT / "shim" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_embedded_ptx_is_compiled_from_the_current_kernel_source():
    """shim/gpu/tools.ptx is generated (shim/gpu/make_ptx.sh, needs nvcc): its stamp must be
    the hash of shim/gpu/tools.cu and shim/tooljob.h, or the shim runs an older kernel than
    the sources say."""
    build = _shim_build()
    ptx = build.PTX.read_text()
    assert f"// source sha256 {build.ptx_source_hash()}\n" in ptx, \
        "run shim/gpu/make_ptx.sh and commit the result"
    assert ".entry cudump_tools(" in ptx


def test_the_hopper_build_is_the_same_code_with_the_wait_in_the_markers_place():
    """One PTX is kept; the compute_90 build made from it differs in the target and in the
    one line where tools.cu waits for the kernel before it, nothing else."""
    import difflib

    build = _shim_build()
    ptx = build.PTX.read_text()
    hopper = build.ptx_for_hopper(ptx)
    changed = [line for line in difflib.unified_diff(ptx.splitlines(), hopper.splitlines(),
                                                     lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert sorted(changed) == sorted([
        "-.target sm_75", "+.target sm_90",
        "-\t// cudump: the grid dependency wait, on compute_90 and later",
        "+\tgriddepcontrol.wait;"])


def test_a_ptx_without_its_marker_is_refused_not_embedded_without_the_wait():
    build = _shim_build()
    ptx = build.PTX.read_text().replace(build.PTX_WAIT_MARKER, "")
    with pytest.raises(build.PtxError, match="expected one"):
        build.ptx_for_hopper(ptx)


def test_show_of_a_digest_prints_it_and_says_there_is_no_data(fake, cudump_run):
    import subprocess

    ran = cudump_run([str(fake.programs["structs"])], "--digest")
    assert ran.returncode == 0, ran.stderr
    shown = subprocess.run([sys.executable, "-m", "cudump", "show", str(ran.run_dir),
                            "--index", "0"], capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    first = manifest(ran.run_dir)[0]
    assert shown.stdout.splitlines()[3:] == [
        f"digest {first['digest']} (cudump-sum64) of 1024 bytes: {first['dtype']} "
        f"{first['shape']}",
        "no data: the GPU digested the buffer and kept no bytes (a rule with format: npy on "
        "that launch keeps them)"]
    rendered = subprocess.run([sys.executable, "-m", "cudump", "show", str(ran.run_dir),
                               "--index", "0", "--png", str(ran.run_dir / "x.png")],
                              capture_output=True, text=True, cwd=ROOT)
    assert rendered.returncode == 2
    assert rendered.stderr == "cudump: error: snapshot #0 holds no data to render (--png)\n"


# ---------------------------------------------------------------------------------------
# The sum of |x| beside a digest

SUM_FORMATS = [(ToolMode.SCAN_F32, np.float32), (ToolMode.SCAN_F64, np.float64),
               (ToolMode.SCAN_F16, np.float16), (ToolMode.SCAN_BF16, None)]


def as_floats(raw: bytes, fmt: ToolMode) -> list[float]:
    """Elements of a row, one by one: the definition without numpy's vector casts."""
    if fmt == ToolMode.SCAN_BF16:
        return [struct.unpack("<f", b"\0\0" + raw[k:k + 2])[0] for k in range(0, len(raw), 2)]
    code = {ToolMode.SCAN_F32: "f", ToolMode.SCAN_F64: "d", ToolMode.SCAN_F16: "e"}[fmt]
    return list(struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw))


@pytest.mark.parametrize("fmt,_", SUM_FORMATS)
@pytest.mark.parametrize("width,rows", [(8, 1), (10, 3), (64, 2), (1002, 1)])
def test_abs_sum_is_over_whole_elements_of_each_row(fmt, _, width, rows):
    data = np.random.default_rng(width).integers(0, 256, width * rows, np.uint8)
    data[1::2] &= 0x3F   # mostly finite numbers in every format
    size = SCAN_ELEMENT_SIZE[fmt]
    want = 0.0
    for r in range(rows):
        row = data[r * width:r * width + width - width % size].tobytes()
        want += sum(abs(x) for x in as_floats(row, fmt))
    assert abs_sum(data.tobytes(), fmt, width) == pytest.approx(want, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=64),
       st.floats(0, 1e-2), st.floats(0, 1e-2), st.randoms(use_true_random=False))
def test_buffers_within_a_tolerance_have_sums_within_it(values, atol, rtol, rnd):
    """The sums never say "beyond" for buffers whose every element is within the tolerance
    (the rule by which bisect and diff trust them)."""
    b = np.array(values, np.float32)
    a = np.array([x + rnd.uniform(-1, 1) * (atol + rtol * abs(x)) for x in values],
                 np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)   # as cudump diff compares
    within = np.abs(a64 - b64) <= atol + rtol * np.abs(b64)
    a[~within] = b[~within]   # float32 rounding may push an element out: keep it equal
    sa, sb = (abs_sum(x.tobytes(), ToolMode.SCAN_F32) for x in (a, b))
    assert sums_within(sa, sb, b.size, atol, rtol)


@pytest.mark.parametrize("fmt,_", SUM_FORMATS)
def test_sums_of_a_float_typed_digest_follow_the_data(fake, cudump_run, tmp_path, fmt, _):
    """The stand-in's kernel sums |x| of the elements as the rule types them (each of four
    formats over the same bytes), equal to the numpy definition."""
    n = 256
    a = np.arange(n, dtype=np.float32)
    name = SUM_DTYPES[fmt]   # "bfloat16" too: a rule's name for uint16 bits of bfloat16
    rule = tmp_path / "sums.yaml"
    rule.write_text("rules:\n  - kernel: add3\n    args: [0]\n    when: before\n"
                    "    format: digest\n    overrides:\n"
                    f"      0: {{field: 8, dtype: {name}, "
                    f"count: {n * 4 // SCAN_ELEMENT_SIZE[fmt]}}}\n")
    ran = cudump_run([str(fake.programs["structs"])], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    (r,) = manifest(ran.run_dir)
    assert r["sum_of"] == SUM_DTYPES[fmt] and r["digest"] == digest_hex(digest(a.tobytes()))
    assert r["abs_sum"] == pytest.approx(abs_sum(a.tobytes(), fmt), rel=1e-12), r


def test_only_digests_of_floats_have_sums(fake, cudump_run):
    """--digest: buffers typed float (by the signature, or the name as PyTorch's are) get a
    sum of |x|; int buffers do not."""
    ran = cudump_run([str(fake.programs["diverge"]), "1"], "--digest")
    assert ran.returncode == 0, ran.stderr
    kinds = {(r["kernel"].split("(")[0], "abs_sum" in r, r.get("sum_of")) for r in
             manifest(ran.run_dir)}
    assert kinds == {("void fill<int>", False, None), ("vecAdd", True, "float32"),
                     ("scale", False, None)}


def records_of_lines(lines: list[str], where: Path) -> list[SnapshotRecord]:
    where.mkdir(exist_ok=True)
    (where / MANIFEST_FILE).write_text("\n".join(lines) + "\n")
    return read_manifest(where)


def test_group_lines_carry_sums_in_the_template_order(tmp_path):
    record = SnapshotRecord(kernel="k", mangled="_Z1kv", launch=1, occurrence=1, pid=1,
                            grid=[1, 1, 1], block=[1, 1, 1], stream="0x0", arg=0,
                            type=None, phase="after", address="0x10", dtype="float32",
                            shape=[4], file=None,
                            extra={"digest": "0" * 16, "bytes": 16, "row_bytes": 16,
                                   "rows": 1, "sum_of": "float32", "abs_sum": 0.0})
    lines = [template_line("1.1", [record, record]),
             group_line("1.1", 7, 3, [1, 1, 1], [1, 1, 1], 0, 0, ["a" * 16, "b" * 16],
                        [2.5, "nan"])]
    back = [json.loads(x) for x in lines]
    assert "abs_sum" not in back[0]["records"][0]
    records = records_of_lines(lines, tmp_path / "good")
    assert [(r.launch, r.extra["digest"][0], r.extra["abs_sum"]) for r in records] == [
        (7, "a", 2.5), (7, "b", "nan")]
    bad = group_line("1.1", 7, 3, [1, 1, 1], [1, 1, 1], 0, 0, ["a" * 16, "b" * 16], [1.0])
    with pytest.raises(SnapshotError, match="manifest.jsonl:2: field 'sums'"):
        records_of_lines([lines[0], bad], tmp_path / "bad")
