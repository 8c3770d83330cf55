"""cudump's kernel waiting on the GPU (shim/toollaunch.h): on Hopper and later, right after a
launch of the program's made plainly, cudump's kernel is launched with programmatic stream
serialization, its blocks waiting in griddepcontrol.wait for that launch to be done. The
digests it makes so are those of the same program where every launch of it is made plainly:
with --flight, whose mark on the stream after each launch keeps cudump's kernel from
following the program's directly (samples/torch_forward.py, ResNet-18 inference, cuDNN
deterministic)."""

from __future__ import annotations

import json

import pytest
from gpurun import run, sample, under_cudump
from records import digests_by_buffer

pytestmark = pytest.mark.gpu


def compute_major() -> int:
    from cuda.bindings import driver as cu
    assert cu.cuInit(0)[0] == cu.CUresult.CUDA_SUCCESS
    rc, major = cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0)
    assert rc == cu.CUresult.CUDA_SUCCESS
    return major


def test_digests_made_waiting_on_the_gpu_are_those_made_plainly(workdir, tmp_path):
    pytest.importorskip("torchvision")
    if compute_major() < 9:
        pytest.skip("programmatic dependent launch needs compute capability 9 or more")
    cmd = [*sample("torch_forward.py"), "resnet18", "--iters", "4", "--warmup", "2"]
    runs = {}
    for name, extra in (("waiting", ["--digest"]), ("plain", ["--digest", "--flight"])):
        ran = run(under_cudump(cmd, tmp_path / name, extra=extra), workdir, timeout=300)
        assert ran.returncode == 0, ran.stderr[-3000:]
        runs[name] = json.loads((tmp_path / name / "summary.json").read_text())
    assert runs["waiting"]["tools_waiting"] > 500
    assert runs["plain"]["tools_waiting"] == 0
    assert runs["waiting"]["digests"] == runs["plain"]["digests"] > 1000

    a = digests_by_buffer(tmp_path / "waiting")
    b = digests_by_buffer(tmp_path / "plain")
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k] != b[k]]
    # As in test_gpu_scans_ahead: a few digests of a block's unused tail may differ from
    # process to process; a kernel that read before the launch it follows was done would
    # make many differ.
    assert len(differ) <= len(a) // 100, (len(differ), len(a), differ[:5])
