"""Scans ahead (shim/ahead.h, on unless --no-scans-ahead) on real models: a launch's scans
before it made with the scans after the launch before it. The reports, the first producer
and the digests are those of the same run without scans ahead, and scans ahead were used.

- samples/torch_resnet_nan.py (torchvision ResNet-18, three forwards: a kept plan is made
  again when a launch shows a buffer start it had not seen, which the first forward's every
  new buffer does, so scans are made ahead from the second): layer3.0.conv1 overflowing to Inf
  (a cuDNN convolution produces it; the scans after it hold the stream, in the same launch of
  cudump's kernel as the scans made ahead for the launch after it), and a NaN written into a
  weight by a 4-byte host copy between launches (which voids the scans made ahead).
- samples/torch_forward.py (ResNet-18 inference, cuDNN deterministic): every buffer digested.
"""

from __future__ import annotations

import json
import re

import pytest
from gpurun import run, sample, under_cudump
from records import digests_by_buffer

pytestmark = pytest.mark.gpu


def reports(stderr: str) -> list[str]:
    return [re.sub(r"process \d+", "process P", ln) for ln in stderr.splitlines()
            if ln.startswith("cudump: NaN/Inf")]


def both(cmd: list[str], extra: list[str], workdir, tmp_path) -> tuple[dict, dict, list, list]:
    """The run with --scans-ahead and the one without: summaries and NaN reports."""
    out = {}
    for name, more in (("ahead", []), ("alone", ["--no-scans-ahead"])):
        ran = run(under_cudump(cmd, tmp_path / name, extra=[*extra, *more]), workdir,
                  timeout=300)
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert not any("CUDA error" in ln for ln in ran.stderr.splitlines())
        out[name] = (json.loads((tmp_path / name / "summary.json").read_text()),
                     reports(ran.stderr))
    return out["ahead"][0], out["alone"][0], out["ahead"][1], out["alone"][1]


def same_producer(a: dict, b: dict) -> bool:
    """The same first producer in two processes: the device address a host write went to
    is where the driver mapped PyTorch's pool in that process, which differs."""
    def key(p: dict) -> dict:
        return {k: v for k, v in p.items() if k not in ("pid", "address")}
    return key(a) == key(b)


@pytest.mark.parametrize("mode", ["inf", "fill"])
def test_nan_reports_with_scans_ahead_are_those_without(mode, workdir, tmp_path):
    pytest.importorskip("torchvision")
    ahead, alone, said_ahead, said_alone = both(
        [*sample("torch_resnet_nan.py"), mode, "3"], ["--check-nan"], workdir, tmp_path)
    assert said_ahead and said_ahead == said_alone, (said_ahead[:3], said_alone[:3])
    assert same_producer(ahead["first_nan_producer"], alone["first_nan_producer"])
    assert ahead["nan_producers"] == alone["nan_producers"]
    assert ahead["scans_ahead"] > 0 and alone["scans_ahead"] == 0, (ahead["scans_ahead"],)
    # The producer's buffers were snapshotted as it left them, both ways.
    assert ahead["snapshots"] == alone["snapshots"] > 0


def test_digests_with_scans_ahead_are_those_without(workdir, tmp_path):
    pytest.importorskip("torchvision")
    cmd = [*sample("torch_forward.py"), "resnet18", "--iters", "4", "--warmup", "2"]
    ahead, alone, _, _ = both(cmd, ["--digest"], workdir, tmp_path)
    assert ahead["digests"] == alone["digests"] > 1000
    assert ahead["scans_ahead"] > 100 and alone["scans_ahead"] == 0

    a = digests_by_buffer(tmp_path / "ahead")
    b = digests_by_buffer(tmp_path / "alone")
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k] != b[k]]
    # cuDNN runs deterministically here, and the caching allocator hands out the same blocks
    # in both runs. A buffer's extent runs to the end of its block, whose unused bytes may
    # hold what another process left in fresh device memory: a few digests may differ for
    # that, not the many that stale scans made ahead would make differ.
    assert len(differ) <= len(a) // 100, (len(differ), len(a), differ[:5])
