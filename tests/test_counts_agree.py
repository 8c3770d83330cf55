"""One vocabulary, one count: after --check-nan and --digest on the stand-in driver, `ls`,
`stats`, the end-of-run summary line and summary.json count the run's snapshots (files of
data), digests and NaN/Inf reports the same way."""

from __future__ import annotations

import re

import pytest
from records import manifest, summary

from cudump.cli import main

INDEX = 37


def counts_in(text: str) -> dict[str, int]:
    """`5 snapshots (20.0 KiB), 120 digests, 4 NaN/Inf reports` -> {kind: count}."""
    found = {}
    for kind in ("snapshot", "digest", "NaN/Inf report"):
        m = re.search(rf"\b(\d+) {re.escape(kind)}s?\b", text)
        found[kind] = int(m.group(1)) if m else 0
    return found


@pytest.mark.parametrize("program,option", [
    (("chain", "12", str(INDEX), "5", "9"), "--check-nan"),   # launches produce NaN/Inf
    (("nans", "40", str(INDEX), "23"), "--check-nan"),          # the host's copies do
    (("chain", "12", str(INDEX), "5", "9"), "--digest"),
])
def test_ls_stats_and_summary_count_alike(fake, cudump_run, capsys, program, option):
    ran = cudump_run([str(fake.programs[program[0]]), *program[1:]], option)
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    truth = {
        "snapshot": sum(1 for r in records if r.get("file") and "nonfinite" not in r
                        and "digest" not in r),
        "digest": sum(1 for r in records if "digest" in r),
        "NaN/Inf report": sum(1 for r in records if "nonfinite" in r),
    }
    assert sum(truth.values()) == len(records) > 0
    if option == "--digest":
        assert truth["digest"] == len(records)
    else:
        assert truth["NaN/Inf report"] and truth["snapshot"]

    assert main(["ls", str(ran.run_dir)]) == 0
    footer = capsys.readouterr().out.splitlines()[-1]
    assert footer.startswith(f"{len(records)} of {len(records)} records: "), footer
    assert counts_in(footer.partition(": ")[2]) == truth, footer

    assert main(["stats", str(ran.run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    columns = {"snapshot": header.index("snapshots"), "digest": header.index("digests"),
               "NaN/Inf report": header.index("NaN/Inf")}
    rows = [line.split() for line in lines[1:] if line.split() and
            line.split()[0] in ("square", "vecAdd", "fill", "scale")]
    assert rows
    width = len(header)
    assert {kind: sum(int(row[col - width]) for row in rows)
            for kind, col in columns.items()} == truth

    line = ran.stderr.strip().splitlines()[-1]
    assert counts_in(line.partition("(peak")[2]) == truth, line
    totals = summary(ran.run_dir)
    assert {"snapshot": totals["snapshots"], "digest": totals["digests"],
            "NaN/Inf report": totals["nan_reports"]} == truth
