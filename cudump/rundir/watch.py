"""How far a cudump run has got, read from its manifest as it grows (for `bisect`'s progress).

Only what was appended since the last look is read: the newlines are counted (records; a
batch of repeated launches' digests is one line, which names its last launch) and the last
whole line that names a launch gives the latest launch number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cudump.rundir import reading
from cudump.rundir.layout import MANIFEST_FILE

# A launch number of at most 20 digits (any 64-bit one): a longer run of digits is no
# launch number, and int() refuses thousands of them.
_LAUNCH = re.compile(rb'"launch":(\d{1,20})(?!\d)')
READ_AT_MOST = 1 << 24           # per look: a run far ahead is caught up with over a few
LOOK_BACK = 64                   # lines looked at, from the last, for a launch number


@dataclass
class RunProgress:
    lines: int = 0                  # manifest lines so far
    launch: int | None = None       # the launch number of the latest whole line


class RunWatch:
    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / MANIFEST_FILE
        self._offset = 0
        self._tail = b""                # a line not yet whole
        self.progress = RunProgress()

    def poll(self) -> RunProgress:
        try:
            # A regular file only, opened without blocking (rundir.reading): a FIFO under
            # the manifest's name is never waited on.
            with reading.open_regular(self.path) as f:
                f.seek(self._offset)
                data = f.read(READ_AT_MOST)
        except (OSError, reading.RunFileError):     # not there yet, or not a manifest
            return self.progress
        self._offset += len(data)
        data = self._tail + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._tail = data
            return self.progress
        whole, self._tail = data[:cut], data[cut + 1:]
        self.progress.lines += whole.count(b"\n") + 1
        end = len(whole)
        for _ in range(LOOK_BACK):          # the latest line that names a launch
            start = whole.rfind(b"\n", 0, end) + 1
            found = _LAUNCH.search(whole, start, end)
            if found is not None:
                self.progress.launch = int(found.group(1))
                break
            if start == 0:
                break
            end = start - 1
        return self.progress

