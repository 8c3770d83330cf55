"""The repository's own text files hold no leftovers of a merge."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(rb"^(<{7}|>{7})( |$)|^={7}$", re.M)


def test_no_merge_conflict_markers():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.split(b"\0")
    found = []
    for name in filter(None, files):
        path = ROOT / name.decode()
        if path.suffix in {".npy", ".png", ".bin"} or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:4096]:
            continue
        for m in MARKER.finditer(data):
            line = data.count(b"\n", 0, m.start()) + 1
            found.append(f"{name.decode()}:{line}")
    assert not found, "merge conflict markers: " + ", ".join(found)
