"""`cudump --layers` on a PyTorch training loop with no change to the program: each traced
launch names the module it ran in (its path in the model), forward or backward, and the
step (counted from the optimizer's first step, 0).

The model has torchvision's residual block shape, with an in-place ReLU after a BatchNorm
(PyTorch's global full backward hooks would make that raise; cudump's hooks must not)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from gpurun import cudump_command, run, sample, under_cudump

pytestmark = pytest.mark.gpu

PROGRAM = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.conv2(out) + x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.layer1 = nn.Sequential(Block(), Block())
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.layer1(self.stem(x)).mean((2, 3)))


torch.manual_seed(0)
model = Net().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 3, 16, 16, device="cuda")
y = torch.randint(0, 10, (4,), device="cuda")
for _ in range(3):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("loss", round(loss.item(), 3))
"""


def test_traced_launches_name_their_layer_pass_and_step(workdir, tmp_path):
    pytest.importorskip("torch")
    program = tmp_path / "train_cnn.py"
    program.write_text(PROGRAM)
    bare = run([sys.executable, str(program)], workdir, timeout=300)
    assert bare.returncode == 0, bare.stderr[-3000:]
    out = tmp_path / "run"
    ran = run(under_cudump([sys.executable, str(program)], out, trace=True,
                           extra=["--layers"]), workdir, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == bare.stdout
    assert "layers are off" not in ran.stderr, ran.stderr[-3000:]
    records = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
    launches = [r for r in records if r.get("event") == "launch"]
    assert launches
    named = [r for r in launches if "layer" in r]
    assert named, launches[:3]
    seen = {(r["layer"], r.get("pass")) for r in named}
    assert ("layer1.0.conv1", "forward") in seen, sorted(seen)
    assert ("layer1.0.conv1", "backward") in seen, sorted(seen)
    assert ("fc", "forward") in seen and ("fc", "backward") in seen, sorted(seen)
    forward = next(r for r in named if r["layer"] == "layer1.0.conv1"
                   and r.get("pass") == "forward")
    assert forward["scope"][:4] == ["Net", "layer1", "layer1.0", "layer1.0.conv1"], forward
    steps = {r["step"] for r in launches if "step" in r}
    assert {0, 1, 2} <= steps, sorted(steps)
    # The first step's forward is step 0.
    first_conv = [r["step"] for r in named if r["layer"] == "stem" and r.get("pass") ==
                  "forward"]
    assert first_conv[:1] == [0], first_conv


def test_an_overflowing_convolution_is_named_by_module_pass_step_and_line(workdir, tmp_path):
    """The first NaN/Inf report names the convolution's module path, the forward pass, the
    step and the line of the program's own code behind it (the model's forward); `stats
    --by layer` says which layer produced it and which only carried it on."""
    pytest.importorskip("torch")
    program = sample("torch_layers_nan.py")
    text = Path(program[-1]).read_text()
    # The innermost frame of the program's own code: the model's forward, which called the
    # convolution's module.
    forward_line = next(i for i, line in enumerate(text.splitlines(), 1)
                        if line.startswith("        return self.fc("))
    out = tmp_path / "run"
    ran = run(under_cudump(program, out,
                           extra=["--check-nan", "--layers", "--max-bytes", "2G"]),
              workdir, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == "done\n"
    reports = [line for line in ran.stderr.splitlines() if "non-finite" in line]
    assert reports, ran.stderr[-3000:]
    first = reports[0]
    assert "produced" in first, first
    assert "in layer2.0 (forward, step 1) at " in first, first
    assert f"torch_layers_nan.py:{forward_line} " in first, first
    stats = run([*cudump_command(), "stats", "--by", "layer", str(out)], workdir)
    assert stats.returncode == 0, stats.stderr
    rows = {tuple(line.split()[:2]): line.split() for line in stats.stdout.splitlines()
            if line.strip()}
    assert "produced" in rows.get(("layer2.0", "forward"), []), stats.stdout
    assert "produced" not in rows.get(("fc", "forward"), []), stats.stdout
