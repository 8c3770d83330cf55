"""Plans the shim repeats on its own (PLAN_REPEAT): launches with the same parameter bytes
as one the controller planned get the same digests and scans without asking, and their
results come back through the result ring. Checked on the stand-in driver against what
the controller-planned path gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cudump.digest import digest, digest_hex


def manifest(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "manifest.jsonl").read_text().splitlines()]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def key(r: dict) -> tuple:
    return (r["launch"], r["arg"], r.get("offset", 0), r["phase"])


SNAPSHOT_ALL = """rules:
  - kernel: "*"
    args: pointers
    format: npy
"""


def test_repeated_launches_digest_what_snapshots_copy(fake, cudump_run, tmp_path):
    """diverge launches vecAdd with the same arguments every round: from the second round on
    the shim digests them itself. Every digest equals the numpy digest of a snapshot of the
    same launch's buffer, and none is missing."""
    program = [str(fake.programs["diverge"]), "6"]
    rule = tmp_path / "all.yaml"
    rule.write_text(SNAPSHOT_ALL)
    snap = cudump_run(program, "--rule", str(rule), run_dir=tmp_path / "snap")
    dig = cudump_run(program, "--digest", run_dir=tmp_path / "dig")
    assert snap.returncode == 0 and dig.returncode == 0, dig.stderr
    snaps = {key(r): r for r in manifest(snap.run_dir)}
    digests = {key(r): r for r in manifest(dig.run_dir)}
    assert snaps.keys() == digests.keys()
    assert all(r["status"] == "ok" for r in digests.values())
    for k, r in digests.items():
        array = np.load(snap.run_dir / snaps[k]["file"])
        assert r["digest"] == digest_hex(digest(array.tobytes(), r["row_bytes"])), k
        assert (r["occurrence"], r["kernel"]) == (snaps[k]["occurrence"], snaps[k]["kernel"])
        assert r["grid"] == snaps[k]["grid"] and r["stream"] == snaps[k]["stream"]
    # two vecAdds a round, the same each round: rounds 2-6 repeat them
    assert summary(dig.run_dir)["repeated_launches"] == 10
    assert summary(dig.run_dir)["digests"] == len(digests)


def test_a_nan_producer_among_repeated_launches_is_snapshotted(fake, cudump_run):
    """nans launches vecAdd 40 times with the same arguments; launch 23 makes a NaN. It is
    a repeated launch: the shim sees the scan and reports it at once (MSG_REPEAT), and the
    controller has its buffers copied as the launch left them."""
    ran = cudump_run([str(fake.programs["nans"]), "40", "37", "23"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert summary(ran.run_dir)["repeated_launches"] == 39
    records = manifest(ran.run_dir)
    (found,) = [r for r in records if "nonfinite" in r]
    assert (found["launch"], found["arg"], found["first_nonfinite"]) == (23, 2, 37)
    files = sorted((r["arg"], r["launch"]) for r in records if r.get("file"))
    assert files == [(0, 23), (1, 23), (2, 23)]


def test_a_rule_that_skips_launches_is_asked_every_time(fake, cudump_run, tmp_path):
    rule = tmp_path / "every.yaml"
    rule.write_text('rules:\n  - kernel: "vecAdd*"\n    every: 2\n    format: digest\n')
    ran = cudump_run([str(fake.programs["nans"]), "10", "5"], "--rule", str(rule))
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert sorted({r["occurrence"] for r in records}) == [1, 3, 5, 7, 9]
    assert len(records) == 5 * 3 * 2
    assert summary(ran.run_dir)["repeated_launches"] == 0
