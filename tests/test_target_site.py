"""cudump's sitecustomize (cudump/target/site) in real Python processes: a program without
torch runs exactly as without it; the program's own sitecustomize still runs (and fails as
it would); and, with a stand-in torch (tests/faketorch) and a stand-in for the shim's scope
calls preloaded, the PyTorch hooks push and pop each module's scopes and count the steps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudump.target import SITE_DIR

FAKETORCH = Path(__file__).resolve().parent / "faketorch"

PLAIN = """\
import sys
print("hello", sys.argv[1:], "torch" in sys.modules)
import json
print(json.dumps({"a": 1}))
sys.stderr.write("to stderr\\n")
sys.exit(3)
"""

# A stand-in for the shim's exported scope calls: each call, one line in $SCOPE_LOG.
SCOPE_CALLS = r"""
#include <stdio.h>
#include <stdlib.h>
static FILE *out(void) {
    static FILE *f;
    if (!f) { f = fopen(getenv("SCOPE_LOG"), "w"); setvbuf(f, NULL, _IONBF, 0); }
    return f;
}
int cudump_scope_push(unsigned kind, const char *name) {
    fprintf(out(), "push %u %s\n", kind, name); return 0;
}
void cudump_scope_pop(void) { fprintf(out(), "pop\n"); }
void cudump_scope_step(unsigned wire_step) { fprintf(out(), "step %u\n", wire_step); }
unsigned cudump_scope_current(void) { return 0; }
int cudump_scope_output(unsigned long long address, unsigned long long bytes, unsigned index,
                        const char *type) {
    fprintf(out(), "output %u %s %#llx %llu\n", index, type, address, bytes); return 0;
}
"""

TRAIN = """\
import sys
import torch
from torch.nn import Module
from torch.nn.modules import module as hooks_of

class Conv(Module):
    def forward(self, x):
        if getattr(self, "fail", False):
            raise ValueError("the program's own error")
        return torch.Tensor()

class Block(Module):
    def __init__(self):
        self.conv1 = Conv()
    def forward(self, x):
        return self.conv1(x)

class Net(Module):
    def __init__(self):
        self.layer1 = Block()
    def forward(self, x):
        return self.layer1(x)

net = Net()
opt = torch.optim.Optimizer([])
for _ in range(2):
    net(torch.Tensor())
    torch.backward()
    opt.step()
net.layer1.conv1.fail = True
try:
    net(torch.Tensor())
except ValueError as err:
    print("caught", err)
print("hooks", len(hooks_of.pre_hooks), len(hooks_of.post_hooks))
"""


def python(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True,
                          text=True, timeout=120, cwd=script.parent)


def base_env(*path: Path | str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "CUDUMP_LAYERS", "LD_PRELOAD")}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    return env


def layers_env(*path: Path | str) -> dict[str, str]:
    env = base_env(SITE_DIR, *path)
    env["CUDUMP_LAYERS"] = "1"
    return env


def test_a_program_without_torch_runs_as_without_the_sitecustomize(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(PLAIN)
    bare = python(script, base_env(), "x", "y")
    ran = python(script, layers_env(), "x", "y")
    assert (bare.returncode, bare.stdout, bare.stderr) == (3, "hello ['x', 'y'] False\n"
                                                           '{"a": 1}\n', "to stderr\n")
    assert (ran.returncode, ran.stdout, ran.stderr) == (bare.returncode, bare.stdout,
                                                        bare.stderr)


def test_the_programs_own_sitecustomize_still_runs(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        "import sys\nprint('their sitecustomize', __name__, file=sys.stderr)\n"
        "MARK = 42\n")
    script = tmp_path / "plain.py"
    script.write_text("import sitecustomize\nprint(sitecustomize.MARK)\n")
    bare = python(script, base_env(theirs))
    ran = python(script, layers_env(theirs))
    assert bare.stdout == "42\n" and "their sitecustomize sitecustomize" in bare.stderr
    assert (ran.returncode, ran.stdout, ran.stderr) == (bare.returncode, bare.stdout,
                                                        bare.stderr)


def test_the_site_folder_twice_on_the_path_runs_once(tmp_path):
    alias = tmp_path / "alias"
    alias.symlink_to(SITE_DIR)
    script = tmp_path / "plain.py"
    script.write_text("import sys\nprint(sorted(m for m in sys.modules if 'cudump' in m))\n")
    ran = python(script, layers_env(alias, SITE_DIR))
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    assert ran.stdout == "['_cudump_target', '_cudump_target.importhook', " \
                         "'_cudump_target.start']\n"


def test_a_failing_sitecustomize_of_the_programs_fails_as_it_would(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("raise RuntimeError('theirs is broken')\n")
    script = tmp_path / "plain.py"
    script.write_text("print('ran')\n")
    bare = python(script, base_env(theirs))
    ran = python(script, layers_env(theirs))
    assert "theirs is broken" in bare.stderr and bare.stdout == "ran\n"
    assert (ran.returncode, ran.stdout, ran.stderr) == (bare.returncode, bare.stdout,
                                                        bare.stderr)


@pytest.fixture(scope="module")
def scope_calls(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("scope_calls")
    source = folder / "scope_calls.c"
    source.write_text(SCOPE_CALLS)
    lib = folder / "libscopecalls.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True,
                   timeout=120)
    return lib


def test_the_pytorch_hooks_push_each_modules_scopes_and_count_steps(tmp_path, scope_calls):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = layers_env(FAKETORCH)
    env["LD_PRELOAD"] = str(scope_calls)
    env["SCOPE_LOG"] = str(tmp_path / "scopes.log")
    ran = python(script, env)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    assert ran.stdout == "caught the program's own error\nhooks 1 1\n"
    calls = (tmp_path / "scopes.log").read_text().splitlines()
    forward = ["push 2 Net", "push 2 layer1", "push 2 layer1.conv1", "pop", "pop", "pop"]
    # conv1's output gradient is the first ready: the chain to it opens; the block and the
    # model, whose output it is too, leave it open; the pass's end closes all.
    backward = ["push 3 Net", "push 3 layer1", "push 3 layer1.conv1", "pop", "pop", "pop"]
    assert calls == ["step 1", *forward, *backward, "step 2", *forward, *backward, "step 3",
                     *forward], calls


OUTPUTS = """\
import torch
from torch.nn import Module

class Inner(Module):
    def forward(self, x):
        return x

class Split(Module):
    def __init__(self):
        self.inner = Inner()
    def forward(self, x):
        # a tensor, a strided view, one in host memory, a bfloat16 one, no tensor, a float8
        return (self.inner(torch.Tensor(shape=(4, 5))), torch.Tensor(contiguous=False),
                torch.Tensor(on_gpu=False), torch.Tensor(shape=(3,), dtype=torch.bfloat16), 7,
                torch.Tensor(shape=(6,), dtype=torch.float8_e4m3fn))

Split()(torch.Tensor())
torch.cuda.capturing[0] = True          # captured into a CUDA graph: its kernels do not run
Split()(torch.Tensor())
"""


def test_each_modules_returned_tensors_are_told_while_its_scope_is_open(tmp_path,
                                                                         scope_calls):
    script = tmp_path / "outputs.py"
    script.write_text(OUTPUTS)
    env = layers_env(FAKETORCH)
    env["LD_PRELOAD"] = str(scope_calls)
    env["SCOPE_LOG"] = str(tmp_path / "scopes.log")
    for told in (False, True):
        if told:
            env["CUDUMP_MODULE_OUTPUTS"] = "1"
        ran = python(script, env)
        assert ran.returncode == 0 and ran.stderr == "", ran.stderr
        calls = (tmp_path / "scopes.log").read_text().splitlines()
        scopes = ["push 2 Split", "push 2 inner", "pop", "pop"]
        assert calls[-4:] == scopes, calls      # the captured forward: scopes, no outputs
        calls = calls[:-4]
        if not told:            # not asked: nothing told, the scopes as ever
            assert calls == scopes, calls
            continue
        inner = next(c for c in calls if c.startswith("output")).split()
        assert calls[:2] == ["push 2 Split", "push 2 inner"] and inner[:3] == [
            "output", "0", "float32[4,5]"] and inner[4] == "80", calls
        assert calls[3:5] == ["pop", "output 0 float32[4,5] " + inner[3] + " 80"], calls
        assert [c.split()[:3] for c in calls[5:-1]] == [
            ["output", "3", "bfloat16[3]"], ["output", "5", "uint8[6]"]], calls
        assert calls[-1] == "pop"


def test_without_the_shims_calls_nothing_is_installed(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    ran = python(script, layers_env(FAKETORCH))
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    assert ran.stdout == "caught the program's own error\nhooks 0 0\n"


def test_a_failing_hook_turns_the_hooks_off_with_one_line(tmp_path, scope_calls):
    script = tmp_path / "train.py"
    script.write_text(TRAIN.replace(
        "net = Net()", "net = Net()\nNet.named_modules = lambda self: 1 / 0"))
    env = layers_env(FAKETORCH)
    env["LD_PRELOAD"] = str(scope_calls)
    env["SCOPE_LOG"] = str(tmp_path / "scopes.log")
    ran = python(script, env)
    assert ran.returncode == 0
    assert ran.stdout == "caught the program's own error\nhooks 0 0\n"
    lines = ran.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "cudump: layers are off in this process: a PyTorch hook failed (ZeroDivisionError:"), lines
