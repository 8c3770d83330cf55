"""TMA tensor maps: a kernel that reaches its input only through a CUtensorMap passed by
value (the stand-in's tma_copy, as cuDNN's and CUTLASS's Hopper kernels do) has that input
snapshotted, digested and scanned with the map's exact extent, and `info args` says what the
map describes. The stand-in's `tensormaps` program: a float32 tensor of dims [64, 16, 2],
rows 512 bytes and planes 8192 bytes apart, 256 bytes into its allocation (span 16128
bytes, the allocation's rest 17152); element k holds k (the second tensor 1000 + k)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from records import manifest

from cudump.errors import GeometryError
from cudump.kernels.geometry import Allocation
from cudump.kernels.tensormaps import TensorMap, tensormap_plan
from cudump.launches.process import LaunchEvent
from cudump.policy.snapshot.repeat import repeat_keys

KERNEL = "tma_copy(float*, CUtensorMap_st)"
SPAN = 16128


def expected(first: float) -> np.ndarray:
    return first + np.arange(64 * 16 * 2, dtype=np.float32).reshape(2, 16, 64)


def rules(tmp_path: Path, args: str = "pointers") -> Path:
    path = tmp_path / "tma.yaml"
    path.write_text(f'rules:\n  - name: tma\n    kernel: "tma_copy*"\n    args: {args}\n'
                    "    when: both\n    format: npy\n")
    return path


@pytest.mark.parametrize("encoding", ["tiled", "im2col", "im2col_wide"])
def test_args_pointers_snapshots_the_tensor_a_map_describes(fake, cudump_run, tmp_path,
                                                            encoding):
    """The map's tensor, rows and planes at their strides, padding left out; after
    cuTensorMapReplaceAddress (launch 2), the tensor it points at then."""
    ran = cudump_run([str(fake.programs["tensormaps"]), "2", "0", "2", encoding], "--rule",
                     str(rules(tmp_path)))
    assert ran.returncode == 0, ran.stderr
    records = [r for r in manifest(ran.run_dir) if r["arg"] == 1]
    assert [(r["launch"], r["phase"]) for r in records] == [
        (1, "before"), (1, "after"), (2, "before"), (2, "after")]
    for r in records:
        assert (r["type"], r["dtype"], r["shape"], r["extent"]) == (
            "CUtensorMap", "float32", [2, 16, 64], "tensor-map")
        assert "offset" not in r   # the map is the whole parameter
        data = np.load(ran.run_dir / r["file"])
        assert np.array_equal(data, expected(0.0 if r["launch"] == 1 else 1000.0))
    assert records[0]["address"] != records[2]["address"]
    # the output pointer is snapshotted as ever, and holds what the map's tensor held
    out = [r for r in manifest(ran.run_dir) if r["arg"] == 0 and r["phase"] == "after"]
    assert np.array_equal(np.load(ran.run_dir / out[-1]["file"]).reshape(2, 16, 64),
                          expected(1000.0))


def test_maps_are_found_whatever_offset_the_driver_reports(fake, cudump_run, tmp_path):
    """A real driver may report parameter offsets that do not start at a multiple of 64 (an
    H100 gave 112 for a kernel's first parameter): the map is found all the same."""
    ran = cudump_run([str(fake.programs["tensormaps"]), "2", "0", "2", "tiled"], "--rule",
                     str(rules(tmp_path)), env_extra={"FAKECUDA_PARAM_BASE": "112"})
    assert ran.returncode == 0, ran.stderr
    records = [r for r in manifest(ran.run_dir) if r["arg"] == 1]
    assert [(r["launch"], r["phase"], r["extent"]) for r in records] == [
        (1, "before", "tensor-map"), (1, "after", "tensor-map"),
        (2, "before", "tensor-map"), (2, "after", "tensor-map")]
    assert np.array_equal(np.load(ran.run_dir / records[0]["file"]), expected(0.0))


def test_a_rule_naming_the_map_argument_takes_its_tensor(fake, cudump_run, tmp_path):
    ran = cudump_run([str(fake.programs["tensormaps"]), "1"], "--rule",
                     str(rules(tmp_path, "[1]")))
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert [(r["arg"], r["phase"], r["extent"]) for r in records] == [
        (1, "before", "tensor-map"), (1, "after", "tensor-map")]
    assert np.array_equal(np.load(ran.run_dir / records[0]["file"]), expected(0.0))


def test_digests_follow_the_map_and_its_tensor(fake, cudump_run):
    """The map's tensor is digested over its span: equal for the two launches through the
    first tensor, another after the map is pointed at the second."""
    ran = cudump_run([str(fake.programs["tensormaps"]), "3", "0", "3"], "--digest")
    assert ran.returncode == 0, ran.stderr
    maps = [r for r in manifest(ran.run_dir) if r["arg"] == 1]
    assert len(maps) == 6
    assert all(r["extent"] == "tensor-map" and r["bytes"] == 2 * 16 * 256 for r in maps)
    assert all((r["row_bytes"], r["rows"]) == (256, 32) for r in maps)
    by_launch = {r["launch"]: r["digest"] for r in maps if r["phase"] == "before"}
    assert by_launch[1] == by_launch[2] != by_launch[3]


def test_check_nan_scans_the_map_tensor_and_snapshots_it(fake, cudump_run):
    """A NaN placed in the map's memory before launch 3 is copied into the output: the
    output is the buffer that turned NaN, and the follow-up snapshot of every buffer the
    launch left includes the map's tensor, NaN and all."""
    ran = cudump_run([str(fake.programs["tensormaps"]), "4", "3"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    (producer,) = [r for r in records if "nonfinite" in r]
    assert (producer["launch"], producer["arg"], producer["first_nonfinite"]) == (3, 0, 5)
    # The map's tensor is an input like any other: it was non-finite before the launch.
    assert (producer["origin"], producer["from_arg"], producer["from_launch"]) == (
        "propagated", 1, None)
    snaps = {r["arg"]: r for r in records if r.get("file")}
    assert sorted(snaps) == [0, 1]
    tensor = np.load(ran.run_dir / snaps[1]["file"])
    assert snaps[1]["extent"] == "tensor-map" and tensor.shape == (2, 16, 64)
    assert np.isnan(tensor[0, 0, 5]) and np.isnan(tensor).sum() == 1


def test_info_args_describes_the_map(fake, cudump_run, tmp_path):
    commands = tmp_path / "commands.txt"
    commands.write_text("info args\ncontinue\ninfo args\n")
    ran = cudump_run([str(fake.programs["tensormaps"]), "2", "0", "2"], "--break", "tma_copy",
                     "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    lines = [ln for ln in (ran.stdout + ran.stderr).splitlines() if ln.startswith("  arg1")]
    assert len(lines) == 4
    head = ("  arg1  CUtensorMap = tiled float32 rank 3 dims [64, 16, 2] strides [512, 8192] "
            "-> 0x")
    assert all(ln.startswith(head) and ln.endswith(" (15.8 KiB)") for ln in lines)
    assert lines[0] == lines[1] != lines[2] == lines[3]   # cuTensorMapReplaceAddress


def test_a_map_in_a_graph_kernel_node_is_snapshotted(fake, cudump_run, bare_run, tmp_path):
    """tma_copy captured into a graph and replayed 3 times: the map's bytes are the kernel
    node's, so its tensor is copied by the instrumented graph's copy nodes, exactly; the
    replay after cuTensorMapReplaceAddress and cuGraphExecKernelNodeSetParams (replay 3)
    takes the second tensor. The program's own result is unchanged."""
    program = [str(fake.programs["tensormaps"]), "3", "0", "3", "tiled", "graph"]
    ran = cudump_run(program, "--rule", str(rules(tmp_path)))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    records = [r for r in manifest(ran.run_dir) if r["arg"] == 1]
    assert all(r["status"] == "ok" for r in records), [r.get("reason") for r in records]
    assert sorted((r["replay"], r["phase"]) for r in records) == [
        (replay, phase) for replay in (1, 2, 3) for phase in ("after", "before")]
    for r in records:
        assert (r["graph"], r["node"], r["extent"], r["shape"]) == (
            1, 0, "tensor-map", [2, 16, 64])
        data = np.load(ran.run_dir / r["file"])
        assert np.array_equal(data, expected(1000.0 if r["replay"] == 3 else 0.0))


def test_info_args_at_a_graph_kernel_node_describes_the_map(fake, cudump_run, tmp_path):
    commands = tmp_path / "commands.txt"
    commands.write_text("info args\ncontinue\ninfo args\n")
    ran = cudump_run([str(fake.programs["tensormaps"]), "2", "0", "2", "tiled", "graph"],
                     "--break", "tma_copy", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    out = ran.stdout + ran.stderr
    assert "(graph 1, replay 1, node 0)" in out and "(graph 1, replay 2, node 0)" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("  arg1")]
    head = ("  arg1  CUtensorMap = tiled float32 rank 3 dims [64, 16, 2] strides [512, 8192] "
            "-> 0x")
    # each stop's banner, then `info args`
    assert len(lines) == 4 and all(ln.startswith(head) for ln in lines)
    assert lines[0] == lines[1] != lines[2] == lines[3]   # the node was given the new map


def test_programs_without_maps_are_unchanged(fake, cudump_run, tmp_path):
    """No tensor map made: the launch reports none, and the other kernels' buffers are as
    they were (nans's vecAdd, three pointers)."""
    ran = cudump_run([str(fake.programs["nans"]), "1", "3"], "--digest")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert sorted({r["arg"] for r in records}) == [0, 1, 2]
    assert all(r.get("extent") != "tensor-map" for r in records)


# ---- the map's extent, without a program ---------------------------------------------------

ALLOC = Allocation(base=0x10000, size=0x10000, kind="linear")


def tmap(dims: tuple[int, ...], strides: tuple[int, ...], dtype: int = 7,
         address: int = 0x10100, alloc: Allocation | None = ALLOC) -> TensorMap:
    return TensorMap(arg=3, offset=0, address=address, encoding="tiled", dtype_code=dtype,
                     dims=dims, strides=strides, alloc=alloc)


def test_nested_strides_make_rows_at_the_first_stride() -> None:
    m = tmap((1024, 512), (4096,))
    assert m.span == 511 * 4096 + 4096
    assert m.describe() == ("tiled float32 rank 2 dims [1024, 512] strides [4096] -> 0x10100 "
                            "(2.0 MiB)")
    plan = tensormap_plan(tmap((64, 16, 2), (512, 8192)))
    assert (plan.width_bytes, plan.height, plan.pitch, plan.shape) == (256, 32, 512,
                                                                       (2, 16, 64))


def test_a_tight_tensor_is_one_run_and_gaps_are_taken_whole() -> None:
    plan = tensormap_plan(tmap((8, 4), (16,), dtype=6))   # float16, rows tight
    assert (plan.width_bytes, plan.height, plan.dtype, plan.shape) == (64, 1, "float16", (4, 8))
    # planes not nested on rows: the span whole, as elements
    plan = tensormap_plan(tmap((4, 2, 3), (64, 1024)))
    assert (plan.width_bytes, plan.height, plan.shape) == (2 * 1024 + 64 + 16, 1, (532,))
    assert plan.note is not None and "gaps" in plan.note
    bf16 = tensormap_plan(tmap((8,), (), dtype=9))
    assert bf16.dtype == "uint16" and bf16.note is not None and "bfloat16" in bf16.note


def test_dimensions_of_one_do_not_break_the_rows() -> None:
    """A batch of one (as cuBLASLt encodes a plain GEMM's operands) may have any stride:
    it is never stepped, so the rows still nest."""
    plan = tensormap_plan(tmap((8, 4, 1), (32, 0)))
    assert (plan.width_bytes, plan.height, plan.shape, plan.note) == (128, 1, (1, 4, 8), None)
    plan = tensormap_plan(tmap((8, 1, 4), (48, 64)))   # a middle 1: rows 64 bytes apart
    assert (plan.width_bytes, plan.height, plan.pitch, plan.shape) == (32, 4, 64, (4, 1, 8))


def test_a_map_outside_known_memory_is_not_copied() -> None:
    with pytest.raises(GeometryError, match="no tracked allocation"):
        tensormap_plan(tmap((8,), (), alloc=None))
    with pytest.raises(GeometryError, match="past its allocation"):
        tensormap_plan(tmap((1024, 512), (4096,)))
    with pytest.raises(GeometryError, match="empty"):
        tensormap_plan(tmap((0, 4), (16,)))


def test_a_repeated_plan_is_kept_by_the_maps_bytes() -> None:
    event = LaunchEvent(seq=1, occurrence=1, func_id=1, device=0, grid=(1, 1, 1),
                        block=(1, 1, 1), smem=0, stream=0, tid=1, api="cuLaunchKernel", flags=0,
                        rc=0, raw_args=[bytes(8), bytes(128)])
    event.pointers[(0, 0)] = ALLOC
    event.tensormaps[(1, 0)] = tmap((8,), ())
    assert repeat_keys(event) == ((0, 8), (8, 128))
