"""GPU digests and NaN scans: cudump's own kernel (shim/gpu/tools.cu as PTX, JIT-compiled
by the driver) against the numpy definition over snapshots of the same launches."""

from __future__ import annotations

import fnmatch

import numpy as np
import pytest
from gpurun import RULES, big_buffer_rule, run, sample, under_cudump

from cudump.rundir.manifest import read_manifest
from cudump.wire.digest import SUM_DTYPES, abs_sum, digest, digest_hex, sum_json

pytestmark = pytest.mark.gpu


def key(r) -> tuple:
    return (r.occurrence, r.arg, r.extra.get("offset", 0), r.phase)


def test_pitched_image_digests_equal_their_snapshots(workdir, tmp_path):
    """zed_camera's pitched uchar4 images (rows narrower than the pitch, unaligned widths
    for the fast path): each digest equals the numpy digest of the snapshot's bytes."""
    cmd = [*sample("zed_camera"), "3"]
    snap, dig = tmp_path / "snap", tmp_path / "dig"
    rule = tmp_path / "zed-digest.yaml"
    rule.write_text((RULES / "zed.yaml").read_text().replace("format: both", "format: digest"))
    assert "format: digest" in rule.read_text()
    a = run(under_cudump(cmd, snap, rules=[RULES / "zed.yaml"]), workdir)
    b = run(under_cudump(cmd, dig, rules=[rule]), workdir)
    assert a.returncode == 0 and b.returncode == 0, b.stderr[-3000:]
    assert a.stdout == b.stdout
    snaps = {key(r): r for r in read_manifest(snap)}
    digests = {key(r): r for r in read_manifest(dig)}
    assert snaps.keys() == digests.keys() and digests
    for k, r in digests.items():
        assert r.status == "ok" and r.file is None, r.reason
        array = np.load(snap / snaps[k].file)
        row_bytes = r.extra["row_bytes"]
        assert row_bytes * r.extra["rows"] == array.nbytes
        assert r.extra["digest"] == digest_hex(digest(array.tobytes(), row_bytes)), k


def test_large_buffer_digest_equals_host_digest(workdir, tmp_path):
    """64 MiB of floats, aligned: the vectorised path, before and after one launch."""
    dump = tmp_path / "dump"
    dump.mkdir()
    rule = big_buffer_rule(tmp_path / "d.yaml", "digest", count=1)
    out = tmp_path / "run"
    ran = run(under_cudump([*sample("big_buffer"), "64", "2", "--dump", str(dump)], out,
                           rules=[rule]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    records = read_manifest(out)
    assert [r.phase for r in records] == ["before", "after"]
    for r in records:
        want = np.load(dump / f"{r.phase}.npy")
        assert r.extra["bytes"] == want.nbytes == 64 << 20
        assert r.extra["digest"] == digest_hex(digest(want.tobytes())), r.phase


def test_torch_fill_pointer_discovery_and_check_nan(workdir, tmp_path):
    """PyTorch passes tensors inside std::array<char*, N>: `args: pointers` finds the fill's
    output (snapshot equals the tensor), and --check-nan finds the multiply that overflows,
    its float type guessed from the kernel's name."""
    pytest.importorskip("torch")
    dump = tmp_path / "dump"
    dump.mkdir()
    fill_rule = tmp_path / "fill.yaml"
    fill_rule.write_text('rules:\n  - kernel: "*FillFunctor*"\n    when: after\n'
                         '    format: npy\n')
    out = tmp_path / "run"
    cmd = [*sample("torch_nan.py"), "12", "7", "--dump", str(dump)]
    ran = run(under_cudump(cmd, out, rules=[fill_rule], extra=["--check-nan"]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "inf at step 7: 3000" in ran.stdout
    records = read_manifest(out)
    fills = [r for r in records if fnmatch.fnmatchcase(r.kernel, "*FillFunctor*") and r.file]
    assert fills, [r.kernel for r in records]
    x = np.load(dump / "x.npy")
    got = np.load(out / fills[0].file).view(np.float32)[: x.size]
    assert np.array_equal(got.view(np.uint32), x.view(np.uint32))
    assert fills[0].extra.get("extent") in ("allocation-rest", "to-next-buffer")
    # the multiply first; then torch.isinf's own kernels (abs of y) leave Inf in their
    # outputs too, and are reported as producers of their own, all at step 7
    producers = sorted((r for r in records if "nonfinite" in r.extra), key=lambda r: r.launch)
    assert producers, "no producer found"
    p = producers[0]
    assert "MulFunctor" in p.kernel and p.occurrence == 7, [r.kernel for r in producers]
    assert all("MulFunctor" not in r.kernel for r in producers[1:])
    assert p.extra["first_nonfinite"] == 0 and p.extra["nonfinite"] >= 3000
    assert "cudump: NaN/Inf: launch" in ran.stderr
    after = [r for r in records if r.extra.get("nan_producer") and r.file
             and r.extra.get("offset") == p.extra.get("offset") and r.arg == p.arg]
    assert after, "the producer's buffers were not snapshotted"
    y = np.load(out / after[0].file).view(np.float32)[: x.size]
    assert np.isinf(y).all()


def test_torch_break_on_nan_stops_once_at_the_first_producer(workdir, tmp_path):
    """--break-on-nan on PyTorch: the prompt opens after the multiply that overflows (its
    launch made with a plan the shim repeats, reported by MSG_REPEAT), once, and the program
    runs on to its own end."""
    pytest.importorskip("torch")
    commands = tmp_path / "commands.txt"
    commands.write_text("info args\ncontinue\n")
    cmd = [*sample("torch_nan.py"), "12", "7"]
    ran = run(under_cudump(cmd, tmp_path / "run",
                           extra=["--break-on-nan", "--batch", str(commands)]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "inf at step 7: 3000" in ran.stdout
    lines = ran.stderr.splitlines()
    stops = [i for i, ln in enumerate(lines) if ln.startswith("NaN/Inf in arg 2: 3000 of ")]
    assert len(stops) == 1, ran.stderr[-3000:]
    assert "MulFunctor<float>" in lines[stops[0]] and "(occurrence 7)" in lines[stops[0]]
    assert "(cudump) info args" in lines and "Continuing." in lines


EXITS_EARLY = """
import torch
x = torch.ones(4 << 20, device="cuda")     # 16 MiB: an allocation of its own
torch.cuda.synchronize()
torch.cuda._sleep(2_000_000_000)          # about a second of GPU time ahead of the multiply
y = x * 3
print("queued")
"""


def test_digests_of_a_program_that_exits_without_waiting_for_the_gpu(workdir, tmp_path):
    """The program queues a multiply behind a second of GPU work and exits without waiting:
    the multiply's digests are still on the GPU when it ends. cudump waits for them at exit
    (a few seconds at most), so they are in the manifest, equal to the numpy digest."""
    pytest.importorskip("torch")
    out = tmp_path / "run"
    ran = run(under_cudump(["python3", "-c", EXITS_EARLY], out, extra=["--digest"]), workdir)
    assert ran.returncode == 0 and "queued" in ran.stdout, ran.stderr[-3000:]
    assert "never came back" not in ran.stderr, ran.stderr[-3000:]
    muls = [r for r in read_manifest(out) if "MulFunctor" in r.kernel and r.phase == "after"]
    assert muls and all(r.status == "ok" for r in muls), [r.reason for r in muls]
    threes = np.full(4 << 20, 3.0, dtype=np.float32).tobytes()
    assert any(r.extra["rows"] * r.extra["row_bytes"] == len(threes)
               and r.extra["digest"] == digest_hex(digest(threes, r.extra["row_bytes"]))
               for r in muls), [(r.arg, r.extra) for r in muls]


SUMS = """
import os
os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"   # each tensor an allocation of its own
import torch
torch.manual_seed(0)
for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
    for n in (1, 7, 1000, 100003, 3 << 20):
        x = torch.randn(n + 3, device="cuda").to(dt)
        x[0] = -x[0]
        y = x[1:n + 1].neg()        # its input starts one element in: not on 16 bytes
torch.cuda.synchronize()
print("done")
"""


def test_digest_sums_equal_the_sums_of_their_snapshots(workdir, tmp_path):
    """The sum of |x| beside each digest of PyTorch's negations (float32, float16,
    bfloat16, float64; 1 to 3M elements, inputs off 16 bytes, so both of the kernel's paths)
    equals the numpy definition over the snapshot of the same buffer, to float64 rounding."""
    pytest.importorskip("torch")
    rule = tmp_path / "neg.yaml"
    rule.write_text('rules:\n  - kernel: "*neg_kernel*"\n    when: both\n    format: npy\n')
    digest_rule = tmp_path / "neg-digest.yaml"
    digest_rule.write_text(rule.read_text().replace("format: npy", "format: digest"))
    cmd = ["python3", "-c", SUMS]
    snap, dig = tmp_path / "snap", tmp_path / "dig"
    a = run(under_cudump(cmd, snap, rules=[rule]), workdir)
    b = run(under_cudump(cmd, dig, rules=[digest_rule]), workdir)
    assert a.returncode == 0 and b.returncode == 0, b.stderr[-3000:]

    def keyed(run_dir):
        return {(r.kernel, *key(r)): r for r in read_manifest(run_dir)}

    snaps, digests = keyed(snap), keyed(dig)
    assert snaps.keys() == digests.keys() and len(digests) >= 40
    formats = {name: mode for mode, name in SUM_DTYPES.items()}
    seen = set()
    for k, r in digests.items():
        assert r.status == "ok", r.reason
        data = np.load(snap / snaps[k].file).tobytes()
        assert r.extra["digest"] == digest_hex(digest(data, r.extra["row_bytes"])), k
        if "sum_of" not in r.extra:
            # A name that gives no one float type: bytes, as the NaN scan takes them.
            assert r.dtype == "uint8", (k, r.dtype)
            continue
        want = abs_sum(data, formats[r.extra["sum_of"]], r.extra["row_bytes"])
        if np.isfinite(want):
            assert r.extra["abs_sum"] == pytest.approx(want, rel=1e-9, abs=1e-300), k
        else:   # an output before the launch: memory not yet written, NaN bits and all
            assert r.extra["abs_sum"] == sum_json(want), k
        seen.add(r.extra["sum_of"])
    assert seen == set(SUM_DTYPES.values())
