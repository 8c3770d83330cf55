"""README.md's "Multi-node jobs" commands, run as written on the stand-in driver: two
"nodes", each its own cudump writing into one job directory, then the offline commands on
the job. Each command exits 0 and ends with the line the README shows (numbers aside), so
the section cannot go stale."""

from __future__ import annotations

import json
from pathlib import Path

from test_readme_try import Shown, run_in_a_checkout, shown_commands

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = "<!-- multi-node-job:"


def job_commands(text: str) -> list[Shown]:
    """The commands of the fenced block right under the section's marker, with their output."""
    return shown_commands(text, MARKER, "multi-node job")


def test_the_multi_node_section_runs_as_written(shim_lib: Path, tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Multi-node jobs"):]
    # The launchers the section shows, each with --job.
    assert "srun --nodes=2 --ntasks-per-node=1 cudump --job /shared/job1" in section
    assert "torchrun --nnodes=2 --node-rank=0" in section
    shown = job_commands(text)
    jobs = [s.command for s in shown if " --job " in s.command]
    assert len(jobs) == 2 and len({c.split("--node ")[1].split()[0] for c in jobs}) == 2
    root = run_in_a_checkout(shown, tmp_path)
    # What the commands left: two nodes' runs, node b's trigger, the snapshots as blobs.
    job = root / "job1"
    assert sorted(p.name for p in (job / "nodes").iterdir()) == ["a", "b"]
    assert json.loads((job / "triggers" / "b.json").read_text())["rank"] == 1
    assert len(list((job / "blobs").glob("*/*.npy"))) == 3
    assert (root / "job1.json").is_file()
