"""`cudump --layers`: the traced program's environment (cudump/controller/target_env.py), and
a Python program run under it on the stand-in driver."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cudump.controller.target_env import layers_env
from cudump.target import SITE_DIR

PROBE = """\
import os, sys
print("layers", os.environ.get("CUDUMP_LAYERS"), os.environ.get("CUDUMP_SOURCES"))
print("loaded", "_cudump_target" in sys.modules, "torch" in sys.modules)
print("path", os.environ.get("PYTHONPATH", "").split(os.pathsep)[0])
print("xla", os.environ.get("XLA_FLAGS"))
"""


def test_the_site_folder_goes_first_and_the_programs_path_stays(tmp_path):
    env = layers_env({"PYTHONPATH": "/theirs:/more", "XLA_FLAGS": "--xla_foo=1"}, tmp_path)
    assert env["PYTHONPATH"] == f"{SITE_DIR}{os.pathsep}/theirs:/more"
    assert (env["CUDUMP_LAYERS"], env["CUDUMP_SOURCES"]) == ("1", "1")
    assert env["XLA_FLAGS"] == (f"--xla_foo=1 --xla_dump_to={tmp_path.resolve()}/xla "
                                "--xla_dump_hlo_as_text")
    assert Path(SITE_DIR, "sitecustomize.py").is_file()


def test_without_a_pythonpath_only_the_site_folder(tmp_path):
    env = layers_env({}, Path(os.path.relpath(tmp_path)))
    assert env["PYTHONPATH"] == SITE_DIR
    assert env["XLA_FLAGS"] == f"--xla_dump_to={tmp_path.resolve()}/xla --xla_dump_hlo_as_text"


def test_the_programs_own_xla_dump_is_kept_and_said(tmp_path, capsys):
    env = layers_env({"XLA_FLAGS": "--xla_dump_to=/elsewhere"}, tmp_path)
    assert env["XLA_FLAGS"] == "--xla_dump_to=/elsewhere"
    assert "XLA_FLAGS has its own --xla_dump_to" in capsys.readouterr().err
    spaced = tmp_path / "a run"
    env = layers_env({}, spaced)
    assert "XLA_FLAGS" not in env
    assert "has a space" in capsys.readouterr().err


def test_a_python_program_under_layers(cudump_run, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    ran = cudump_run([sys.executable, str(probe)], "--layers")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[:3] == ["layers 1 1", "loaded True False", f"path {SITE_DIR}"], lines
    assert lines[3] == (f"xla --xla_dump_to={ran.run_dir.resolve()}/xla "
                        "--xla_dump_hlo_as_text"), lines
    plain = cudump_run([sys.executable, str(probe)], run_dir=tmp_path / "plain")
    assert plain.stdout.splitlines()[:3] == ["layers None None", "loaded False False",
                                             f"path {Path(__file__).resolve().parents[1]}"]
