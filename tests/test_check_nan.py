"""--check-nan: the launch that first leaves NaN/Inf in a buffer, found by cudump's scan
kernel on the stand-in driver, reported, and its buffers snapshotted as it left them."""

from __future__ import annotations

import numpy as np
import pytest
from records import manifest

from cudump.errors import RuleError
from cudump.rules import load_rules

INDEX = 37



def test_the_producer_among_many_launches(fake, cudump_run):
    ran = cudump_run([str(fake.programs["nans"]), "40", str(INDEX), "23"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert "launches vecAdd=40" in ran.stdout
    records = manifest(ran.run_dir)
    producers = [r for r in records if "nonfinite" in r]
    assert len(producers) == 1
    (found,) = producers
    assert (found["occurrence"], found["arg"], found["phase"]) == (23, 2, "after")
    assert (found["nonfinite"], found["first_nonfinite"], found["nonfinite_before"],
            found["elements"]) == (1, INDEX, 0, 1024)
    assert found["kernel"] == "vecAdd(float const*, float const*, float*, int)"
    warning = [line for line in ran.stderr.splitlines() if line.startswith("cudump: NaN/Inf")]
    assert warning == [
        f"cudump: NaN/Inf: launch 23 of {found['kernel']} (occurrence 23, process "
        f"{found['pid']}) left 1 of 1024 elements of arg 2 non-finite, the first at index "
        f"{INDEX}; there were none before it"]
    assert "1 buffer turned NaN/Inf" in ran.stderr.splitlines()[-1]
    # every buffer of that launch, as it left them
    snaps = {r["arg"]: r for r in records if r.get("file")}
    assert sorted(snaps) == [0, 1, 2]
    assert all(r["occurrence"] == 23 and r["phase"] == "after" and r["nan_producer"]
               for r in snaps.values())
    a, b, c = (np.load(ran.run_dir / snaps[i]["file"]) for i in range(3))
    assert np.isposinf(a[INDEX]) and np.isneginf(b[INDEX]) and np.isnan(c[INDEX])
    assert np.isfinite(np.delete(c, INDEX)).all()
    assert np.array_equal(np.delete(c, INDEX), np.delete(a + b, INDEX))


def test_every_producer_is_reported_the_first_snapshotted(fake, cudump_run):
    ran = cudump_run([str(fake.programs["nans"]), "30", "5", "4", "17"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert [r["occurrence"] for r in records if "nonfinite" in r] == [4, 17]
    assert {r["occurrence"] for r in records if r.get("file")} == {4}


def test_no_nan_no_records(fake, cudump_run):
    ran = cudump_run([str(fake.programs["nans"]), "10", "5"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    assert not (ran.run_dir / "manifest.jsonl").exists() or not manifest(ran.run_dir)
    assert "NaN" not in ran.stderr


def test_check_nan_rule_format(tmp_path):
    rule = tmp_path / "r.yaml"
    rule.write_text("- kernel: vecAdd\n  format: check-nan\n")
    (loaded,) = load_rules([rule])
    assert loaded.is_scan and not loaded.is_digest
    rule.write_text("- kernel: vecAdd\n  format: [npy, check-nan]\n")
    with pytest.raises(RuleError, match="check-nan stands alone"):
        load_rules([rule])


def test_break_on_nan_stops_after_the_producer_and_carries_on(fake, cudump_run, bare_run,
                                                                tmp_path):
    program = [str(fake.programs["nans"]), "40", str(INDEX), "23"]
    commands = tmp_path / "commands.txt"
    commands.write_text(f"x/1f arg2+{4 * INDEX}\np arg3\ncontinue\n")
    ran = cudump_run(program, "--break-on-nan", "--batch", str(commands))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == bare_run(program).stdout
    lines = ran.stderr.splitlines()
    kernel = "vecAdd(float const*, float const*, float*, int)"
    stop = lines.index(f"NaN/Inf in arg 2: 1 of 1024 elements, the first at index {INDEX}, "
                       f"after launch 23 (occurrence 23) of {kernel}")
    assert lines[stop - 1].startswith("cudump: NaN/Inf: launch 23 of ")
    value = lines[lines.index(f"(cudump) x/1f arg2+{4 * INDEX}") + 1]
    assert value.endswith(":  nan") or value.endswith(":  inf"), value
    assert lines[lines.index("(cudump) p arg3") + 1] == "arg3 = 1024"
    assert "Continuing." in lines
    assert sum(1 for ln in lines if ln.startswith("NaN/Inf in arg")) == 1
    # the producer's buffers, as it left them, are on disk as with --check-nan alone
    records = manifest(ran.run_dir)
    assert sorted((r["arg"], r["phase"]) for r in records if "file" in r and r["file"]) == [
        (0, "after"), (1, "after"), (2, "after")]
