"""Tests of cudump/analysis/replay_engine/: the launch spec, parameter patching, comparing, and
whole replays on the host-memory stand-in for libcuda.so.1 (in subprocesses: cuda.bindings
loads the driver once per process, and the stand-in must never enter the test process)."""

from __future__ import annotations

import ast
import copy
import ctypes.util
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakecuda_build import FakeCuda

from cudump.analysis import replay_engine as re_
from cudump.analysis.replay_engine import (
    Buffer,
    LaunchSpec,
    Pointer,
    Region,
    ReplayError,
    SpecError,
    compare,
    patch_params,
)
from cudump.analysis.replay_engine import replay as replay_module

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "cudump" / "analysis" / "replay_engine"

VECADD = "_Z6vecAddPKfS0_Pfi"
VECADD_NAME = "vecAdd(float const*, float const*, float*, int)"
NV12 = "_Z12nv12_to_uyvyPKhjPhjjj"
ADD3 = "_Z4add3St5arrayIPfLm3EEi"
EMPTY = "_Z5emptyv"

needs_driver = pytest.mark.skipif(
    shutil.which("cc") is None or importlib.util.find_spec("cuda.bindings") is None,
    reason="needs a C compiler (cc) for the stand-in driver and cuda-bindings",
)


# ---------------------------------------------------------------- building launches


def u32(v: int) -> bytes:
    return int(v).to_bytes(4, "little")


def i32(v: int) -> bytes:
    return int(v).to_bytes(4, "little", signed=True)


def f32(v: float) -> bytes:
    return np.float32(v).tobytes()


PLACEHOLDER = bytes(8)  # a pointer word: patched by the replay


def linear_buffer(arg: int, region: int, array: np.ndarray, *, offset: int = 0, delta: int = 0,
                  before: str | None = None, after: str | None = None) -> dict[str, Any]:
    return {"arg": arg, "offset": offset, "region": region, "delta": delta,
            "width": array.nbytes, "height": 1, "pitch": array.nbytes,
            "dtype": str(array.dtype), "shape": list(array.shape), "before": before,
            "after": after}


def launch(mangled: str, kernel: str, grid: list[int], block: list[int],
           params: list[bytes], layout: list[list[int]], regions: list[dict[str, Any]],
           pointers: list[dict[str, Any]], buffers: list[dict[str, Any]],
           smem: int = 0) -> dict[str, Any]:
    return {"format": "cudump-launch/1", "kernel": kernel, "mangled": mangled,
            "image": "module.fatbin", "image_format": "fatbin", "grid": grid, "block": block,
            "smem": smem, "params": b"".join(params).hex(), "layout": layout,
            "regions": regions, "pointers": pointers, "buffers": buffers}


def write_folder(folder: Path, spec: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "launch.json").write_text(json.dumps(spec, indent=1))
    (folder / spec["image"]).write_bytes(b"\x50\xed\x55\xba fake fatbin")
    for name, array in arrays.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        np.save(folder / name, array)
    return folder


def vecadd_folder(folder: Path, n: int = 1000, seed: int = 0) -> tuple[Path, np.ndarray]:
    """vecAdd over three regions; returns the folder and the expected c."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c_before = np.full(n, 7.0, np.float32)
    c = a + b
    spec = launch(
        VECADD, VECADD_NAME, [(n + 127) // 128, 1, 1], [128, 1, 1],
        [PLACEHOLDER, PLACEHOLDER, PLACEHOLDER, i32(n)], [[0, 8], [8, 8], [16, 8], [24, 4]],
        [{"size": 4 * n, "kind": "linear"} for _ in range(3)],
        [{"arg": i, "offset": 0, "region": i, "delta": 0} for i in range(3)],
        [linear_buffer(0, 0, a, before="buffers/arg0-before.npy",
                       after="buffers/arg0-after.npy"),
         linear_buffer(1, 1, b, before="buffers/arg1-before.npy",
                       after="buffers/arg1-after.npy"),
         linear_buffer(2, 2, c, before="buffers/arg2-before.npy",
                       after="buffers/arg2-after.npy")])
    arrays = {"buffers/arg0-before.npy": a, "buffers/arg0-after.npy": a,
              "buffers/arg1-before.npy": b, "buffers/arg1-after.npy": b,
              "buffers/arg2-before.npy": c_before, "buffers/arg2-after.npy": c}
    return write_folder(folder, spec, arrays), c


@pytest.fixture
def replay_run(fake: FakeCuda, tmp_path: Path):
    """Runs `python -m cudump.analysis.replay_engine ARGS` on the stand-in driver."""

    def run(*args: str | Path, module: bool = True) -> subprocess.CompletedProcess[str]:
        env = fake.env()
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        head = ([sys.executable, "-m", "cudump.analysis.replay_engine"] if module
                else [sys.executable])
        return subprocess.run([*head, *map(str, args)], env=env, capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)

    return run


@pytest.fixture
def python_run(fake: FakeCuda, tmp_path: Path):
    """Runs a Python snippet on the stand-in driver, with cudump importable."""

    def run(code: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
        env = fake.env()
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env,
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)

    return run


# ---------------------------------------------------------------- whole replays


@needs_driver
def test_vecadd_replays_to_the_expected_sum(replay_run, tmp_path: Path) -> None:
    folder, _ = vecadd_folder(tmp_path / "vecadd")
    done = replay_run(folder)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        "arg0 (float32 [1000]): equal to the captured after",
        "arg1 (float32 [1000]): equal to the captured after",
        "arg2 (float32 [1000]): equal to the captured after",
    ]


@needs_driver
def test_wrong_after_exits_1_and_counts_the_differences(replay_run, tmp_path: Path) -> None:
    folder, c = vecadd_folder(tmp_path / "vecadd")
    wrong = c.copy()
    wrong[[17, 400, 999]] += np.float32(1.0)
    np.save(folder / "buffers/arg2-after.npy", wrong)
    done = replay_run(folder)
    assert done.returncode == 1, done.stderr
    line = done.stdout.splitlines()[2]
    assert line == (f"arg2 (float32 [1000]): 3 of 1000 elements differ from the captured "
                    f"after; first at index (17,): {c[17]} != {wrong[17]}")


@needs_driver
def test_copied_script_replays_its_own_folder(replay_run, tmp_path: Path) -> None:
    folder, _ = vecadd_folder(tmp_path / "extract")
    for name in re_.FILES:
        shutil.copy(ENGINE / name, folder / name)
    done = replay_run(folder / "replay.py", module=False)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 3


@needs_driver
def test_pointers_into_one_region_keep_their_deltas(replay_run, tmp_path: Path) -> None:
    n = 256
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 0.5, np.float32)
    c = a + b
    whole_before = np.concatenate([a, b, np.zeros(n, np.float32)])
    whole_after = np.concatenate([a, b, c])
    spec = launch(
        VECADD, VECADD_NAME, [2, 1, 1], [128, 1, 1],
        [PLACEHOLDER, PLACEHOLDER, PLACEHOLDER, i32(n)], [[0, 8], [8, 8], [16, 8], [24, 4]],
        [{"size": 12 * n, "kind": "linear"}],
        [{"arg": 0, "offset": 0, "region": 0, "delta": 0},
         {"arg": 1, "offset": 0, "region": 0, "delta": 4 * n},
         {"arg": 2, "offset": 0, "region": 0, "delta": 8 * n}],
        [linear_buffer(0, 0, whole_before, before="whole-before.npy", after="whole-after.npy"),
         linear_buffer(2, 0, c, delta=8 * n, after="c-after.npy")])
    folder = write_folder(tmp_path / "alias", spec, {"whole-before.npy": whole_before,
                                                     "whole-after.npy": whole_after,
                                                     "c-after.npy": c})
    done = replay_run(folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "arg0 (float32 [768]): equal to the captured after",
        "arg2 (float32 [256]): equal to the captured after",
    ]


@needs_driver
def test_pointers_inside_a_struct_parameter(replay_run, tmp_path: Path) -> None:
    # add3(std::array<float*, 3> p, int n): p[0][i] = p[1][i] + p[2][i]
    n = 100
    x = np.linspace(0, 1, n, dtype=np.float32)
    y = np.linspace(5, -5, n, dtype=np.float32)
    out = x + y
    spec = launch(
        ADD3, "add3(std::array<float*, 3ul>, int)", [1, 1, 1], [128, 1, 1],
        [PLACEHOLDER * 3, i32(n)], [[0, 24], [24, 4]],
        [{"size": 4 * n} for _ in range(3)],
        [{"arg": 0, "offset": 8 * k, "region": k, "delta": 0} for k in range(3)],
        [linear_buffer(0, 0, out, after="out.npy"),
         linear_buffer(0, 1, x, offset=8, before="x.npy"),
         linear_buffer(0, 2, y, offset=16, before="y.npy")])
    folder = write_folder(tmp_path / "add3", spec, {"out.npy": out, "x.npy": x, "y.npy": y})
    done = replay_run(folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "arg0 (float32 [100]): equal to the captured after\n"


def nv12_folder(folder: Path, width: int, height: int, nv12_pitch: int,
                uyvy_pitch: int) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(3)
    nv12 = rng.integers(0, 256, (height * 3 // 2, width), dtype=np.uint8)
    luma, chroma = nv12[:height], nv12[height:]
    uyvy = np.empty((height, 2 * width), np.uint8)
    uyvy[:, 0::4] = np.repeat(chroma[:, 0::2], 2, axis=0)
    uyvy[:, 1::4] = luma[:, 0::2]
    uyvy[:, 2::4] = np.repeat(chroma[:, 1::2], 2, axis=0)
    uyvy[:, 3::4] = luma[:, 1::2]
    rows = height * 3 // 2
    spec = launch(
        NV12, "nv12_to_uyvy(unsigned char const*, unsigned int, unsigned char*, unsigned int, "
              "unsigned int, unsigned int)",
        [width // 2 // 16, height // 8, 1], [16, 8, 1],
        [PLACEHOLDER, u32(nv12_pitch), PLACEHOLDER, u32(uyvy_pitch), u32(width), u32(height)],
        [[0, 8], [8, 4], [16, 8], [24, 4], [28, 4], [32, 4]],
        [{"size": nv12_pitch * rows, "kind": "pitched", "pitch": nv12_pitch, "width": width,
          "height": rows, "elem": 4},
         {"size": uyvy_pitch * height, "kind": "pitched", "pitch": uyvy_pitch,
          "width": 2 * width, "height": height, "elem": 4}],
        [{"arg": 0, "offset": 0, "region": 0, "delta": 0},
         {"arg": 2, "offset": 0, "region": 1, "delta": 0}],
        [{"arg": 0, "offset": 0, "region": 0, "delta": 0, "width": width, "height": rows,
          "pitch": nv12_pitch, "dtype": "uint8", "shape": [rows, width],
          "before": "nv12.npy", "after": None},
         {"arg": 2, "offset": 0, "region": 1, "delta": 0, "width": 2 * width,
          "height": height, "pitch": uyvy_pitch, "dtype": "uint8",
          "shape": [height, 2 * width], "before": None, "after": "uyvy.npy"}])
    return write_folder(folder, spec, {"nv12.npy": nv12, "uyvy.npy": uyvy}), uyvy


PITCHED_SCRIPT = """
import sys
from pathlib import Path
import numpy as np
from cudump.analysis.replay_engine import LaunchSpec, Replayer, main
folder = Path(sys.argv[1])
spec = LaunchSpec.load(folder)
before = [np.load(folder / b.before) if b.before else None for b in spec.buffers]
with Replayer(spec, (folder / spec.image).read_bytes()) as r:
    print(r.pitched_as_pitched)
    out = r.run(before)
    print(out[1].shape, bool((out[1] == np.load(folder / "uyvy.npy")).all()))
sys.exit(main([str(folder)]))
"""


@needs_driver
def test_pitched_regions_round_trip_their_rows(python_run, tmp_path: Path) -> None:
    # The stand-in's cuMemAllocPitch rounds rows to 512 bytes: the NV12 region's
    # captured pitch matches it, the UYVY region's 160 does not (plain cuMemAlloc).
    folder, _ = nv12_folder(tmp_path / "nv12", width=64, height=32, nv12_pitch=512,
                            uyvy_pitch=160)
    done = python_run(PITCHED_SCRIPT, folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "[True, False]",
        "(32, 128) True",
        "arg2 (uint8 [32, 128]): equal to the captured after",
    ]


@needs_driver
def test_every_run_starts_from_the_captured_before(replay_run, tmp_path: Path) -> None:
    # scale(float* x, float s, int n) works in place: a second run that did not start
    # again from `before` would give x * s * s.
    x = np.arange(64, dtype=np.float32)
    spec = launch(
        "scale", "scale(float*, float, int)", [1, 1, 1], [64, 1, 1],
        [PLACEHOLDER, f32(2.0), i32(64)], [[0, 8], [8, 4], [12, 4]],
        [{"size": 4096}], [{"arg": 0, "offset": 0, "region": 0, "delta": 128}],
        [linear_buffer(0, 0, x, delta=128, before="x-before.npy", after="x-after.npy")])
    folder = write_folder(tmp_path / "scale", spec, {"x-before.npy": x,
                                                     "x-after.npy": x * np.float32(2)})
    done = replay_run(folder, "--runs", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "run 1: arg0 (float32 [64]): equal to the captured after",
        "run 2: arg0 (float32 [64]): equal to the captured after",
        "run 3: arg0 (float32 [64]): equal to the captured after",
        "all 3 runs gave the same buffers",
    ]


@needs_driver
def test_missing_kernel_exits_2_with_one_line(replay_run, tmp_path: Path) -> None:
    folder, _ = vecadd_folder(tmp_path / "vecadd")
    spec = json.loads((folder / "launch.json").read_text())
    spec["mangled"] = "_Z3foov"
    (folder / "launch.json").write_text(json.dumps(spec))
    done = replay_run(folder)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == ("replay: cuModuleGetFunction(_Z3foov) failed: CUDA_ERROR_NOT_FOUND "
                           "(500): the image has no kernel of that name\n")


@needs_driver
def test_block_past_cudas_limits_exits_2_before_the_launch(replay_run, tmp_path: Path) -> None:
    folder, _ = vecadd_folder(tmp_path / "vecadd")
    spec = json.loads((folder / "launch.json").read_text())
    for block, problem in (([2048, 1, 1], "block x is 2048, more than CUDA allows (1024)"),
                           ([64, 32, 1], "block has 2048 threads, more than CUDA allows in a "
                                         "block (1024)")):
        spec["block"] = block
        (folder / "launch.json").write_text(json.dumps(spec))
        done = replay_run(folder)
        assert done.returncode == 2
        assert (done.stdout, done.stderr) == ("", f"replay: launch.json: {problem}\n")


SMEM_SCRIPT = """
import sys
from pathlib import Path
from cuda.bindings import driver
from cudump.analysis.replay_engine import LaunchSpec, Replayer, ReplayError
folder = Path(sys.argv[1])
spec = LaunchSpec.load(folder)
attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
with Replayer(spec, b"image") as r:
    print(driver.cuFuncGetAttribute(attr, r.function)[1], r.run([]))
spec = LaunchSpec.from_json({**spec.to_json(), "smem": 300000})
try:
    Replayer(spec, b"image")
except ReplayError as e:
    print(e)
"""


@needs_driver
def test_large_dynamic_shared_memory_is_opted_into(python_run, tmp_path: Path) -> None:
    spec = launch(EMPTY, "empty()", [1, 1, 1], [32, 1, 1], [], [], [], [], [], smem=65536)
    folder = write_folder(tmp_path / "empty", spec, {})
    done = python_run(SMEM_SCRIPT, folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "65536 []",
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, 300000) failed: "
        "CUDA_ERROR_INVALID_VALUE (1): this GPU cannot give the kernel that much dynamic "
        "shared memory",
    ]


def test_missing_cuda_bindings_is_one_line(tmp_path: Path) -> None:
    folder, _ = vecadd_folder(tmp_path / "vecadd")
    code = ("import sys; sys.modules['cuda.bindings'] = None; sys.modules['cuda'] = None\n"
            "from cudump.analysis.replay_engine import main\n"
            "sys.exit(main([sys.argv[1]]))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code, str(folder)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "replay: cuda.bindings is not installed: pip install cuda-python\n"


# ---------------------------------------------------------------- without a driver


def test_missing_launch_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert re_.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"replay: no launch.json in {tmp_path}: give the folder "
                                       "of an extracted launch\n")


def test_missing_npy_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = vecadd_folder(tmp_path / "vecadd")
    (folder / "buffers/arg1-before.npy").unlink()
    assert re_.main([str(folder)]) == 2
    assert capsys.readouterr().err == (f'replay: launch.json: buffers[1].before: '
                                       f'"{folder}/buffers/arg1-before.npy" is missing: the '
                                       'extract is incomplete\n')


def test_invalid_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "launch.json").write_text('{"format": ')
    assert re_.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("replay: launch.json: not valid JSON: ")


def test_the_shipped_files_are_the_engine_folder() -> None:
    # Every file but the package's own (__init__.py, __main__.py) ships, the entry first.
    assert sorted(re_.FILES) == sorted(p.name for p in ENGINE.glob("*.py")
                                       if not p.name.startswith("__"))
    assert re_.FILES[0] == "replay.py"
    assert [p.name for p in re_.shipped_files()] == list(re_.FILES)
    assert all(p.is_file() for p in re_.shipped_files())


def engine_imports(name: str) -> tuple[set[str], set[str], set[str]]:
    """What one shipped file imports: modules by absolute name, siblings relatively and
    siblings by plain name (the two ways of each `if __package__:` import)."""
    tree = ast.parse((ENGINE / name).read_text())
    siblings = {f.removesuffix(".py") for f in re_.FILES}
    top: set[str] = set()
    relative: set[str] = set()
    plain: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            top.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                assert node.level == 1 and node.module in siblings, f"{name}: {node.module}"
                relative.add(node.module)
            elif node.module in siblings:
                plain.add(node.module)
            else:
                top.add(node.module or "")
    return top, relative, plain


@pytest.mark.parametrize("name", re_.FILES)
def test_imports_only_the_standard_library_numpy_cuda_bindings_and_siblings(name: str) -> None:
    top, relative, plain = engine_imports(name)
    allowed = set(sys.stdlib_module_names) | {"numpy", "cuda.bindings", "__future__"}
    assert {m for m in top if m.split(".")[0] not in allowed and m not in allowed} == set()
    assert relative == plain  # the same siblings, whichever way the file is run
    assert "replay" not in relative  # the entry runs as __main__: nothing imports it


def test_only_the_driver_imports_cuda_bindings_and_only_inside_a_function() -> None:
    for name in re_.FILES:
        top, _, _ = engine_imports(name)
        assert ("cuda.bindings" in top) == (name == "replay_driver.py"), name
        # The module imports without cuda.bindings.
        tree = ast.parse((ENGINE / name).read_text())
        assert all(not (isinstance(n, ast.ImportFrom) and n.module == "cuda.bindings")
                   for n in tree.body)


LINEAR_2K = {"size": 2048, "kind": "linear", "pitch": 0, "width": 0, "height": 0, "elem": 0}


def make_spec(**changes: Any) -> dict[str, Any]:
    spec = launch(
        VECADD, VECADD_NAME, [4, 1, 1], [128, 1, 1],
        [PLACEHOLDER, PLACEHOLDER, PLACEHOLDER, i32(512)], [[0, 8], [8, 8], [16, 8], [24, 4]],
        [dict(LINEAR_2K), dict(LINEAR_2K),
         {"size": 4096, "kind": "pitched", "pitch": 1024, "width": 1000, "height": 4,
          "elem": 4}],
        [{"arg": 0, "offset": 0, "region": 0, "delta": 0},
         {"arg": 1, "offset": 0, "region": 1, "delta": 0},
         {"arg": 2, "offset": 0, "region": 2, "delta": 16}],
        [{"arg": 2, "offset": 0, "region": 2, "delta": 16, "width": 1000, "height": 3,
          "pitch": 1024, "dtype": "float32", "shape": [3, 250], "before": None,
          "after": "c.npy"}])
    spec.update(changes)
    return spec


def test_spec_round_trips_through_json(tmp_path: Path) -> None:
    obj = make_spec(note="kept")
    spec = LaunchSpec.from_json(obj)
    assert spec.grid == (4, 1, 1) and spec.smem == 0
    assert spec.regions[2] == Region(4096, "pitched", 1024, 1000, 4, 4)
    assert spec.pointers[2] == Pointer(2, 0, 2, 16)
    assert spec.buffers[0] == Buffer(2, 0, 2, 16, 1000, 3, 1024, "float32", (3, 250), None,
                                     "c.npy")
    assert spec.param_bytes()[3] == i32(512)
    assert spec.to_json() == obj
    assert LaunchSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    (tmp_path / "launch.json").write_text(json.dumps(obj))
    assert LaunchSpec.load(tmp_path) == spec


def with_item(key: str, index: int, **changes: Any) -> dict[str, Any]:
    spec = make_spec()
    items = copy.deepcopy(spec[key])
    items[index].update(changes)
    spec[key] = items
    return spec


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (make_spec(format="cudump-launch/2"),
         'launch.json: format is "cudump-launch/2", not "cudump-launch/1": this '
         "replay.py reads only that format"),
        ({k: v for k, v in make_spec().items() if k != "mangled"},
         "launch.json: mangled is missing"),
        (make_spec(image_format="elf"),
         'launch.json: image_format must be one of cubin, fatbin, ptx, not "elf"'),
        (make_spec(grid=[4, 1]), "launch.json: grid must be 3 positive integers, not [4, 1]"),
        (make_spec(block=[0, 1, 1]),
         "launch.json: block must be 3 positive integers, not [0, 1, 1]"),
        (make_spec(smem=-1), "launch.json: smem must be at least 0, not -1"),
        (make_spec(params="zz"), "launch.json: params is not a hex string"),
        (make_spec(params="00" * 27),
         "launch.json: params holds 27 bytes but the layout's 4 parameters take 28"),
        (make_spec(layout=[[0, 8], [4, 8], [16, 8], [24, 4]]),
         "launch.json: layout[1] offset 4 overlaps the parameter before it (which ends at 8)"),
        (make_spec(layout=[[0, 8], [8, 8], [16, 8], [24]]),
         "launch.json: layout[3] must be [offset, size] with size > 0, not [24]"),
        (with_item("regions", 1, size=0), "launch.json: regions[1].size must be at least 1, "
                                          "not 0"),
        (with_item("regions", 0, kind="managed"),
         'launch.json: regions[0].kind must be one of linear, pitched, not "managed"'),
        (with_item("regions", 2, pitch=512),
         "launch.json: regions[2].pitch 512 is less than its width 1000"),
        (with_item("pointers", 2, region=5),
         "launch.json: pointers[2].region 5 does not exist (3 regions)"),
        (with_item("pointers", 1, arg=4),
         "launch.json: pointers[1].arg 4 does not exist (4 parameters)"),
        (with_item("pointers", 0, offset=4),
         "launch.json: pointers[0].offset 4: an 8-byte pointer there does not fit in "
         "parameter 0 (8 bytes)"),
        (with_item("pointers", 0, delta=4096),
         "launch.json: pointers[0].delta 4096 is past the end of region 0 (2048 bytes)"),
        (with_item("pointers", 0, delta="0"),
         'launch.json: pointers[0].delta must be an integer, not "0"'),
        (with_item("buffers", 0, dtype="float33"),
         'launch.json: buffers[0].dtype "float33" is not a numpy dtype of plain data'),
        (with_item("buffers", 0, shape=[3, 200]),
         "launch.json: buffers[0] holds 3000 bytes (3 x 1000) but float32 [3, 200] is 2400 "
         "bytes"),
        (with_item("buffers", 0, delta=100, height=4, shape=[4, 250]),
         "launch.json: buffers[0] ends at byte 4172 of region 2, which has 4096 bytes"),
        (with_item("buffers", 0, region=3),
         "launch.json: buffers[0].region 3 does not exist (3 regions)"),
        (with_item("buffers", 0, after=5),
         "launch.json: buffers[0].after must be a file name or null, not 5"),
        (make_spec(pointers={"arg": 0}), 'launch.json: pointers must be a list, not {"arg": 0}'),
        ([], "launch.json: must hold a JSON object, not list"),
        (make_spec(grid=[2**40, 1, 1]),
         "launch.json: grid x is 1099511627776, more than CUDA allows (2147483647)"),
        (make_spec(grid=[1, 65536, 1]), "launch.json: grid y is 65536, more than CUDA allows "
                                        "(65535)"),
        (make_spec(block=[1, 1, 65]), "launch.json: block z is 65, more than CUDA allows (64)"),
        (make_spec(smem=2**32), "launch.json: smem must be at most 4294967295, not 4294967296"),
        (with_item("regions", 0, size=2**70),
         "launch.json: regions[0].size must be at most 281474976710656, not "
         "1180591620717411303424"),
        (make_spec(params="aa bb"), "launch.json: params is not a hex string"),
        (make_spec(params="00" * 40000),
         "launch.json: params holds 40000 bytes, more than a launch may have (32764)"),
        (make_spec(layout=[[0, 8], [8, 8], [16, 8], [32762, 4]]),
         "launch.json: layout[3] ends at byte 32766, past the 32764 bytes a launch's "
         "parameters may take"),
        (with_item("buffers", 0, dtype="(2,)f4"),
         'launch.json: buffers[0].dtype "(2,)f4" is not a numpy dtype of plain data'),
        (with_item("buffers", 0, dtype="f4,i4"),
         'launch.json: buffers[0].dtype "f4,i4" is not a numpy dtype of plain data'),
        (with_item("buffers", 0, shape=[1] * 33),
         "launch.json: buffers[0].shape must be a list of at most 32 sizes (0 to "
         "281474976710656), not a list of 33 items"),
        (with_item("buffers", 0, offset=8),
         "launch.json: buffers[0].offset 8 is past the end of parameter 2 (8 bytes)"),
        (make_spec(mangled="_Z1k\0"), "launch.json: mangled holds a NUL character"),
        (make_spec(kernel="k\udc80"), "launch.json: kernel is not valid Unicode text"),
        (make_spec(kernel="k\x1b[2J(int)"), "launch.json: kernel holds a control character"),
        (make_spec(image="module\x9b.fatbin"),
         "launch.json: image holds a control character"),
    ],
)
def test_spec_errors_name_the_field(obj: Any, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        LaunchSpec.from_json(obj)
    assert str(caught.value) == message
    assert isinstance(caught.value, ReplayError)


def test_patch_params_replaces_only_pointer_words() -> None:
    spec = LaunchSpec.from_json(make_spec(params=(b"\xaa" * 24 + i32(512)).hex()))
    params = patch_params(spec, [0x7F00_0000_0000, 0x7F00_0000_1000, 0x7F00_0000_2000])
    assert params == [
        (0x7F00_0000_0000).to_bytes(8, "little"),
        (0x7F00_0000_1000).to_bytes(8, "little"),
        (0x7F00_0000_2000 + 16).to_bytes(8, "little"),
        i32(512),
    ]


def test_patch_params_at_offsets_inside_a_struct() -> None:
    # One 32-byte struct holding a size, then two pointers into one region, then a tail.
    raw = u32(77) + u32(0xDEADBEEF) + PLACEHOLDER + PLACEHOLDER + b"\x11" * 8
    spec = LaunchSpec.from_json({
        "format": "cudump-launch/1", "kernel": "k(S)", "mangled": "_Z1k1S", "image": "m",
        "image_format": "cubin", "grid": [1, 1, 1], "block": [1, 1, 1], "params": raw.hex(),
        "layout": [[0, 32]], "regions": [{"size": 100}],
        "pointers": [{"arg": 0, "offset": 8, "region": 0, "delta": 0},
                     {"arg": 0, "offset": 16, "region": 0, "delta": 100}]})
    (param,) = patch_params(spec, [0x1234_5678_9000])
    assert param == (u32(77) + u32(0xDEADBEEF) + (0x1234_5678_9000).to_bytes(8, "little")
                     + (0x1234_5678_9064).to_bytes(8, "little") + b"\x11" * 8)
    assert spec.params == raw  # the spec itself is untouched


def test_patch_params_without_pointers_and_with_wrong_address_count() -> None:
    spec = LaunchSpec.from_json(make_spec(pointers=[]))
    assert b"".join(patch_params(spec, [1, 2, 3])) == spec.params
    with pytest.raises(ReplayError, match="2 region addresses given for 3 regions"):
        patch_params(spec, [1, 2])


def test_compare_is_bit_for_bit() -> None:
    buffer = Buffer(0, 0, 0, 0, 16, 1, 16, "float32", (4,))
    nan = np.array([np.nan, 1.0, -0.0, 2.0], np.float32)
    assert compare(buffer, nan, nan.copy()) is None  # same NaN bits are equal
    other_nan = nan.copy()
    other_nan.view(np.uint32)[0] ^= 1  # another NaN payload
    assert compare(buffer, nan, other_nan) == (
        "1 of 4 elements differ from the captured after; first at index (0,): nan != nan")
    zero = nan.copy()
    zero[2] = 0.0
    assert compare(buffer, nan, zero) == (
        "1 of 4 elements differ from the captured after; first at index (2,): -0.0 != 0.0")


def test_compare_names_a_multi_dimensional_index() -> None:
    buffer = Buffer(0, 0, 0, 0, 12, 2, 12, "int32", (2, 3))
    want = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = want.copy()
    got[1, 1] = 40
    got[1, 2] = 50
    assert compare(buffer, got, want) == (
        "2 of 6 elements differ from the captured after; first at index (1, 1): 40 != 4")


class ScriptedReplayer:
    """Stands in for Replayer in replay(): hands out prepared results run after run."""

    results: list[list[np.ndarray]] = []

    def __init__(self, spec: LaunchSpec, image: bytes, device: int = 0) -> None:
        self.runs = iter(ScriptedReplayer.results)

    def run(self, before: list[np.ndarray | None]) -> list[np.ndarray]:
        return next(self.runs)

    def __enter__(self) -> ScriptedReplayer:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_runs_that_differ_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    folder, c = vecadd_folder(tmp_path / "vecadd", n=8)
    a = np.load(folder / "buffers/arg0-before.npy")
    b = np.load(folder / "buffers/arg1-before.npy")
    drifted = c.copy()
    drifted[3] = np.nextafter(drifted[3], np.float32(np.inf))
    ScriptedReplayer.results = [[a, b, c], [a, b, c], [a, b, drifted]]
    monkeypatch.setattr(replay_module, "Replayer", ScriptedReplayer)
    assert re_.main([str(folder), "--runs", "3"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:6] == [f"run {r}: arg{i} (float32 [8]): equal to the captured after"
                         for r in (1, 2) for i in range(3)]
    assert lines[8].startswith("run 3: arg2 (float32 [8]): 1 of 8 elements differ from the "
                               "captured after; first at index (3,): ")
    assert lines[9:] == ["runs 1 and 3 differ in arg2: the kernel is not deterministic"]


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None,
                    reason="a real CUDA driver is installed here")
def test_missing_driver_is_one_line(tmp_path: Path) -> None:
    folder, _ = vecadd_folder(tmp_path / "vecadd")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "cudump.analysis.replay_engine", str(folder)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("replay: cannot load the CUDA driver libcuda.so.1 (")
    assert done.stderr.endswith("): install the NVIDIA driver, or put the folder that holds "
                                "libcuda.so.1 on LD_LIBRARY_PATH\n")


# ---------------------------------------------------------------- on a real GPU

# The same kernels as the stand-in's built-ins, with the same mangled names, so that
# the launch folders built above replay on a GPU with only the image swapped; and two
# of its own: one that needs more than 48 KiB of shared memory, one that faults.
KERNELS_CU = r"""
#include <array>
__global__ void vecAdd(const float* a, const float* b, float* c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void scale(float* x, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
__global__ void add3(std::array<float*, 3> p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[0][i] = p[1][i] + p[2][i];
}
__global__ void nv12_to_uyvy(const unsigned char* nv12, unsigned nv12_pitch, unsigned char* uyvy,
                             unsigned uyvy_pitch, unsigned width, unsigned height)
{
    unsigned x = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const unsigned char* yrow = nv12 + (size_t)y * nv12_pitch;
    const unsigned char* uvrow = nv12 + (size_t)(height + y / 2) * nv12_pitch;
    unsigned char* out = uyvy + (size_t)y * uyvy_pitch + 2 * (size_t)x;
    out[0] = uvrow[x]; out[1] = yrow[x]; out[2] = uvrow[x + 1]; out[3] = yrow[x + 1];
}
extern "C" __global__ void big_smem(float* out, int n)
{
    extern __shared__ float s[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = (float)i;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[n - 1 - i];
}
extern "C" __global__ void crash(int* p)
{
    p[threadIdx.x] = 1;
}
"""


def nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (str(p) for p in [Path("/usr/local/cuda/bin/nvcc")] if p.exists()), None)


@pytest.fixture(scope="module")
def gpu_images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """kernels.cu built for this GPU as cubin, fatbin and PTX."""
    compiler = nvcc()
    if compiler is None:
        pytest.skip("needs nvcc")
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from cuda.bindings import driver as d; "
                               "sys.exit(int(d.cuInit(0)[0]))"],
        capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip("no usable CUDA driver and GPU: "
                    + (probe.stderr.strip().splitlines() or ["?"])[-1][:200])
    out = tmp_path_factory.mktemp("kernels")
    source = out / "kernels.cu"
    source.write_text(KERNELS_CU)
    images = {}
    for fmt, flag in (("cubin", "-cubin"), ("fatbin", "-fatbin"), ("ptx", "-ptx")):
        images[fmt] = out / f"kernels.{fmt}"
        subprocess.run([compiler, flag, "-arch=native", "--expt-relaxed-constexpr", "-o",
                        str(images[fmt]), str(source)], check=True, timeout=300)
    return images


def use_image(folder: Path, images: dict[str, Path], fmt: str = "fatbin",
              **changes: Any) -> Path:
    spec = json.loads((folder / "launch.json").read_text())
    spec.update(image=images[fmt].name, image_format=fmt, **changes)
    (folder / "launch.json").write_text(json.dumps(spec))
    data = images[fmt].read_bytes()
    if fmt == "ptx":
        data = data.rstrip(b"\0")  # the replay must add the NUL cuModuleLoadData needs
    (folder / images[fmt].name).write_bytes(data)
    return folder


def gpu_replay(*args: str | Path, code: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    head = [sys.executable, "-c", code] if code else [sys.executable, "-m",
                                                      "cudump.analysis.replay_engine"]
    return subprocess.run([*head, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["cubin", "fatbin", "ptx"])
def test_gpu_vecadd_replays_from_each_image_format(gpu_images: dict[str, Path], tmp_path: Path,
                                                   fmt: str) -> None:
    folder, _ = vecadd_folder(tmp_path / "vecadd")
    use_image(folder, gpu_images, fmt)
    done = gpu_replay(folder, "--runs", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "all 2 runs gave the same buffers"


@pytest.mark.gpu
def test_gpu_aliasing_struct_pointers_and_in_place(gpu_images: dict[str, Path],
                                                   tmp_path: Path) -> None:
    # The folders of the stand-in tests, replayed by the real kernels.
    for name, test in (("alias", test_pointers_into_one_region_keep_their_deltas),
                       ("add3", test_pointers_inside_a_struct_parameter),
                       ("scale", test_every_run_starts_from_the_captured_before)):
        captured: list[Path] = []

        def keep(folder: Path, *args: str, module: bool = True,
                 _captured: list[Path] = captured) -> subprocess.CompletedProcess[str]:
            _captured.append(folder)
            use_image(folder, gpu_images)
            return gpu_replay(folder, *args)

        test(keep, tmp_path / name)
        assert captured, name


@pytest.mark.gpu
def test_gpu_pitched_regions(gpu_images: dict[str, Path], tmp_path: Path) -> None:
    folder, _ = nv12_folder(tmp_path / "nv12", width=64, height=32, nv12_pitch=512,
                            uyvy_pitch=160)
    use_image(folder, gpu_images)
    done = gpu_replay(folder, code=PITCHED_SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(", False]")  # 160 is no pitch cuMemAllocPitch gives
    assert lines[1:] == ["(32, 128) True", "arg2 (uint8 [32, 128]): equal to the captured after"]


@pytest.mark.gpu
def test_gpu_large_dynamic_shared_memory(gpu_images: dict[str, Path], tmp_path: Path) -> None:
    n = 20000  # 80000 bytes of shared memory
    out = np.arange(n, dtype=np.float32)[::-1].copy()
    spec = launch("big_smem", "big_smem", [1, 1, 1], [256, 1, 1], [PLACEHOLDER, i32(n)],
                  [[0, 8], [8, 4]], [{"size": 4 * n}],
                  [{"arg": 0, "offset": 0, "region": 0, "delta": 0}],
                  [linear_buffer(0, 0, out, after="out.npy")], smem=4 * n)
    folder = use_image(write_folder(tmp_path / "smem", spec, {"out.npy": out}), gpu_images)
    done = gpu_replay(folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "arg0 (float32 [20000]): equal to the captured after\n"


@pytest.mark.gpu
def test_gpu_kernel_fault_is_one_line(gpu_images: dict[str, Path], tmp_path: Path) -> None:
    # A pointer the capture did not see: left as captured, it points nowhere.
    spec = launch("crash", "crash", [1, 1, 1], [32, 1, 1], [(0x10).to_bytes(8, "little")],
                  [[0, 8]], [], [], [])
    folder = use_image(write_folder(tmp_path / "crash", spec, {}), gpu_images)
    done = gpu_replay(folder)
    assert done.returncode == 2
    assert done.stderr == ("replay: the kernel failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): it "
                           "reached memory outside the captured regions (a pointer the capture "
                           "did not see?); the context is unusable now, so the replay stops\n")
