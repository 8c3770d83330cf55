"""`cudump --layers`: the traced program's environment (cudump/controller/target_env.py), and
a Python program run under it on the stand-in driver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cudump.controller.target_env import layers_env, xla_dump_env
from cudump.target import SITE_DIR
from cudump.target.xla_flags import add_dump_flags

PROBE = """\
import os, sys
print("layers", os.environ.get("CUDUMP_LAYERS"), os.environ.get("CUDUMP_SOURCES"))
print("loaded", "_cudump_target" in sys.modules, "torch" in sys.modules)
print("path", os.environ.get("PYTHONPATH", "").split(os.pathsep)[0])
print("xla", os.environ.get("XLA_FLAGS"), os.environ.get("CUDUMP_XLA_FLAGS"))
"""

# A program that sets its XLA flags only where none are set, then imports jax (here a
# stand-in package of that name): cudump's flags must come after its own, not instead.
SETDEFAULT = """\
import os
os.environ.setdefault("XLA_FLAGS", "--xla_gpu_deterministic_ops=true")
import jax
print(os.environ["XLA_FLAGS"])
"""


def test_the_site_folder_goes_first_and_the_programs_path_stays(tmp_path):
    env = layers_env({"PYTHONPATH": "/theirs:/more", "XLA_FLAGS": "--xla_foo=1"}, tmp_path)
    assert env["PYTHONPATH"] == f"{SITE_DIR}{os.pathsep}/theirs:/more"
    assert (env["CUDUMP_LAYERS"], env["CUDUMP_SOURCES"]) == ("1", "1")
    assert env["XLA_FLAGS"] == "--xla_foo=1"         # the program's, until it imports jax
    assert env["CUDUMP_XLA_FLAGS"] == (f"--xla_dump_to={tmp_path.resolve()}/xla "
                                       "--xla_dump_hlo_as_text")
    assert Path(SITE_DIR, "sitecustomize.py").is_file()
    scans = xla_dump_env({"PYTHONPATH": "/theirs"}, tmp_path)
    assert scans["PYTHONPATH"] == f"{SITE_DIR}{os.pathsep}/theirs"
    assert "CUDUMP_LAYERS" not in scans and "XLA_FLAGS" not in scans


def test_without_a_pythonpath_only_the_site_folder(tmp_path):
    env = layers_env({}, Path(os.path.relpath(tmp_path)))
    assert env["PYTHONPATH"] == SITE_DIR
    assert env["CUDUMP_XLA_FLAGS"] == (f"--xla_dump_to={tmp_path.resolve()}/xla "
                                       "--xla_dump_hlo_as_text")


def test_the_flags_go_after_the_programs_own_once(capsys):
    ours = "--xla_dump_to=/run/xla --xla_dump_hlo_as_text"
    environ = {"CUDUMP_XLA_FLAGS": ours, "XLA_FLAGS": "--xla_foo=1"}
    add_dump_flags(environ)
    assert environ["XLA_FLAGS"] == f"--xla_foo=1 {ours}"
    add_dump_flags(environ)                           # a child process of the program's
    assert environ["XLA_FLAGS"] == f"--xla_foo=1 {ours}"
    mine = {"CUDUMP_XLA_FLAGS": ours, "XLA_FLAGS": "--xla_dump_to=/elsewhere"}
    add_dump_flags(mine)
    assert mine["XLA_FLAGS"] == "--xla_dump_to=/elsewhere"
    assert "XLA_FLAGS has its own --xla_dump_to" in capsys.readouterr().err
    bare = {"XLA_FLAGS": "--xla_foo=1"}
    add_dump_flags(bare)
    assert bare == {"XLA_FLAGS": "--xla_foo=1"}


def test_a_run_directory_with_a_space_asks_for_no_dump(tmp_path, capsys):
    env = layers_env({}, tmp_path / "a run")
    assert "CUDUMP_XLA_FLAGS" not in env and "XLA_FLAGS" not in env
    assert "has a space" in capsys.readouterr().err


def test_a_programs_own_default_flags_stay_under_a_scan(cudump_run, tmp_path):
    """Under --check-nan the program's `setdefault` of XLA_FLAGS still takes: cudump's dump
    flags are added once it imports jax, after its own (they once were set at the start,
    and the program's default flags were never set)."""
    fake_jax = tmp_path / "lib" / "jax"
    fake_jax.mkdir(parents=True)
    (fake_jax / "__init__.py").write_text("")
    program = tmp_path / "prog.py"
    program.write_text(SETDEFAULT)
    env = {"PYTHONPATH": str(tmp_path / "lib")}
    bare = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)
    assert bare.stdout == "--xla_gpu_deterministic_ops=true\n", bare.stderr
    ran = cudump_run([sys.executable, str(program)], "--check-nan", env_extra=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1] == (
        f"--xla_gpu_deterministic_ops=true --xla_dump_to={ran.run_dir.resolve()}/xla "
        "--xla_dump_hlo_as_text")


def test_a_python_program_under_layers(cudump_run, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    ran = cudump_run([sys.executable, str(probe)], "--layers")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[:3] == ["layers 1 1", "loaded True False", f"path {SITE_DIR}"], lines
    assert lines[3] == (f"xla None --xla_dump_to={ran.run_dir.resolve()}/xla "
                        "--xla_dump_hlo_as_text"), lines
    plain = cudump_run([sys.executable, str(probe)], run_dir=tmp_path / "plain")
    assert plain.stdout.splitlines()[:3] == ["layers None None", "loaded False False",
                                             f"path {Path(__file__).resolve().parents[1]}"]
