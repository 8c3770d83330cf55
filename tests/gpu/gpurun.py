"""Running the samples bare and under cudump, and reading what cudump wrote.

Shared by the GPU tests and the benchmarks in bench/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
BUILD = SAMPLES / "build"
RULES = Path(__file__).resolve().parent / "rules"
TIMEOUT_S = 300

LAUNCHES_LINE = re.compile(r"^launches((?: \S+=\d+)+)$")
BIG_BUFFER_LAUNCH = re.compile(r"^launch (\d+) ms ([\d.]+)$", re.MULTILINE)


def big_buffer_rule(path: Path, fmt: str, count: int | None = None) -> Path:
    """A rule on samples/big_buffer.cu's add_one: its float buffer, whole, in format `fmt`."""
    limit = f"    count: {count}\n" if count is not None else ""
    path.write_text(f"rules:\n  - kernel: add_one\n    match: base\n    args: [0]\n{limit}"
                    f"    format: {fmt}\n    overrides:\n"
                    "      0: {dtype: float32, count: arg1}\n")
    return path


def big_buffer_launch_ms(stdout: str) -> list[float]:
    """big_buffer's `launch K ms T` times, without the first (warm-up) launch."""
    return [float(ms) for k, ms in BIG_BUFFER_LAUNCH.findall(stdout) if int(k) > 1]


def cudump_command() -> list[str]:
    """The installed `cudump` script, else the package run as a module."""
    script = shutil.which("cudump")
    return [script] if script else [sys.executable, "-m", "cudump"]


def sample(name: str) -> list[str]:
    """Command line of a sample: a built binary, or a Python sample run by this Python."""
    if name.endswith(".py"):
        return [sys.executable, str(SAMPLES / name)]
    return [str(BUILD / name)]


def run(cmd: Sequence[str], cwd: Path, stderr_path: Path | None = None,
        timeout: int = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run with a clean working directory, so that `python -m cudump` finds the
    installed package rather than a source tree in the current directory."""
    env = dict(os.environ)
    if stderr_path is None:
        return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    with stderr_path.open("w") as err:
        return subprocess.run(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err,
                              text=True, timeout=timeout)


def under_cudump(cmd: Sequence[str], out: Path, trace: bool = False,
                 rules: Sequence[Path] = (), extra: Sequence[str] = ()) -> list[str]:
    args = [*cudump_command()]
    if trace:
        args.append("--trace")
    args += ["--out", str(out)]
    for rule in rules:
        args += ["--rule", str(rule)]
    return [*args, *extra, "--", *cmd]


def launches_printed(stdout: str) -> dict[str, int]:
    """The `launches a=1 b=2` line a sample prints last."""
    lines = stdout.strip().splitlines()
    match = LAUNCHES_LINE.match(lines[-1]) if lines else None
    assert match, f"no final launches line in:\n{stdout}"
    return {k: int(v) for k, v in (item.split("=") for item in match.group(1).split())}


@dataclass
class RunDir:
    path: Path

    def summary(self) -> dict[str, Any]:
        return json.loads((self.path / "summary.json").read_text())

    def trace(self) -> list[dict[str, Any]]:
        lines = (self.path / "trace.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def launches(self) -> list[dict[str, Any]]:
        return [e for e in self.trace() if e.get("event") == "launch"]

    def graph_launches(self) -> list[dict[str, Any]]:
        return [e for e in self.trace() if e.get("event") == "graph-launch"]
