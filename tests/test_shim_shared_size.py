"""A controller that lies about the size of the shared memory must not kill the program.

The shim maps the memfd the controller passes at the greeting and trusts the sizes the
WELCOME and the control page claim for the trace ring, the result ring and the staging
area. If the file is smaller than that, touching the missing part raises SIGBUS in the
program; if the controller shrinks the file later, the same. The promise is a
pass-through whenever the controller misbehaves, so the program must run as it does
without cudump.

The misbehaving controller is cudump's own, run through a wrapper that swaps the memfd it
hands over for a smaller one (or shrinks it after the greeting): everything else about the
conversation is real.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Runs `python -m cudump ARGS...` with cudump.wire.shm patched as TEST_SHARED_MODE says:
#   page:     the shim gets a memfd of one page (the control page) that claims rings and
#             a staging area beyond it;
#   nostage:  the shim gets the control page and the rings, but no staging area;
#   shrink:   the shim gets the right memfd, and the controller cuts it to one page once
#             the shim has asked its first question (after the greeting, for certain).
WRAPPER = r'''
import os, sys
from cudump.controller import session
from cudump.wire import shm as shared
from cudump.cli import main

MODE = os.environ["TEST_SHARED_MODE"]
real_init = shared.SharedFile.__init__
real_handed_over = shared.SharedFile.handed_over
real_on_func = session.Connection.on_func
kept = []

def init(self, *args, **kwargs):
    real_init(self, *args, **kwargs)
    if MODE == "shrink":
        return
    keep = 4096 if MODE == "page" else self.staging_offset
    small = os.memfd_create("small", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(small, keep)
    os.pwrite(small, bytes(self._map[:keep]), 0)
    os.close(self.fd)
    self.fd = small   # what the WELCOME hands over; the controller keeps its own mapping

def handed_over(self):
    if MODE == "shrink" and self.fd >= 0:
        kept.append(os.dup(self.fd))
    real_handed_over(self)

def on_func(self, msg):
    while kept:
        fd = kept.pop()
        try:
            os.ftruncate(fd, 4096)
            print("test: shrank the shared memory", file=sys.stderr)
        except OSError as err:
            print(f"test: could not shrink the shared memory: {err.strerror}",
                  file=sys.stderr)
        os.close(fd)
    real_on_func(self, msg)

shared.SharedFile.__init__ = init
shared.SharedFile.handed_over = handed_over
session.Connection.on_func = on_func
sys.exit(main(sys.argv[1:]))
'''

RULE = ('rules:\n  - kernel: "*vecAdd*"\n    args: [2]\n    when: after\n'
        '    format: npy\n    overrides:\n      2: {dtype: float32, count: 1000}\n')


@pytest.mark.parametrize("mode, options", [
    ("page", ["--trace"]),          # the trace ring lies past the end of the file
    ("page", ["--rule", "RULE"]),   # the result ring and staging lie past the end
    ("nostage", ["--rule", "RULE"]),  # only the staging area is missing
    ("shrink", ["--trace"]),        # the file is cut after the shim has mapped it
])
def test_a_controller_with_too_little_shared_memory_leaves_the_program_running(
        mode, options, fake, shim_lib, bare_run, tmp_path):
    rule = tmp_path / "rule.yaml"
    rule.write_text(RULE)
    options = [str(rule) if o == "RULE" else o for o in options]
    program = [str(fake.programs["linked"])]
    env = fake.env() | {"CUDUMP_SHIM": str(shim_lib), "TEST_SHARED_MODE": mode,
                        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", WRAPPER, *options, "--out",
                           str(tmp_path / "run"), "--", *program], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == bare_run(program).stdout
    assert "SIGBUS" not in done.stderr
    if mode == "shrink":
        # The shim sealed the file against shrinking before it trusted its size.
        assert "could not shrink the shared memory" in done.stderr, done.stderr
