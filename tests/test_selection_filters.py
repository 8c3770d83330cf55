"""`skip`, `every` and `count` are applied twice: the shim counts a rule's launches and asks
about those it takes (plan.c, plan_select), and the controller takes a launch for a rule
only if the rule selects its count (select.py, Selection.taken). Each would hide a bug of
the other from a test that looks at the snapshots alone, so each is checked here with the
other unable to mask it:

- the controller alone: another rule of the same kernel takes every launch, so the shim
  asks about every launch (it still counts them) and the controller must choose;
- the shim alone: the controller runs with its own choice turned off (every count
  selected), so what is taken is what the shim asked about."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import sessions
from records import manifest

ROOT = Path(__file__).resolve().parent.parent
LAUNCHES = 16                                # layers 8 2: vecAdd launched 16 times
SELECTED = [3, 6, 9, 12]                     # skip 2, every 3, count 4 of 1..16
FILTERED = ("  - kernel: vecAdd\n    args: [2]\n    when: after\n"
            "    skip: 2\n    every: 3\n    count: 4\n")
EVERY = "  - kernel: vecAdd\n    args: [0]\n    when: after\n"
# The controller with its own choice off: every launch a rule matches is selected by it.
UNFILTERED = ("import sys\n"
              "from cudump.policy.rules.matching import RuleMatching\n"
              "RuleMatching.selects = lambda self, n: True\n"
              "from cudump.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")


def _run(fake, shim_lib, tmp_path: Path, rules: str, *, controller_filters: bool) -> Path:
    rule = tmp_path / "rule.yaml"
    rule.write_text("rules:\n" + rules)
    out = tmp_path / "run"
    env = fake.env()
    env["CUDUMP_SHIM"] = str(shim_lib)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cudump = [sys.executable, "-m", "cudump"] if controller_filters else [
        sys.executable, "-c", UNFILTERED]
    done = sessions.run([*cudump, "--rule", str(rule), "--out", str(out), "--",
                         str(fake.programs["layers"]), "8", "2"], env=env,
                        timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return out


def _taken(run_dir: Path, arg: int) -> list[int]:
    """The occurrences of vecAdd whose argument `arg` was snapshotted."""
    return sorted(r["occurrence"] for r in manifest(run_dir)
                  if r["kernel"].startswith("vecAdd") and r["arg"] == arg)


def test_the_controller_alone_takes_what_skip_every_and_count_select(fake, shim_lib,
                                                                      tmp_path):
    run = _run(fake, shim_lib, tmp_path, FILTERED + EVERY, controller_filters=True)
    assert _taken(run, 0) == list(range(1, LAUNCHES + 1))     # the shim asked about every one
    assert _taken(run, 2) == SELECTED


def test_the_shim_alone_asks_only_about_what_skip_every_and_count_select(fake, shim_lib,
                                                                         tmp_path):
    run = _run(fake, shim_lib, tmp_path, FILTERED, controller_filters=False)
    assert _taken(run, 2) == SELECTED


def test_with_the_controllers_choice_off_nothing_else_filters(fake, shim_lib, tmp_path):
    """The check of the test above: where the shim asks about every launch, the controller
    with its choice off takes every one, so the shim's filter is all that test sees."""
    run = _run(fake, shim_lib, tmp_path, FILTERED + EVERY, controller_filters=False)
    assert _taken(run, 2) == list(range(1, LAUNCHES + 1))
