"""README.md's "Try it without a GPU" commands, run as written: each exits 0 from a checkout's
root (a fresh directory that holds the checkout's tests/), and each ends with the line the
README shows (numbers aside: pids and addresses change), so the README cannot go stale."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = "<!-- try-without-gpu:"


@dataclass(frozen=True)
class Shown:
    """One `$ command` of the block and the output the README shows under it."""

    command: str
    output: list[str]


def shown_commands(text: str, marker: str = MARKER,
                   what: str = "'Try it without a GPU'") -> list[Shown]:
    """The commands of the fenced block right under `marker`, with their shown output."""
    assert marker in text, f"README.md has no {what} block"
    lines = text[text.index(marker):].splitlines()
    start = lines.index("```") + 1
    end = lines.index("```", start)
    shown: list[Shown] = []
    for line in lines[start:end]:
        if line.startswith("$ "):
            shown.append(Shown(line[2:], []))
        else:
            assert shown, f"README.md's block starts with output, not a command: {line!r}"
            shown[-1].output.append(line)
    return shown


def _numbers_aside(line: str) -> str:
    return re.sub(r"0x[0-9a-f]+|\d+", "N", line)


def run_as_written(shown: list[Shown], root: Path, env: dict[str, str]) -> None:
    """Runs the commands in one shell from root, as a reader types them (the `export` holds
    for the commands after it), and checks each exits 0 and ends with the line shown."""
    script = "".join(f"{{ {s.command}\n}} >out.{i} 2>&1; echo $? >rc.{i}\n"
                     for i, s in enumerate(shown))
    subprocess.run(["bash", "-c", script], cwd=root, env=env, timeout=120, check=True)
    for i, s in enumerate(shown):
        out = (root / f"out.{i}").read_text()
        rc = int((root / f"rc.{i}").read_text())
        assert rc == 0, f"README.md's `{s.command}` exited {rc}:\n{out}"
        got = out.splitlines()
        if s.output:
            assert got, f"`{s.command}` printed nothing; README.md shows output"
            assert _numbers_aside(got[-1]) == _numbers_aside(s.output[-1]), (
                f"`{s.command}`: README.md shows {s.output[-1]!r}, it printed {got[-1]!r}")


def test_try_without_gpu_commands_run_as_written(shim_lib: Path, tmp_path: Path) -> None:
    shown = shown_commands(README.read_text(encoding="utf-8"))
    assert [s.command.split()[0] for s in shown][:2] == ["python3", "export"]
    assert any(s.command.startswith("cudump ") for s in shown)
    run_in_a_checkout(shown, tmp_path)


def run_in_a_checkout(shown: list[Shown], tmp_path: Path) -> Path:
    """Runs README commands as written in a fresh folder holding the checkout's tests/, with
    `cudump` as installed would be (this checkout's package, on PATH); returns the folder."""
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "tests").symlink_to(ROOT / "tests")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "cudump"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cudump "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    env.pop("LD_LIBRARY_PATH", None)
    run_as_written(shown, root, env)
    return root


TUNING = ["--trace-ring", "--staging", "--scratch", "--write-behind", "--scans-ahead",
          "--hand-off"]


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    level = heading.split()[0]
    rest = text[start + len(heading) + 2:]
    ends = [m.start() for m in re.finditer(rf"^{level} ", rest, re.M)]
    return rest[:ends[0]] if ends else rest


def test_help_groups_the_tuning_options() -> None:
    done = subprocess.run([sys.executable, "-m", "cudump", "--help"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100"),
                          check=True)
    tuning = done.stdout[done.stdout.index("\ntuning:\n"):]
    listed = re.findall(r"^  (--[\w-]+)", tuning, re.M)
    assert listed == TUNING
    options = done.stdout[:done.stdout.index("\ntuning:\n")]
    assert not any(re.search(rf"^  {o}\b", options, re.M) for o in TUNING)


def test_readme_tuning_table_and_reference_contents() -> None:
    text = README.read_text(encoding="utf-8")
    running = _section(text, "### Running a program")
    tuning = running[running.index("**Tuning.**"):]
    assert re.findall(r"^\| `(--[\w-]+)", tuning, re.M) == TUNING
    before = running[:running.index("**Tuning.**")]
    assert not any(f"| `{o}" in before for o in TUNING)
    reference = _section(text, "## Reference")
    headings = re.findall(r"^### (.+)$", reference, re.M)
    contents = re.findall(r"^- \[(.+?)\]\(#", reference, re.M)
    assert contents == headings


def test_install_names_the_driver_digests_and_scans_need() -> None:
    route = (ROOT / "cudump" / "policy" / "snapshot" / "route.py").read_text()
    need = re.search(r"it needs a CUDA (\d+) driver", route)
    assert need is not None
    install = _section(README.read_text(encoding="utf-8"), "## Install")
    assert f"it needs a CUDA {need.group(1)} driver" in install
    assert "### Try it without a GPU" in install
