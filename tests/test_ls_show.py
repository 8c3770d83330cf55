"""`cudump ls` and `cudump show`: listing, choosing one snapshot, statistics, rendering."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from clirun import run_cli
from PIL import Image

from cudump.commands.ls import LsCommand
from cudump.commands.show import ShowCommand, snapshot_stats
from cudump.rundir.imaging import NONFINITE_RGB
from cudump.rundir.manifest import ManifestWriter, SnapshotRecord

KERNEL = "cam::paint<(sl::YUV_CONVENTION)2>(uchar4*, int, float*)"




@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Two launches of a kernel (image arg 0, float arg 2), plus one failed snapshot."""
    root = tmp_path / "run"
    root.mkdir()
    writer = ManifestWriter(root)
    rng = np.random.default_rng(3)

    def add(launch: int, arg: int, phase: str, data: np.ndarray | None, kind: str) -> None:
        name = f"l{launch}_a{arg}_{phase}.npy" if data is not None else None
        if data is not None:
            np.save(root / name, data)
        writer.append(SnapshotRecord(
            kernel=KERNEL, mangled="_Z5paint", launch=launch, occurrence=launch, pid=42,
            grid=[2, 1, 1], block=[32, 1, 1], stream="0x0", arg=arg, type=kind, phase=phase,
            address=hex(0x7000 + arg), dtype=None if data is None else str(data.dtype),
            shape=None if data is None else list(data.shape), file=name,
            status="ok" if data is not None else "error",
            reason=None if data is not None else "allocation freed"))

    for launch in (1, 2):
        for phase in ("before", "after"):
            add(launch, 0, phase, rng.integers(0, 256, (6, 8, 4), dtype=np.uint8), "uchar4*")
            values = np.linspace(-2.0, 6.0, 24, dtype=np.float32).reshape(4, 6)
            values[1, 1] = np.nan
            values[2, 3] = np.inf
            add(launch, 2, phase, values, "float*")
    add(3, 0, "after", None, "uchar4*")
    writer.close()
    return root


def test_ls_lists_every_snapshot_with_aligned_columns(run_dir: Path, capsys) -> None:
    code, out, _ = run_cli(LsCommand(), [str(run_dir)], capsys)
    assert code == 0
    lines = out.splitlines()
    header, rows = lines[0], lines[1:-1]
    assert len(rows) == 9
    assert lines[-1] == "9 of 9 records: 8 snapshots, 1 failed (not captured)"
    col = header.index("phase")
    assert [r[col:col + 6].strip() for r in rows[:4]] == ["before", "before", "after", "after"]
    assert "cam::paint<(sl::YUV_CONVENTION)2>" in rows[0] and "(uchar4*" not in rows[0]
    assert "error: allocation freed" in rows[-1]

    code, out, _ = run_cli(LsCommand(), [str(run_dir), "--arg", "2", "--phase", "after"],
                           capsys)
    assert code == 0 and out.splitlines()[-1] == "2 of 9 records: 2 snapshots"
    code, out, _ = run_cli(LsCommand(), [str(run_dir), "--full-names"], capsys)
    assert KERNEL in out


def test_ls_of_a_directory_without_manifest_is_an_error(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(LsCommand(), [str(tmp_path)], capsys)
    assert code == 2 and "not a cudump run directory" in err


def test_show_selects_by_kernel_arg_phase_occurrence(run_dir: Path, capsys) -> None:
    code, out, _ = run_cli(ShowCommand(), [str(run_dir), "cam::paint*", "--arg", "2",
                                           "--phase", "after", "--occurrence", "2"], capsys)
    assert code == 0
    assert "launch 2, occurrence 2, arg 2 (float*), after" in out
    assert "l2_a2_after.npy" in out
    stats = {line.split()[0]: line.split() for line in out.splitlines()[4:]}
    row = stats["all"]                    # label min max mean std zeros NaN +Inf -Inf
    values = np.load(run_dir / "l2_a2_after.npy")
    finite = values[np.isfinite(values)]
    assert float(row[1]) == pytest.approx(finite.min())
    assert float(row[2]) == pytest.approx(finite.max())
    assert float(row[3]) == pytest.approx(finite.mean(), rel=1e-3)
    assert row[6:9] == ["1", "1", "0"]


def test_show_by_index_and_by_file(run_dir: Path, capsys) -> None:
    code, out, _ = run_cli(ShowCommand(), [str(run_dir), "--index", "0"], capsys)
    assert code == 0 and "snapshot #0" in out and "ch 3 (a)" in out
    code, out, _ = run_cli(ShowCommand(), [str(run_dir / "l1_a0_after.npy")], capsys)
    assert code == 0 and "snapshot #2" in out


def test_show_ambiguous_or_failed_choice_is_explained(run_dir: Path, capsys) -> None:
    code, out, err = run_cli(ShowCommand(), [str(run_dir), "paint", "--arg", "0"], capsys)
    assert code == 2 and "snapshots match" in err
    assert sum(".npy" in line for line in out.splitlines()) == 4     # candidates listed
    code, _, err = run_cli(ShowCommand(), [str(run_dir), "--launch", "3"], capsys)
    assert code == 2 and "allocation freed" in err
    code, _, err = run_cli(ShowCommand(), [str(run_dir), "nosuchkernel"], capsys)
    assert code == 2 and "no snapshot matches" in err


def test_show_renders_float_with_range_and_marks_nonfinite(run_dir: Path, tmp_path: Path,
                                                            capsys) -> None:
    png = tmp_path / "f.png"
    code, out, _ = run_cli(ShowCommand(), [str(run_dir), "--index", "1", "--png", str(png),
                                           "--range=-2:6"], capsys)
    assert code == 0 and "range -2..6" in out
    px = np.array(Image.open(png))
    assert px.shape == (4, 6, 3)
    assert tuple(px[1, 1]) == NONFINITE_RGB and tuple(px[2, 3]) == NONFINITE_RGB
    assert tuple(px[0, 0]) == (0, 0, 0) and tuple(px[3, 5]) == (255, 255, 255)
    with Image.open(png) as image:
        assert image.text["kernel"] == KERNEL


def test_show_renders_chosen_channels(run_dir: Path, tmp_path: Path, capsys) -> None:
    png = tmp_path / "g.png"
    code, _, _ = run_cli(ShowCommand(), [str(run_dir), "--index", "0", "--png", str(png),
                                         "--channels", "g"], capsys)
    assert code == 0
    data = np.load(run_dir / "l1_a0_before.npy")
    np.testing.assert_array_equal(np.array(Image.open(png)), data[:, :, 1])


def test_snapshot_stats_per_channel() -> None:
    arr = np.stack([np.zeros((3, 3)), np.full((3, 3), 5.0)], axis=2)
    stats = snapshot_stats(arr)
    assert [s.label for s in stats] == ["all", "ch 0 (r)", "ch 1 (g)"]
    assert stats[1].maximum == 0 and stats[2].minimum == 5 and stats[0].mean == 2.5
    assert stats[1].zeros == 9


# ---------------------------------------------------------------------------------------
# --kernel: the same patterns as rules


ZED = ("void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4*, int, device::uchar8*, "
       "device::uchar8*, int, int, int, float)")


def zed_run(root: Path) -> Path:
    root.mkdir()
    writer = ManifestWriter(root)
    for n, kernel in enumerate((ZED, "nv12_to_uyvy(unsigned char const*, unsigned int)")):
        np.save(root / f"s{n}.npy", np.zeros((4, 4, 4), np.uint8))
        writer.append(SnapshotRecord(
            kernel=kernel, mangled=f"_Z{n}", launch=n + 1, occurrence=1, pid=7,
            grid=[1, 1, 1], block=[1, 1, 1], stream="0x0", arg=0, type="uchar4*",
            phase="after", address="0x1000", dtype="uint8", shape=[4, 4, 4], file=f"s{n}.npy"))
    writer.close()
    return root


@pytest.mark.parametrize("pattern,found", [
    ("device::FrP0k5607tPV*", 1),       # found nothing before: the name starts with "void "
    ("void device::FrP0k5607tPV*", 1),
    ("device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>", 1),
    ("FrP0k5607tPV", 1),
    ("FrP0k", 0),                       # a plain word names a kernel, it is not a substring
    ("*FrP0k*", 1),
    ("nv12_to_uyvy", 1),
    ("re:uyvy|FrP0k", 2),
    ("*", 2),
])
def test_ls_kernel_pattern_matches_like_a_rule(tmp_path: Path, capsys, pattern, found) -> None:
    run = zed_run(tmp_path / "run")
    code, out, _ = run_cli(LsCommand(), [str(run), "--kernel", pattern], capsys)
    assert code == 0 and f"{found} of 2 records: " in out
    code, out, _ = run_cli(ShowCommand(), [str(run), pattern], capsys)
    assert code == (0 if found == 1 else 2)


def test_bad_kernel_pattern_is_a_usage_error(tmp_path: Path, capsys) -> None:
    run = zed_run(tmp_path / "run")
    for command in (LsCommand(), ShowCommand()):
        argv = [str(run), "--kernel", "re:(x*)*"] if command.name == "ls" else [str(run),
                                                                                "re:(x*)*"]
        code, _, err = run_cli(command, argv, capsys)
        assert code == 2 and "bad kernel pattern" in err


# ---------------------------------------------------------------------------------------
# Paths in a manifest stay inside the run


@pytest.mark.parametrize("escape", ["../../../../etc/passwd", "/etc/hostname", "../secret.npy",
                                    "link.npy"])
def test_manifest_paths_outside_the_run_are_not_opened(tmp_path: Path, capsys,
                                                       escape: str) -> None:
    secret = tmp_path / "secret.npy"
    np.save(secret, np.arange(6, dtype=np.uint8))
    root = tmp_path / "run"
    root.mkdir()
    (root / "link.npy").symlink_to(secret)
    writer = ManifestWriter(root)
    writer.append(SnapshotRecord(
        kernel=KERNEL, mangled="_Z5paint", launch=1, occurrence=1, pid=1, grid=[1, 1, 1],
        block=[1, 1, 1], stream="0x0", arg=0, type="uchar4*", phase="after", address="0x0",
        dtype="uint8", shape=[6], file=escape, png=escape))
    writer.close()

    code, out, _ = run_cli(LsCommand(), [str(root)], capsys)
    assert code == 0 and "outside the run directory" in out and "1 unreadable" in out
    code, out, err = run_cli(ShowCommand(), [str(root), "--index", "0"], capsys)
    assert code == 2 and "cannot be read" in err and "outside the run directory" in err
    assert "data:" not in out

    from cudump.commands.diff import DiffCommand
    code, _, err = run_cli(DiffCommand(), [str(root), str(root)], capsys)
    assert code == 2 and "outside the run directory" in err


# ---------------------------------------------------------------------------------------
# Bad data


def test_show_png_of_an_empty_array_is_an_error(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "e.npy", np.zeros((0, 3), np.float32))
    code, out, err = run_cli(ShowCommand(), [str(tmp_path / "e.npy"), "--png",
                                             str(tmp_path / "e.png")], capsys)
    assert code == 2 and err.startswith("cudump: error:") and "empty" in err
    # Checked before any statistics are printed: one line of error, nothing else.
    assert out == "" and not (tmp_path / "e.png").exists()


def test_show_png_of_many_channels_names_its_option(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "c.npy", np.zeros((3, 3, 6), np.float32))
    png = tmp_path / "c.png"
    code, _, err = run_cli(ShowCommand(), [str(tmp_path / "c.npy"), "--png", str(png)], capsys)
    assert code == 2 and "6 channels" in err and "--channels" in err
    code, _, _ = run_cli(ShowCommand(), [str(tmp_path / "c.npy"), "--png", str(png),
                                         "--channels", "0,5"], capsys)
    assert code == 0 and png.is_file()


def test_show_of_a_file_that_is_not_npy(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "x.npy"
    bad.write_text("just text")
    code, _, err = run_cli(ShowCommand(), [str(bad)], capsys)
    assert code == 2 and "not a .npy file (or a corrupted one)" in err and "pickle" not in err


def test_show_of_strings_is_an_error(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    code, _, err = run_cli(ShowCommand(), [str(tmp_path / "s.npy")], capsys)
    assert code == 2 and "not numbers" in err


def test_show_png_to_an_unwritable_place(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "a.npy", np.zeros((3, 3), np.uint8))
    (tmp_path / "file").write_text("")
    code, _, err = run_cli(ShowCommand(), [str(tmp_path / "a.npy"), "--png",
                                           str(tmp_path / "file" / "x.png")], capsys)
    assert code == 2 and "cannot write" in err
