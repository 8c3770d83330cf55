"""Text tables and the static HTML report (rendered in headless Chromium)."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cudump.diff import Tolerance, diff_runs
from cudump.manifest import ManifestWriter, SnapshotRecord
from cudump.report import HtmlReport, fit, format_table
from cudump.runs import Run

KERNEL = "cam::paint<(sl::YUV_CONVENTION)2>(uchar4*, int)"
KNOWN = (30, 90, 220)            # a colour the screenshot must show if images load


def write_run(root: Path, images: dict[tuple[int, str], np.ndarray]) -> Path:
    root.mkdir(parents=True)
    writer = ManifestWriter(root)
    for (launch, phase), data in sorted(images.items()):
        name = f"l{launch}_{phase}.npy"
        np.save(root / name, data)
        writer.append(SnapshotRecord(
            kernel=KERNEL, mangled="_Z5paint", launch=launch, occurrence=launch, pid=1,
            grid=[1, 1, 1], block=[1, 1, 1], stream="0x0", arg=0, type="uchar4*", phase=phase,
            address="0x1000", dtype=str(data.dtype), shape=list(data.shape), file=name))
    writer.close()
    return root


@pytest.fixture
def report(tmp_path: Path) -> Path:
    """Launch 1 equal, launch 2 differs after the kernel: one section in the report."""
    solid = np.zeros((60, 80, 4), np.uint8)
    solid[...] = KNOWN + (255,)
    ramp = np.zeros_like(solid)
    ramp[..., 0] = np.arange(80, dtype=np.uint8)[None, :] * 3
    ramp[..., 3] = 255
    changed = solid.copy()
    changed[10:30, 10:30, 0] += 120        # the largest difference: white in the heatmap
    changed[35:55, 40:70, 0] += 40         # a third of it: red
    a = write_run(tmp_path / "a", {(1, "before"): ramp, (1, "after"): ramp,
                                   (2, "before"): ramp, (2, "after"): solid})
    b = write_run(tmp_path / "b", {(1, "before"): ramp, (1, "after"): ramp,
                                   (2, "before"): ramp, (2, "after"): changed})
    result = diff_runs(Run.open(a), Run.open(b))
    return HtmlReport(tmp_path / "html", result, "a", "b", Tolerance()).write()


def test_html_report_structure(report: Path) -> None:
    page = report.read_text()
    sections = re.findall(r'<section class="launch[^"]*" id="l(\d+)"', page)
    assert sections == ["0"]                              # only launch 2 differs
    assert "launch 2" in page and "first divergent" in page
    assert "cam::paint&lt;(sl::YUV_CONVENTION)2&gt;" in page     # names are escaped
    assert "<(sl::" not in page
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert len(sources) == 6                              # before and after: A, B, heatmap
    for src in sources:
        assert (report.parent / src).is_file(), src
        Image.open(report.parent / src).verify()


def find_browser() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("CUDUMP_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is required (CUDUMP_REQUIRE_BROWSER=1) but not installed")
        pytest.skip("chromium not installed (set CUDUMP_REQUIRE_BROWSER=1 to require it)")
    return browser


def test_html_report_renders_in_a_browser(report: Path, tmp_path: Path) -> None:
    browser = find_browser()
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
         "--window-size=1280,900", report.resolve().as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    px = np.array(Image.open(shot).convert("RGB")).astype(np.int32)
    assert px.shape[:2] == (900, 1280)
    assert px.std() > 20                                  # not a blank page
    # The solid image of A (and B around its changed block) shows in its own colour:
    # it can only appear if the <img> loaded.
    near = (np.abs(px - np.array(KNOWN)).max(axis=2) <= 6).sum()
    assert near > 5000
    # The heatmap draws the smaller difference in red (nothing else on the page is red).
    red = ((px[..., 0] > 180) & (px[..., 1] < 40) & (px[..., 2] < 40)).sum()
    assert red > 1000


def test_format_table_aligns_and_fit_keeps_both_ends() -> None:
    lines = format_table(["n", "name"], [["1", "a"], ["100", "long name"]], [True, False])
    assert lines == ["  n  name", "  1  a", "100  long name"]
    short = fit("namespace::very_long_kernel_name<int, float>", 20)
    assert len(short) == 20 and short.startswith("namesp") and short.endswith("float>")


HOSTILE = '<img src=x onerror="alert(1)">'


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_html_report_escapes_every_manifest_field(tmp_path: Path) -> None:
    """A manifest is data, possibly from someone else: nothing in it may become markup."""
    images = {}
    for side, value in (("a", 10), ("b", 20)):
        root = tmp_path / side
        root.mkdir()
        writer = ManifestWriter(root)
        for phase in (f"before{HOSTILE}", f"../../after'\"{HOSTILE}"):
            name = f"{len(images)}.npy"
            images[name] = np.full((4, 4, 4), value, np.uint8)
            np.save(root / name, images[name])
            writer.append(SnapshotRecord(
                kernel=f"ns::k{HOSTILE}<int>(float*)", mangled=HOSTILE, launch=1,
                occurrence=1, pid=1, grid=[1, 1, 1], block=[1, 1, 1], stream=HOSTILE, arg=0,
                type=f"uchar4*{HOSTILE}", phase=phase, address=HOSTILE, dtype="uint8",
                shape=[4, 4, 4], file=name, reason=HOSTILE))
        writer.close()
    result = diff_runs(Run.open(tmp_path / "a"), Run.open(tmp_path / "b"))
    assert result.exit_code == 1
    index = HtmlReport(tmp_path / "html", result, f"a{HOSTILE}", f"b{HOSTILE}",
                       Tolerance()).write()
    page = index.read_text()
    assert HOSTILE not in page and "onerror=\"alert" not in page
    assert html.escape(HOSTILE, quote=True) in page
    parser = _Tags()
    parser.feed(page)
    allowed = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "div", "table",
               "tr", "th", "td", "b", "a", "span", "section", "figure", "figcaption", "img",
               "p", "ul", "li"}
    assert {tag for tag, _ in parser.tags} <= allowed
    for tag, attrs in parser.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        if tag == "img":
            assert attrs["src"] is not None and attrs["src"].startswith("img/")
            assert ".." not in attrs["src"]
    # Images are written inside the report, whatever the phase says.
    written = {p.relative_to(tmp_path) for p in tmp_path.rglob("*.png")}
    assert written and all(p.parts[:2] == ("html", "img") for p in written)
