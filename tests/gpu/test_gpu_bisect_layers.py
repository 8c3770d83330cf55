"""`cudump bisect --layers` of one PyTorch model run eager (A) and compiled (B, each block's
forward through torch.compile), with block 1's ReLU turned into a GELU on B's side: the
bisect names block 1, the first module whose returned tensor differs beyond the tolerance
(each module's outputs are what its forward returned, --module-outputs, not the buffers
around them in PyTorch's caching allocator); with no change, no divergence."""

from __future__ import annotations

import sys

import pytest
from gpurun import cudump_command, run

pytestmark = pytest.mark.gpu

PROGRAM = """\
import os
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.act = act

    def forward(self, x):
        return self.act(self.lin(x))


torch.manual_seed(0)
change = os.environ.get("CHANGE") == "1"
model = nn.Sequential(Block(nn.ReLU()), Block(nn.GELU() if change else nn.ReLU()),
                      Block(nn.ReLU())).cuda()
if os.environ.get("MODE") == "compiled":
    for block in model:
        block.forward = torch.compile(block.forward)
x = torch.randn(16, 64, device="cuda")
with torch.no_grad():
    print(round(float(model(x).sum()), 2))
"""


def bisect(tmp_path, workdir, change: bool, name: str):
    program = tmp_path / "model.py"
    program.write_text(PROGRAM)
    env_b = ["--env-b", "MODE=compiled"] + (["--env-b", "CHANGE=1"] if change else [])
    return run([*cudump_command(), "bisect", "--layers", "--out", str(tmp_path / name),
                "--atol", "1e-4", "--rtol", "1e-3", *env_b, "--", sys.executable,
                str(program)], workdir, timeout=480)


def test_bisect_names_the_changed_block_of_eager_against_compiled(workdir, tmp_path):
    pytest.importorskip("torch")
    ran = bisect(tmp_path, workdir, True, "changed")
    text = ran.stdout + ran.stderr
    assert ran.returncode == 1, text[-4000:]
    first = [ln for ln in text.splitlines() if "first" in ln and "differ" in ln]
    assert any(" 1 (forward" in ln for ln in first), text[-4000:]
    assert not any(" 0 (forward" in ln for ln in first), text[-4000:]
    assert (tmp_path / "changed").exists()
    outputs = list((tmp_path / "changed").rglob("outputs.jsonl"))
    assert outputs, "no run recorded its modules' outputs"


def test_bisect_of_eager_against_compiled_with_no_change(workdir, tmp_path):
    pytest.importorskip("torch")
    ran = bisect(tmp_path, workdir, False, "same")
    text = ran.stdout + ran.stderr
    assert ran.returncode == 0, text[-4000:]
    assert "no divergence" in text, text[-4000:]
