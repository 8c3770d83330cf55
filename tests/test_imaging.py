"""Arrays to images: modes, value ranges, channels, NaN marking, PNG text, diff views."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from cudump.errors import UsageError
from cudump.rundir.imaging import (
    MAX_ROW,
    NONFINITE_RGB,
    PADDING_RGB,
    heatmap,
    is_image_like,
    parse_channels,
    read_png,
    render,
    render_pair,
    save_png,
    side_by_side,
)

RNG = np.random.default_rng(7)


@pytest.mark.parametrize(
    ("channels", "mode"), [(4, "RGBA"), (3, "RGB"), (1, "L")]
)
def test_uint8_keeps_values_in_the_matching_mode(channels: int, mode: str) -> None:
    arr = RNG.integers(0, 256, (5, 7, channels), dtype=np.uint8)
    out = render(arr)
    assert out.image.mode == mode
    assert out.value_range is None
    back = np.array(out.image)
    expected = arr[:, :, 0] if channels == 1 else arr
    np.testing.assert_array_equal(back, expected)


def test_uint8_two_channels_draw_channel_zero_unless_chosen() -> None:
    arr = RNG.integers(0, 256, (4, 6, 2), dtype=np.uint8)
    default = render(arr)
    assert default.image.mode == "L"
    np.testing.assert_array_equal(np.array(default.image), arr[:, :, 0])
    second = render(arr, channels="1")
    np.testing.assert_array_equal(np.array(second.image), arr[:, :, 1])
    assert second.channels == (1,)


def test_channel_names_pick_channels() -> None:
    arr = RNG.integers(0, 256, (3, 3, 4), dtype=np.uint8)
    out = render(arr, channels="b,g,r")
    assert out.image.mode == "RGB"
    np.testing.assert_array_equal(np.array(out.image), arr[:, :, [2, 1, 0]])
    assert parse_channels("rgb", 4) == (0, 1, 2)
    assert parse_channels("a", 4) == (3,)
    with pytest.raises(UsageError):
        parse_channels("3", 3)
    with pytest.raises(UsageError):
        parse_channels("x", 4)


def test_uint16_gray_is_sixteen_bit_and_round_trips(tmp_path) -> None:
    arr = RNG.integers(0, 65536, (9, 11), dtype=np.uint16)
    out = render(arr)
    assert out.image.mode.startswith("I")
    path = save_png(out, tmp_path / "g.png")
    back = read_png(path)
    assert back.dtype == np.uint16
    np.testing.assert_array_equal(back, arr)


def test_float_maps_linearly_over_the_measured_range() -> None:
    arr = np.array([[0.0, 0.25], [0.5, 1.0]], dtype=np.float32) * 4 - 1   # -1 .. 3
    out = render(arr)
    assert out.value_range == (-1.0, 3.0)
    expected = np.round((arr.astype(np.float64) + 1) / 4 * 255).astype(np.uint8)
    np.testing.assert_array_equal(np.array(out.image), expected)


def test_float_explicit_range_clips() -> None:
    arr = np.array([[-5.0, 0.0, 0.5, 9.0]])
    out = render(arr, value_range=(0.0, 1.0))
    np.testing.assert_array_equal(np.array(out.image)[0], [0, 0, 128, 255])


def test_nan_and_inf_are_counted_and_magenta() -> None:
    arr = np.zeros((3, 4), dtype=np.float32)
    arr[1, 2] = np.nan
    arr[2, 0] = np.inf
    arr[0, 0] = 2.0
    out = render(arr)
    assert out.nonfinite == 2
    assert out.image.mode == "RGB"
    px = np.array(out.image)
    assert tuple(px[1, 2]) == NONFINITE_RGB
    assert tuple(px[2, 0]) == NONFINITE_RGB
    assert tuple(px[0, 0]) == (255, 255, 255)       # the finite maximum is white
    assert out.value_range == (0.0, 2.0)


def test_short_1d_is_one_row_long_1d_wraps_with_marked_padding() -> None:
    short = np.arange(10, dtype=np.float32)
    assert render(short).image.size == (10, 1)
    n = MAX_ROW + 5
    long = np.arange(n, dtype=np.float32)
    out = render(long)
    width, height = out.image.size
    assert width * height >= n and width * (height - 1) < n
    px = np.array(out.image).reshape(-1, 3)
    pad = width * height - n
    assert pad > 0
    assert (px[-pad:] == PADDING_RGB).all()
    assert tuple(px[n - 1]) == (255, 255, 255)


def test_is_image_like() -> None:
    assert is_image_like("uint8", (1080, 1920, 4))
    assert is_image_like("float32", (10, 10))
    assert not is_image_like("uint8", (1080, 1920, 5))
    assert not is_image_like("uint8", (1, 1920, 4))
    assert not is_image_like("float32", (100,))
    assert not is_image_like("float32", (2, 3, 4, 5))


def test_save_png_writes_text_chunks(tmp_path) -> None:
    arr = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    path = save_png(render(arr, value_range=(0.0, 2.0)), tmp_path / "t.png",
                    {"kernel": "cam::paint<2>", "arg": "0"})
    with Image.open(path) as image:
        text = dict(image.text)
    assert text["kernel"] == "cam::paint<2>"
    assert text["arg"] == "0"
    assert [float(x) for x in text["range"].split()] == [0.0, 2.0]


def test_heatmap_marks_only_differing_pixels() -> None:
    a = RNG.integers(0, 200, (6, 8, 4), dtype=np.uint8)
    b = a.copy()
    b[2, 3, 1] += 7
    b[4, 5, 3] += 1                       # alpha only, smallest step: still visible
    px = np.array(heatmap(a, b).image)
    lit = px.sum(axis=2) > 0
    assert set(zip(*np.nonzero(lit), strict=True)) == {(2, 3), (4, 5)}
    assert px[2, 3].sum() > px[4, 5].sum()
    assert px[4, 5, 0] >= 60              # a one-step difference is clearly visible
    assert not np.array(heatmap(a, a).image).any()


def test_heatmap_nan_disagreement_is_magenta_nan_agreement_is_black() -> None:
    a = np.zeros((2, 3), dtype=np.float32)
    b = a.copy()
    a[0, 0] = b[0, 0] = np.nan
    b[1, 2] = np.nan
    px = np.array(heatmap(a, b).image)
    assert tuple(px[1, 2]) == NONFINITE_RGB
    assert tuple(px[0, 0]) == (0, 0, 0)


def test_render_pair_shares_the_float_range_and_side_by_side_sizes() -> None:
    a = np.full((4, 5), 1.0)
    b = np.full((4, 5), 3.0)
    left, right, heat = render_pair(a, b)
    assert left.value_range == right.value_range == (1.0, 3.0)
    assert np.array(left.image).max() == 0 and np.array(right.image).min() == 255
    canvas = side_by_side([left, right, heat], ["A", "B", "diff"], gap=2)
    assert canvas.width == 5 * 3 + 2 * 4
    assert canvas.height >= 4


# ---------------------------------------------------------------------------------------
# What cannot be drawn or read


def png_header_only(path, width: int, height: int) -> None:
    """A PNG that claims width x height RGB pixels in a few dozen bytes (no pixel data)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                     + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


@pytest.mark.parametrize("side", [19000, 9000])      # PIL refuses the first, not the second
def test_huge_png_is_refused_before_decoding(tmp_path, side) -> None:
    from cudump.errors import SnapshotError

    path = tmp_path / "bomb.png"
    png_header_only(path, side, side)
    with pytest.raises(SnapshotError) as info:
        read_png(path)
    assert "too large" in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0, 4), (2, 0, 0, 1)])
def test_empty_arrays_are_not_drawn(shape) -> None:
    from cudump.rundir.imaging import CannotDraw

    with pytest.raises(CannotDraw) as info:
        render(np.zeros(shape, np.float32))
    assert "empty" in str(info.value)


def test_too_many_channels_without_a_choice_names_no_command_option() -> None:
    from cudump.rundir.imaging import TooManyChannels

    data = RNG.random((4, 5, 6)).astype(np.float32)
    with pytest.raises(TooManyChannels) as info:
        render(data)
    assert "6 channels" in str(info.value) and "--" not in str(info.value)
    picked = render(data, channels="0,4,5")           # choosing channels works
    assert picked.channels == (0, 4, 5) and picked.image.size == (5, 4)


def test_data_beyond_the_pixel_limit_is_not_drawn(monkeypatch) -> None:
    import cudump.rundir.imaging as imaging

    monkeypatch.setattr(imaging, "MAX_PIXELS", 100)
    with pytest.raises(imaging.CannotDraw) as info:
        render(np.zeros((11, 10), np.uint8))
    assert "too large" in str(info.value)
    with pytest.raises(imaging.CannotDraw):
        render(np.zeros(101, np.uint8))
    assert render(np.zeros((10, 10), np.uint8)).image.size == (10, 10)
    assert not is_image_like(np.uint8, (11, 10)) and is_image_like(np.uint8, (10, 10))


def test_non_numeric_data_is_not_drawn() -> None:
    from cudump.rundir.imaging import CannotDraw

    with pytest.raises(CannotDraw):
        render(np.array([["a", "b"], ["c", "d"]]))
