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

from cudump.analysis.diff.metrics import Tolerance
from cudump.analysis.diff.runs import diff_runs
from cudump.analysis.report.html_page import HtmlReport, PageOptions
from cudump.analysis.report.tables import fit, format_table
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord
from cudump.rundir.runs import Run

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


def screenshot(page: Path, tmp_path: Path) -> np.ndarray:
    """The page as headless Chromium shows it in a 1280 x 900 window, as RGB."""
    browser = find_browser()
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
         "--window-size=1280,900", page.resolve().as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    return np.array(Image.open(shot).convert("RGB")).astype(np.int32)


def near(px: np.ndarray, colour: tuple[int, int, int], tolerance: int = 40) -> int:
    return int((np.abs(px - np.array(colour)).max(axis=2) <= tolerance).sum())


def test_html_report_renders_in_a_browser(report: Path, tmp_path: Path) -> None:
    px = screenshot(report, tmp_path)
    assert px.shape[:2] == (900, 1280)
    assert px.std() > 20                                  # not a blank page
    # The solid image of A (and B around its changed block) shows in its own colour:
    # it can only appear if the <img> loaded.
    assert near(px, KNOWN, 6) > 5000
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


# ---------------------------------------------------------------------------------------
# 1-D buffers: line plots and the elements that differ; RGBA: opaque unless asked


def one_d_report(tmp_path: Path, a: np.ndarray, b: np.ndarray) -> tuple[Path, str]:
    run_a = write_run(tmp_path / "a", {(1, "after"): a})
    run_b = write_run(tmp_path / "b", {(1, "after"): b})
    result = diff_runs(Run.open(run_a), Run.open(run_b))
    index = HtmlReport(tmp_path / "html", result, "a", "b", Tolerance()).write()
    return index, index.read_text()


def test_html_report_plots_1d_buffers_and_lists_the_differing_elements(tmp_path: Path) -> None:
    a = np.arange(1000, dtype=np.float32) * 3
    b = a.copy()
    b[997:] *= 4                                  # bisect's README example: 3 elements
    index, page = one_d_report(tmp_path, a, b)
    assert '<svg class="plot"' in page
    assert page.count("<polyline") >= 3           # A, B and |A - B|
    # No image panel: a 1-D buffer was drawn as a 1000 x 1 pixel strip.
    assert "<img" not in page
    assert not list((index.parent / "img").glob("*.png"))
    # The differing elements are marked in the plot and listed under it.
    assert 'class="differ"' in page
    assert "elements that differ: all 3, all of them within [997:1000]" in page
    cells = re.findall(r"<tr><td>\((\d+)\)</td><td>([^<]*)</td><td>([^<]*)</td></tr>", page)
    assert cells == [("997", "2991", "11964"), ("998", "2994", "11976"),
                     ("999", "2997", "11988")]


def test_html_report_plot_of_a_long_buffer_is_bounded_and_keeps_a_spike(
        tmp_path: Path) -> None:
    from cudump.analysis.plot import MAX_POINTS

    a = np.sin(np.arange(1_000_000, dtype=np.float64) / 5000)
    b = a.copy()
    b[123_457] = 50.0                             # one element: must stay visible
    b[600_000:600_020] = np.nan
    _, page = one_d_report(tmp_path, a, b)
    lines = re.findall(r'<polyline points="([^"]*)"', page)
    assert lines and all(len(pts.split()) <= MAX_POINTS for pts in lines)
    assert ">50<" in page                         # the value axis reaches the spike
    assert 'class="nonfinite"' in page
    assert "the first 10 of 21" in page
    assert len(page) < 400_000


def alpha_of(png: Path) -> np.ndarray:
    image = Image.open(png)
    if image.mode != "RGBA":
        return np.full(image.size[::-1], 255, np.uint8)
    return np.array(image)[..., 3]


def test_html_report_draws_rgba_opaque_unless_alpha_is_asked_for(tmp_path: Path) -> None:
    # A is all zero, alpha included; B is another size, so each is drawn on its own.
    blank = np.zeros((40, 50, 4), np.uint8)
    other = np.full((40, 60, 4), 200, np.uint8)
    run_a = write_run(tmp_path / "a", {(1, "after"): blank})
    run_b = write_run(tmp_path / "b", {(1, "after"): other})
    result = diff_runs(Run.open(run_a), Run.open(run_b))
    index = HtmlReport(tmp_path / "opaque", result, "a", "b", Tolerance()).write()
    pngs = sorted((index.parent / "img").glob("*.png"))
    assert pngs
    for png in pngs:
        assert (alpha_of(png) == 255).all(), png     # the blank A shows, black
    assert 'class="alpha"' not in index.read_text()

    index = HtmlReport(tmp_path / "alpha", result, "a", "b", Tolerance(),
                       page=PageOptions(alpha=True)).write()
    shown_a = index.parent / "img" / "00000-0-a.png"
    assert (alpha_of(shown_a) == 0).all()             # its alpha, over a checkerboard
    assert '<img src="img/00000-0-a.png" class="alpha"' in index.read_text()


def test_diff_alpha_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cudump.cli import main

    same = np.zeros((8, 8, 4), np.uint8)
    changed = same.copy()
    changed[0, 0] = 9
    run_a = write_run(tmp_path / "a", {(1, "after"): same})
    run_b = write_run(tmp_path / "b", {(1, "after"): changed})
    assert main(["diff", str(run_a), str(run_b), "--html", str(tmp_path / "h"), "--alpha"]) == 1
    assert (alpha_of(tmp_path / "h" / "img" / "00000-0-a.png") == 0).all()
    assert main(["diff", str(run_a), str(run_b)]) == 1
    assert main(["diff", str(run_a), str(run_b), "--alpha"]) == 2
    assert "--alpha is for the --html report" in capsys.readouterr().err


def test_html_report_plot_renders_in_a_browser(tmp_path: Path) -> None:
    """Both lines of a 1-D pair show, and |A - B|: the plot is not a hairline."""
    a = np.sin(np.arange(5000, dtype=np.float32) / 300) * 100
    b = a.copy()
    b[2500:3000] += 40
    index, _ = one_d_report(tmp_path, a, b)
    px = screenshot(index, tmp_path)
    r, g, bl = px[..., 0], px[..., 1], px[..., 2]
    blue = ((bl > r + 40) & (bl > 150)).sum()             # A's band
    orange = ((r > 180) & (g > 70) & (g < 170) & (bl < 90)).sum()   # B's line
    red = ((r > 150) & (g < 70) & (bl < 70)).sum()        # the marks and |A - B|
    assert blue > 2000 and orange > 300 and red > 200, (blue, orange, red)
