"""What a bisection is asked to do, where it works and where its report goes."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cudump.analysis.bisect.sides import Side
from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.outputs import report_dir
from cudump.analysis.report.html_page import PageOptions
from cudump.errors import UsageError
from cudump.rundir import files as runfiles


@dataclass
class BisectOptions:
    sides: tuple[Side, Side]
    rules: list[Path] = field(default_factory=list)
    out: Path | None = None            # the work directory (default: a temporary one)
    keep: bool = False                 # keep a temporary work directory
    html: Path | None = None           # a report: FILE.html, or a directory (index.html)
    tol: Tolerance = field(default_factory=Tolerance)
    jobs: int | None = None
    baseline_runs: int = 0             # extra digest runs of A, to learn its nondeterminism
    batch: int = 32                    # with a tolerance: launches a pair of snapshot runs checks
    by_sums: bool = False              # with a tolerance: trust sums of |x| within it

    @property
    def tolerant(self) -> bool:
        """Whether buffers within a tolerance count as equal (--atol/--rtol)."""
        return self.tol.given


def html_target(path: Path) -> tuple[Path, PageOptions]:
    """Where --html PATH puts the report: PATH itself when it names an .html file (its
    images in PATH's stem + '-img' beside it), else PATH/index.html (images in PATH/img)."""
    if path.suffix.lower() in (".html", ".htm") and not path.is_dir():
        return path.parent, PageOptions(index=path.name, images=f"{path.stem}-img")
    return path, PageOptions()


def prepare_work(out: Path | None) -> tuple[Path, bool]:
    """The work directory and whether it is ours to remove: --out DIR (new or empty, kept)
    or a fresh temporary directory."""
    if out is None:
        return Path(tempfile.mkdtemp(prefix="cudump-bisect-")), True
    if out.is_symlink():     # the runs would go wherever it points
        raise UsageError(f"--out {out} is a symlink; cudump does not write through symlinks: "
                         "give the directory itself")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: give a new or empty directory")
    try:
        runfiles.make_dirs(out)         # the folders it makes, none through a symlink
    except OSError as err:
        raise UsageError(f"--out {out}: cannot create it: {err.strerror or err}") from None
    return out, False


def check_html(path: Path) -> None:
    """Trouble before any work if --html PATH cannot take a new report."""
    out, page = html_target(path)
    report_dir(out, page.index, path)
