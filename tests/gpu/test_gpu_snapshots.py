"""Snapshots: what cudump writes for a rule must be the buffers the kernel
saw and wrote, byte for byte, as .npy and as PNG."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import numpy as np
import pytest
import zedref
from gpurun import RULES, big_buffer_rule, launches_printed, run, sample, under_cudump
from PIL import Image

from cudump.rundir.manifest import SnapshotRecord, read_manifest

pytestmark = pytest.mark.gpu

FRP0K = ("void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4*, int, device::uchar8*, "
         "device::uchar8*, int, int, int, float)")
SAXPY = "void ns::saxpy<float>(float, float const*, float*, int)"
FRAMES = 3
ZED_PROGRAMS = ["zed_camera", "zed_camera.py"]


def snapshot_run(cmd: list[str], rule: str, workdir: Path, tmp_path: Path):
    out = tmp_path / "run"
    bare = run(cmd, workdir)
    assert bare.returncode == 0, bare.stderr
    wrapped = run(under_cudump(cmd, out, rules=[RULES / rule]), workdir)
    assert wrapped.returncode == 0, wrapped.stderr[-4000:]
    assert wrapped.stdout == bare.stdout
    records = read_manifest(out)
    assert records, "no snapshots were written"
    assert all(r.status == "ok" for r in records), [r.reason for r in records if r.status != "ok"]
    return out, records, bare.stdout


def by_key(records: list[SnapshotRecord]) -> dict[tuple[int, int, str], SnapshotRecord]:
    """(occurrence, arg, phase) -> record, checking there is one of each."""
    table: dict[tuple[int, int, str], SnapshotRecord] = {}
    for r in records:
        key = (r.occurrence, r.arg, r.phase)
        assert key not in table, f"two snapshots for {key}"
        table[key] = r
    return table


def npy(run_dir: Path, record: SnapshotRecord) -> np.ndarray:
    assert record.file
    return np.load(run_dir / record.file)


def png(run_dir: Path, record: SnapshotRecord) -> np.ndarray:
    assert record.png, f"no PNG for arg {record.arg} {record.phase}"
    with Image.open(run_dir / record.png) as image:
        assert image.mode == "RGBA"
        return np.asarray(image)


@pytest.mark.parametrize("program", ZED_PROGRAMS)
def test_zed_checksums_match_reference(program, workdir):
    result = run([*sample(program), str(FRAMES)], workdir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert launches_printed(result.stdout) == {"nv12_to_uyvy": FRAMES, "FrP0k5607tPV": FRAMES}
    for f in range(FRAMES):
        _, left, right = zedref.pipeline(zedref.DEFAULT_WIDTH, zedref.DEFAULT_HEIGHT, f)
        assert lines[f] == (f"frame {f} gain={zedref.gain_for_frame(f):.2f} "
                            f"left={zedref.checksum(left)} right={zedref.checksum(right)}")


@pytest.mark.parametrize("program", ZED_PROGRAMS)
def test_zed_snapshots_match_reference(program, workdir, tmp_path):
    width, height = zedref.DEFAULT_WIDTH, zedref.DEFAULT_HEIGHT
    out, records, _ = snapshot_run([*sample(program), str(FRAMES)], "zed.yaml", workdir, tmp_path)
    assert {r.kernel for r in records} == {FRP0K}
    table = by_key(records)
    assert len(table) == FRAMES * 3 * 2          # args 0, 2, 3; before and after

    previous = (np.zeros((height, width, 4), np.uint8),) * 2   # the sample zeroes its outputs
    for f in range(FRAMES):
        occurrence = f + 1
        uyvy, left, right = zedref.pipeline(width, height, f)
        for key in table:
            if key[0] == occurrence:
                record = table[key]
                assert record.launch == 2 * occurrence      # nv12_to_uyvy runs first each frame
                assert record.grid == [20, 45, 1] and record.block == [32, 8, 1]
                assert record.device == 0
                assert record.dtype == "uint8"

        source = npy(out, table[occurrence, 0, "before"])
        assert np.array_equal(source.reshape(height, -1), uyvy)

        for arg, want, before_want in ((2, left, previous[0]), (3, right, previous[1])):
            before = npy(out, table[occurrence, arg, "before"])
            after = npy(out, table[occurrence, arg, "after"])
            assert after.shape == (height, width, 4)
            assert np.array_equal(after, want), f"frame {f} arg {arg} after"
            assert np.array_equal(png(out, table[occurrence, arg, "after"]), want)
            assert np.array_equal(before, before_want), f"frame {f} arg {arg} before"
            assert np.array_equal(png(out, table[occurrence, arg, "before"]), before_want)
            # They differ exactly where this frame's image differs from what was there.
            assert np.array_equal((before != after).any(-1), (before_want != want).any(-1))
            assert (before != after).any()
        previous = (left, right)


@pytest.mark.parametrize("binary", ["runtime_app", "runtime_app_ptds", "runtime_app_ex"])
def test_float_buffers_round_trip_bit_exactly(binary, workdir, tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    cmd = [*sample(binary), "--dump", str(dump)]
    out, records, _ = snapshot_run(cmd, "saxpy.yaml", workdir, tmp_path)
    # The bare run and the run under cudump wrote the same files: the later one wins;
    # the program checked both against the host's fma, so they are the same values.
    assert {r.kernel for r in records} == {SAXPY}
    table = by_key(records)
    assert len(table) == 3 * 2 * 2               # 3 launches, args 1 and 2, before and after

    def bits(array: np.ndarray) -> np.ndarray:
        assert array.dtype == np.float32
        return array.reshape(-1).view(np.uint32)

    x = bits(np.load(dump / "x.npy"))
    for k in (1, 2, 3):
        for phase in ("before", "after"):
            assert table[k, 1, phase].dtype == "float32"
            assert np.array_equal(bits(npy(out, table[k, 1, phase])), x)
        y_before = bits(np.load(dump / f"y{k - 1}.npy"))
        y_after = bits(np.load(dump / f"y{k}.npy"))
        assert np.array_equal(bits(npy(out, table[k, 2, "before"])), y_before)
        assert np.array_equal(bits(npy(out, table[k, 2, "after"])), y_after)


def test_torch_elementwise_output_round_trips(workdir, tmp_path):
    pytest.importorskip("torch")
    dump = tmp_path / "dump"
    dump.mkdir()
    cmd = [*sample("torch_ops.py"), "--dump", str(dump)]
    out, records, _ = snapshot_run(cmd, "torch_add.yaml", workdir, tmp_path)
    pattern = "*elementwise_kernel<*CUDAFunctor_add<float>*"
    assert all(fnmatch.fnmatchcase(r.kernel, pattern) for r in records)
    first = min((r for r in records if r.arg == 2 and r.phase == "after"), key=lambda r: r.launch)
    want = np.load(dump / "add_out.npy")
    got = npy(out, first)
    assert got.dtype == np.float32
    assert np.array_equal(got.reshape(-1).view(np.uint32), want.reshape(-1).view(np.uint32))


def test_buffers_larger_than_staging_stream_byte_exact(workdir, tmp_path):
    """512 MiB, twice the default staging area, before and after: streamed in pieces."""
    dump = tmp_path / "dump"
    dump.mkdir()
    rule = big_buffer_rule(tmp_path / "big.yaml", "npy", count=1)
    out = tmp_path / "run"
    ran = run(under_cudump([*sample("big_buffer"), "512", "2", "--dump", str(dump)], out,
                           rules=[rule]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    records = read_manifest(out)
    assert [(r.phase, r.status) for r in records] == [("before", "ok"), ("after", "ok")]
    for r in records:
        got = np.load(out / r.file, mmap_mode="r")
        want = np.load(dump / f"{r.phase}.npy", mmap_mode="r")
        assert got.shape == (512 << 18,)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), r.phase


def test_back_to_back_snapshots_are_written_behind_byte_exact(workdir, tmp_path):
    """256 MiB, before and after each of 4 launches back to back, each synchronized, at the
    default settings: every launch's bytes wait for the files in the write-behind area
    (written_behind), and the 8 files are what each launch found and left."""
    rule = big_buffer_rule(tmp_path / "big.yaml", "npy")
    out = tmp_path / "run"
    ran = run(under_cudump([*sample("big_buffer"), "256", "4"], out, rules=[rule],
                           extra=["--max-bytes", "3G"]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["written_behind"] == 4
    records = read_manifest(out)
    assert sorted((r.occurrence, r.phase, r.status) for r in records) == sorted(
        (k, phase, "ok") for k in (1, 2, 3, 4) for phase in ("before", "after"))
    start = (np.arange(256 << 18) % 1000).astype(np.float32)    # each launch adds 1
    for r in records:
        got = np.load(out / r.file, mmap_mode="r")
        want = start + (r.occurrence - (r.phase == "before"))
        assert np.array_equal(got, want), (r.occurrence, r.phase)


def test_the_scratch_memory_kept_between_launches_is_the_programs_when_it_asks(
        workdir, tmp_path):
    """The deferred launches' scratch memory (2 x 256 MiB) stays in cudump's pool between
    launches; the program, which allocates all but 64 MiB of what was free before its first
    launch, gets it as it does bare, and is told the memory free that it is told bare."""
    rule = big_buffer_rule(tmp_path / "big.yaml", "npy")
    cmd = [*sample("big_buffer"), "256", "3", "--room"]
    bare = run(cmd, workdir)
    assert bare.returncode == 0, bare.stderr[-3000:]
    out = tmp_path / "run"
    ran = run(under_cudump(cmd, out, rules=[rule], extra=["--max-bytes", "2G"]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["written_behind"] == 3
    for done in (bare, ran):
        lines = done.stdout.splitlines()
        assert "room allocated" in lines, done.stdout
        change = next(int(x.split()[1]) for x in lines if x.startswith("free_change_mib"))
        assert abs(change) < 64, done.stdout


def test_torch_graph_kernels_snapshot_each_replay(workdir, tmp_path):
    """A rule on the add inside a torch.cuda.graph: the copy nodes of the instrumented graph
    give exactly each replay's tensor, and the graph's results are bit-identical with and
    without cudump."""
    pytest.importorskip("torch")
    bare_dir, dump = tmp_path / "bare", tmp_path / "dump"
    bare_dir.mkdir()
    dump.mkdir()
    rule = tmp_path / "add.yaml"
    rule.write_text('rules:\n  - kernel: "*elementwise_kernel<*_add<float>*"\n'
                    '    args: [2]\n    when: after\n    format: npy\n    overrides:\n'
                    '      2: {field: 0, dtype: float32, count: arg0}\n')
    bare = run([*sample("torch_graph.py"), str(bare_dir)], workdir)
    assert bare.returncode == 0, bare.stderr[-3000:]
    out = tmp_path / "run"
    ran = run(under_cudump([*sample("torch_graph.py"), str(dump)], out, rules=[rule]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout  # graph-mode results, bit for bit
    records = [r for r in read_manifest(out) if "graph" in r.extra]
    assert sorted(r.extra["replay"] for r in records) == [1, 2, 3, 4, 5], \
        [(r.status, r.reason) for r in read_manifest(out)]
    for r in records:
        assert r.status == "ok", r.reason
        want = np.load(dump / f"y-{r.extra['replay']}.npy")
        assert np.array_equal(npy(out, r).view(np.uint32), want.view(np.uint32))


def test_torch_compile_reduce_overhead_kernels_snapshot_inside_graph_replays(workdir, tmp_path):
    """torch.compile(mode="reduce-overhead") replays its Triton kernel through a CUDA graph:
    a rule on it takes snapshots inside the replays (records with graph/replay/node), each
    output snapshot is the y of one step, and the program's results are bit-identical."""
    pytest.importorskip("torch")
    steps = 6
    bare_dir, dump_dir = tmp_path / "bare-y", tmp_path / "dump-y"
    bare_dir.mkdir()
    dump_dir.mkdir()
    bare = run([*sample("torch_compiled.py"), str(bare_dir), str(steps)], workdir)
    assert bare.returncode == 0, bare.stderr[-3000:]
    rule = tmp_path / "triton.yaml"
    rule.write_text('rules:\n  - kernel: "triton_*"\n    when: after\n    format: npy\n')
    out = tmp_path / "run"
    wrapped = run(under_cudump([*sample("torch_compiled.py"), str(dump_dir), str(steps)], out,
                               rules=[rule]), workdir)
    assert wrapped.returncode == 0, wrapped.stderr[-3000:]
    assert wrapped.stdout == bare.stdout          # graph-mode numerics, bit for bit
    records = [r for r in read_manifest(out) if r.status == "ok"]
    in_graph = [r for r in records if "graph" in r.extra]
    assert in_graph, [(r.kernel, r.extra) for r in records]
    ys = {np.load(bare_dir / f"y-{s}.npy").tobytes() for s in range(steps)}
    outputs = 0
    for r in in_graph:
        got = npy(out, r).tobytes()[:4096 * 4]
        outputs += got in ys
    # every replay's output pointer shows one step's y (inputs and scratch show other bytes)
    assert outputs >= len({r.extra["replay"] for r in in_graph})


def test_kernels_in_nested_child_graphs_snapshot_each_replay(workdir, tmp_path):
    """graph_nodes: bump -> child { fill -> child { scale(z, 3) } } -> offset(z, d), replayed
    4 times. The copy nodes go into cudump's copies of the child graphs: fill leaves
    0.5 i + r, scale finds that and leaves 3 times it, replay by replay; offset adds 1, and
    5 in replay 4 (cudaGraphExecKernelNodeSetParams). The program's results are its own. A
    graph made for device launch is named once."""
    rule = tmp_path / "nested.yaml"
    rule.write_text("rules:\n"
                    "  - kernel: scale\n    args: [0]\n    when: both\n    format: npy\n"
                    "    overrides:\n      0: {count: arg2}\n"
                    "  - kernel: fill\n    args: [0]\n    when: after\n    format: npy\n"
                    "    overrides:\n      0: {count: arg2}\n"
                    "  - kernel: offset\n    args: [0]\n    when: after\n    format: npy\n"
                    "    overrides:\n      0: {count: arg2}\n")
    bare = run(sample("graph_nodes"), workdir)
    assert bare.returncode == 0, bare.stderr
    out = tmp_path / "run"
    ran = run(under_cudump(sample("graph_nodes"), out, rules=[rule]), workdir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout
    records = read_manifest(out)
    assert all(r.status == "ok" for r in records), [r.reason for r in records]
    seen = sorted((r.kernel.split("(")[0], r.extra["replay"], r.extra["node"], r.phase)
                  for r in records)
    replays = (1, 2, 3, 4)
    assert seen == sorted([("fill", k, 1, "after") for k in replays]
                          + [("offset", k, 3, "after") for k in replays]
                          + [("scale", k, 2, phase) for k in replays
                             for phase in ("before", "after")])
    i = np.arange(1024, dtype=np.float32)
    for r in records:
        assert r.extra["graph"] == 1
        filled = 0.5 * i + r.extra["replay"]
        want = filled
        if r.kernel.startswith("scale") and r.phase == "after":
            want = 3 * filled
        elif r.kernel.startswith("offset"):
            want = 3 * filled + (5 if r.extra["replay"] == 4 else 1)
        assert np.array_equal(npy(out, r), want.astype(np.float32)), (r.kernel, r.phase)
    warnings = [ln for ln in ran.stderr.splitlines() if "device launch" in ln]
    assert len(warnings) == 1 and warnings[0].startswith("cudump: warning: graph 2 of process")
