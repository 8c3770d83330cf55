#!/usr/bin/env python3
"""Puts the output of a tutorial run (docs/tutorial/run.sh OUT) into README.md.

usage: fill_readme.py OUT [--readme README.md] [--check]

README.md marks each tutorial step with a line `<!-- tutorial:NN-name -->` followed by a
fenced block; this replaces the block's text with OUT/NN-name.txt, and copies each picture
README.md shows from docs/tutorial/img/ (`docs/tutorial/img/NAME`) from OUT/NAME. Nothing is
written unless every marker has its transcript, every transcript its marker, the markers are
the steps of docs/tutorial/run.sh in its order, and every picture is there. --check says
what would change and writes nothing. Exit status: 0 done (or nothing to change), 1 with
--check when something would change, 2 trouble.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RUN_SH = HERE / "run.sh"
IMG_DIR = "docs/tutorial/img"

MARKER = re.compile(r"^<!-- tutorial:(\d\d-[a-z0-9-]+) -->$")
FENCE = re.compile(r"^(`{3,})[^`]*$")
PICTURE = re.compile(re.escape(IMG_DIR) + r"/([A-Za-z0-9_.-]+)")
STEP = re.compile(r"^step (\S+)\s*$")
RUN = re.compile(r'^run (\d+) "(.*)"')


class FillError(Exception):
    """README.md, the run's output and run.sh do not fit together."""


def markers(text: str) -> list[str]:
    """The tutorial steps README.md marks, in order."""
    return [m.group(1) for line in text.splitlines() if (m := MARKER.match(line))]


def blocks(text: str) -> dict[str, tuple[int, int, str]]:
    """For each marker: the lines (start, end) of its block's text and its fence."""
    lines = text.splitlines()
    found: dict[str, tuple[int, int, str]] = {}
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        name = m.group(1)
        if name in found:
            raise FillError(f"README.md: marker {name} appears twice")
        opening = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if opening is None:
            raise FillError(f"README.md line {i + 2}: marker {name} is not followed by a "
                            "fenced block")
        fence = opening.group(1)
        for j in range(i + 2, len(lines)):
            if lines[j].rstrip() == fence:
                found[name] = (i + 2, j, fence)
                break
        else:
            raise FillError(f"README.md line {i + 2}: the block after marker {name} is not "
                            "closed")
    return found


def block_text(text: str, name: str) -> str:
    """The text of one marked block."""
    start, end, _ = blocks(text)[name]
    return "\n".join(text.splitlines()[start:end])


def pictures(text: str) -> list[str]:
    """The files under docs/tutorial/img/ that README.md shows, in order, once each."""
    return list(dict.fromkeys(PICTURE.findall(text)))


def script_steps(script: str) -> list[tuple[str, list[str]]]:
    """run.sh's steps, in order, each with the commands it runs (as README.md shows them)."""
    steps: list[tuple[str, list[str]]] = []
    for line in script.splitlines():
        if m := STEP.match(line):
            steps.append((m.group(1), []))
        elif (m := RUN.match(line)) and steps:
            steps[-1][1].append(m.group(2))
    return steps


def fill(text: str, transcripts: dict[str, str]) -> str:
    """README.md's text with each marked block holding its transcript."""
    lines = text.splitlines()
    # From the last block up, so that earlier line numbers stay right.
    for name, (start, end, fence) in sorted(blocks(text).items(), key=lambda kv: -kv[1][0]):
        body = transcripts[name].rstrip("\n").splitlines()
        longest = max((len(m.group(1)) for b in body if (m := re.match(r"^(`{3,})", b))),
                      default=0)
        if longest >= len(fence):
            fence = "`" * (longest + 1)
        lines[start - 1:end + 1] = [fence, *body, fence]
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def check(text: str, out: Path, script: str) -> tuple[dict[str, str], list[str]]:
    """The transcripts and pictures to use; FillError for anything that does not fit."""
    names = markers(text)
    blocks(text)
    steps = [name for name, _ in script_steps(script)]
    if names != steps:
        raise FillError(f"README.md's markers {names} are not run.sh's steps {steps}")
    present = sorted(p.stem for p in out.glob("[0-9][0-9]-*.txt"))
    missing = [n for n in names if n not in present]
    extra = [n for n in present if n not in names]
    if missing or extra:
        raise FillError(f"{out}: " + "; ".join(
            part for part in (f"no transcript for {', '.join(missing)}" if missing else "",
                              f"no marker for {', '.join(extra)}" if extra else "") if part))
    shown = pictures(text)
    absent = [p for p in shown if not (out / p).is_file()]
    if absent:
        raise FillError(f"{out}: the pictures README.md shows are missing: {', '.join(absent)}")
    transcripts = {n: (out / f"{n}.txt").read_text(encoding="utf-8") for n in names}
    return transcripts, shown


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fill_readme.py", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the directory docs/tutorial/run.sh wrote")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--check", action="store_true", help="say what would change only")
    args = parser.parse_args(argv)
    try:
        text = args.readme.read_text(encoding="utf-8")
        transcripts, shown = check(text, args.out, RUN_SH.read_text(encoding="utf-8"))
    except (OSError, FillError) as err:
        print(f"fill_readme.py: {err}", file=sys.stderr)
        return 2
    new = fill(text, transcripts)
    img_dir = args.readme.resolve().parent / IMG_DIR
    changed_pictures = [p for p in shown if not (img_dir / p).is_file()
                        or (img_dir / p).read_bytes() != (args.out / p).read_bytes()]
    if args.check:
        changed = [n for n in transcripts if block_text(text, n) != block_text(new, n)]
        print(f"blocks that would change: {', '.join(changed) or 'none'}; pictures: "
              f"{', '.join(changed_pictures) or 'none'}")
        return 1 if changed or changed_pictures else 0
    img_dir.mkdir(parents=True, exist_ok=True)
    for p in changed_pictures:
        shutil.copyfile(args.out / p, img_dir / p)
    if new != text:
        _write(args.readme, new)
    print(f"{args.readme}: {len(transcripts)} blocks filled; {len(changed_pictures)} of "
          f"{len(shown)} pictures copied to {IMG_DIR}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
