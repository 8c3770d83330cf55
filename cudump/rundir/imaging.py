"""Arrays to images: the one place that decides how a buffer looks as a PNG.

Used by the snapshot writer (a PNG beside each image-like .npy), by `cudump show`
and by `cudump diff` (heatmaps, side-by-side views, the HTML report).

How data becomes pixels:
- uint8 keeps its values: 4 channels -> RGBA, 3 -> RGB, 1 or (H, W) -> L, 2 -> channel 0 as L.
- uint16 (H, W) or (H, W, 1) -> 16-bit grayscale ("I;16"), lossless.
- everything else (floats, other integers, multi-channel uint16, or any data given an
  explicit value range) is mapped linearly from the value range to 0..255; the default range
  is the finite minimum..maximum of the data. Values outside the range are clipped.
- NaN and +/-Inf cannot be mapped; such pixels are painted magenta (the image becomes RGB).
- 1-D data of up to MAX_ROW elements is drawn as a single row; longer 1-D data is wrapped
  into rows of ceil(sqrt(N)) elements, the unused tail of the last row painted dark blue so
  that it cannot be mistaken for data. (N, C) data is two-dimensional and drawn as H x W.
- Nothing is drawn (CannotDraw, with the reason) for an empty array, for more than 4
  channels unless up to 4 are chosen, or for more than MAX_PIXELS pixels; PNGs beyond
  MAX_PIXELS are not read either (a few bytes of PNG header can claim gigabytes).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from PIL.PngImagePlugin import PngInfo

from cudump.errors import SnapshotError, UsageError

MAX_ROW = 4096                    # longest 1-D buffer drawn as a single row
MAX_PIXELS = 1 << 26              # largest image drawn or read (67 million: 8192 x 8192)
NONFINITE_RGB = (255, 0, 255)     # magenta: NaN / Inf
PADDING_RGB = (0, 0, 96)          # the tail of wrapped 1-D data that holds no element
CHANNEL_NAMES = "rgba"


class CannotDraw(UsageError):
    """The data cannot be made into an image; the message says why (no command options)."""


class TooManyChannels(CannotDraw):
    """More than 4 channels and none chosen."""

    def __init__(self, count: int) -> None:
        super().__init__(f"cannot draw {count} channels at once (an image has at most 4)")
        self.count = count


def check_pixels(width: int, height: int, what: str = "image") -> None:
    if width * height > MAX_PIXELS:
        raise CannotDraw(f"{what} of {width:,} x {height:,} = {width * height:,} pixels is "
                         f"too large (at most {MAX_PIXELS:,})")


@dataclass
class Rendered:
    """An image made from an array, with what was decided on the way."""

    image: Image.Image
    value_range: tuple[float, float] | None   # None: values were kept, not mapped
    channels: tuple[int, ...]                  # channels of the data that were drawn
    nonfinite: int = 0                         # NaN/Inf elements among the drawn channels
    notes: list[str] = field(default_factory=list)

    def text(self) -> dict[str, str]:
        """PNG tEXt entries describing how the image was made."""
        out = {"channels": ",".join(str(c) for c in self.channels)}
        if self.value_range is not None:
            out["range"] = f"{self.value_range[0]:.9g} {self.value_range[1]:.9g}"
        if self.nonfinite:
            out["nonfinite"] = str(self.nonfinite)
        if self.notes:
            out["notes"] = "; ".join(self.notes)
        return out


def is_image_like(dtype: np.dtype | str, shape: Sequence[int]) -> bool:
    """True for (H, W) or (H, W, C) numeric data with C in 1..4 and H, W > 1."""
    kind = np.dtype(dtype).kind
    if kind not in "uifb":
        return False
    shape = tuple(shape)
    if len(shape) not in (2, 3) or shape[0] * shape[1] > MAX_PIXELS:
        return False
    if len(shape) == 2:
        return shape[0] > 1 and shape[1] > 1
    return shape[0] > 1 and shape[1] > 1 and 1 <= shape[2] <= 4


def parse_channels(spec: str | Sequence[int] | None, count: int) -> tuple[int, ...] | None:
    """Channel choice as given by a user: "0", "0,1,2", "r,g,b", "rgb", "a" or indices."""
    if spec is None:
        return None
    if isinstance(spec, str):
        words = [w for w in spec.replace(" ", "").split(",") if w]
        if len(words) == 1 and words[0].isalpha() and len(words[0]) > 1:
            words = list(words[0])           # "rgb" -> r, g, b
        picked: list[int] = []
        for word in words:
            if word.isdigit():
                picked.append(int(word))
            elif word.lower() in CHANNEL_NAMES:
                picked.append(CHANNEL_NAMES.index(word.lower()))
            else:
                raise UsageError(f"unknown channel '{word}' (use indices or r, g, b, a)")
    else:
        picked = [int(c) for c in spec]
    if not 1 <= len(picked) <= 4:
        raise UsageError(f"choose 1 to 4 channels, not {len(picked)}")
    for c in picked:
        if not 0 <= c < count:
            raise UsageError(f"channel {c} does not exist (the data has {count})")
    return tuple(picked)


def as_image_array(array: np.ndarray) -> tuple[np.ndarray, int, list[str]]:
    """Bring data into (H, W, C) form for drawing.

    Returns the array, how many trailing elements are padding (wrapped 1-D data), and notes.
    """
    arr = np.asarray(array)
    notes: list[str] = []
    pad = 0
    if arr.size == 0:
        raise CannotDraw(f"nothing to draw: the array is empty (shape {list(arr.shape)})")
    if arr.dtype.kind not in "uifb":
        raise CannotDraw(f"cannot draw data of dtype {arr.dtype}")
    if arr.ndim == 0:
        arr = arr.reshape(1, 1)
    if arr.ndim == 1:
        n = arr.shape[0]
        check_pixels(n, 1, f"1-D data of {n:,} elements")
        if n <= MAX_ROW:
            arr = arr.reshape(1, n)
            notes.append(f"1-D data of {n} elements drawn as one row")
        else:
            width = math.ceil(math.sqrt(n))
            height = math.ceil(n / width)
            pad = width * height - n
            flat = np.zeros(width * height, dtype=arr.dtype)
            flat[:n] = arr
            arr = flat.reshape(height, width)
            notes.append(f"1-D data of {n} elements wrapped into rows of {width}")
    if arr.ndim == 2:
        arr = arr[:, :, None]
    elif arr.ndim > 3:
        # Higher dimensions: the last one is channels if small, the rest are stacked as rows.
        if arr.shape[-1] <= 4:
            arr = arr.reshape(-1, arr.shape[-2], arr.shape[-1])
        else:
            arr = arr.reshape(-1, arr.shape[-1], 1)
        notes.append(f"{np.asarray(array).ndim}-D data stacked into rows")
    check_pixels(arr.shape[1], arr.shape[0])
    return arr, pad, notes


def finite_range(array: np.ndarray) -> tuple[float, float] | None:
    """Minimum and maximum of the finite values, or None when there are none."""
    arr = np.asarray(array)
    if arr.size == 0:
        return None
    if arr.dtype.kind != "f":
        return float(arr.min()), float(arr.max())
    lo, hi = arr.min(), arr.max()     # NaN propagates: then look at the finite values only
    if np.isfinite(lo) and np.isfinite(hi):
        return float(lo), float(hi)
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        return None
    return float(finite.min()), float(finite.max())


def _mode_for(count: int) -> str:
    """The PIL mode an (H, W[, C]) uint8 array of `count` drawn channels becomes."""
    return {1: "L", 2: "RGB", 3: "RGB", 4: "RGBA"}[count]


def _to_mode_array(pixels: np.ndarray) -> np.ndarray:
    """(H, W, C) uint8 into the layout PIL wants for the mode of C channels."""
    count = pixels.shape[2]
    if count == 1:
        return np.ascontiguousarray(pixels[:, :, 0])
    if count == 2:       # two channels: red and green, blue left at zero
        out = np.zeros(pixels.shape[:2] + (3,), dtype=np.uint8)
        out[:, :, :2] = pixels
        return out
    return np.ascontiguousarray(pixels)


def render(
    array: np.ndarray,
    *,
    value_range: tuple[float, float] | None = None,
    channels: str | Sequence[int] | None = None,
) -> Rendered:
    """Turn an array into a PIL image (see the module docstring for the rules)."""
    arr, pad, notes = as_image_array(array)
    count = arr.shape[2]
    picked = parse_channels(channels, count)
    if picked is None:
        if count > 4:
            raise TooManyChannels(count)
        if count == 2 and arr.dtype == np.uint8:
            picked = (0,)
            notes.append("2-channel data: channel 0 drawn; choose others with channels")
        else:
            picked = tuple(range(count))
    data = arr[:, :, list(picked)] if picked != tuple(range(count)) else arr

    if value_range is None and data.dtype == np.uint8:
        pixels = _to_mode_array(data)
        image = Image.fromarray(pixels)
        return _finish(Rendered(image, None, picked, 0, notes), pad)
    if value_range is None and data.dtype == np.uint16 and len(picked) == 1:
        image = Image.fromarray(np.ascontiguousarray(data[:, :, 0]))   # I;16
        return _finish(Rendered(image, None, picked, 0, notes), pad)

    if value_range is None:
        measured = finite_range(data)
        if measured is None:
            measured = (0.0, 1.0)
            notes.append("no finite values")
        value_range = measured
    lo, hi = float(value_range[0]), float(value_range[1])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise UsageError(f"value range must be finite, not {lo}..{hi}")
    if hi < lo:
        raise UsageError(f"value range {lo}..{hi} is empty")
    span = hi - lo if hi > lo else 1.0
    scaled = (data.astype(np.float64) - lo) * (255.0 / span)
    bad = ~np.isfinite(scaled)
    nonfinite = int(bad.sum())
    np.clip(scaled, 0, 255, out=scaled)
    scaled[bad] = 0
    pixels = _to_mode_array((scaled + 0.5).astype(np.uint8))
    mode = _mode_for(len(picked))
    if nonfinite:
        bad_pixels = bad.any(axis=2)
        if mode == "L":
            pixels = np.repeat(pixels[:, :, None], 3, axis=2)
            mode = "RGB"
        pixels[bad_pixels, :3] = NONFINITE_RGB
        if mode == "RGBA":
            pixels[bad_pixels, 3] = 255
        notes.append(f"{nonfinite} NaN/Inf values drawn magenta")
    image = Image.fromarray(pixels)
    return _finish(Rendered(image, (lo, hi), picked, nonfinite, notes), pad)


def _finish(rendered: Rendered, pad: int) -> Rendered:
    """Paint the padding of wrapped 1-D data (it holds no element)."""
    if pad == 0:
        return rendered
    image = rendered.image
    if image.mode not in ("RGB", "RGBA"):
        image = image.convert("RGB")
    pixels = np.array(image)
    flat = pixels.reshape(-1, pixels.shape[2])
    flat[-pad:, :3] = PADDING_RGB
    if pixels.shape[2] == 4:
        flat[-pad:, 3] = 255
    rendered.image = Image.fromarray(pixels)
    return rendered


def save_png(
    rendered_or_image: Rendered | Image.Image,
    path: str | Path | IO[bytes],
    text: Mapping[str, str] | None = None,
    compress_level: int = 1,
) -> Path | IO[bytes]:
    """Write a PNG with tEXt chunks (how it was rendered, plus `text`, e.g. kernel and arg).

    compress_level 1 is the default because encoding at 6 costs ~15x more time for noisy
    pictures and the .npy, not the PNG, is the lossless record. `path` may be a binary file
    open for writing (a run's files are created by cudump.rundir.files).
    """
    info = PngInfo()
    entries: dict[str, str] = {}
    if isinstance(rendered_or_image, Rendered):
        entries.update(rendered_or_image.text())
        image = rendered_or_image.image
    else:
        image = rendered_or_image
    entries.update(text or {})
    for key, value in entries.items():
        info.add_text(str(key), str(value))
    if isinstance(path, str | Path):
        path = Path(path)
    image.save(path, format="PNG", pnginfo=info, compress_level=compress_level)
    return path


def read_png(path: str | Path, file: IO[bytes] | None = None) -> np.ndarray:
    """A PNG as an array in the layout snapshots use: (H, W) L / I;16, (H, W, C) otherwise;
    read from `file` where given (`path` names it in messages).

    Images beyond MAX_PIXELS are refused (SnapshotError) before anything is decoded.
    """
    with warnings.catch_warnings():
        # MAX_PIXELS is the limit here; PIL's warning for large images is noise.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            opened = Image.open(file if file is not None else path)
        except Image.DecompressionBombError:
            raise SnapshotError(f"{path}: image too large to read (more than "
                                f"{MAX_PIXELS:,} pixels)") from None
    with opened as image:
        try:
            check_pixels(image.width, image.height)
        except CannotDraw as err:
            raise SnapshotError(f"{path}: {err}; not read") from None
        image.load()
        mode = image.mode
        if mode == "P":
            image = image.convert("RGBA")
        elif mode == "1":
            image = image.convert("L")
        arr = np.array(image)
    if mode in ("I", "I;16", "I;16B", "I;16L"):
        # 16-bit grayscale PNGs open as I;16 or, in older pillow, as 32-bit I.
        arr = arr.astype(np.uint16)
    return arr


# ---------------------------------------------------------------------------------------
# Views for comparing two buffers


def _hot_lut() -> np.ndarray:
    """Black for no difference, then dark red -> red -> yellow -> white.

    Entry 1 is already clearly visible so a difference of one step is never lost.
    """
    t = np.linspace(0.0, 1.0, 255)
    r = np.clip(0.3 + 0.7 * t / 0.4, 0, 1)
    g = np.clip((t - 0.4) / 0.4, 0, 1)
    b = np.clip((t - 0.8) / 0.2, 0, 1)
    lut = np.zeros((256, 3), dtype=np.uint8)
    lut[1:] = (np.stack([r, g, b], axis=1) * 255 + 0.5).astype(np.uint8)
    return lut


HOT = _hot_lut()


def difference_magnitude(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel largest |a - b| over channels (H, W) and where NaN/Inf disagree (H, W).

    NaN against NaN, and equal infinities, count as no difference.
    """
    ia, pad, _ = as_image_array(a)
    ib, _, _ = as_image_array(b)
    fa = ia.astype(np.float64)
    fb = ib.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(fa - fb)
    bad = ~np.isfinite(d)
    if bad.any():
        same = (np.isnan(fa) & np.isnan(fb)) | (fa == fb)
        mismatch = bad & ~same
        d[bad] = 0.0
    else:
        mismatch = np.zeros(d.shape, dtype=bool)
    magnitude = d.max(axis=2)
    mismatch_px = mismatch.any(axis=2)
    if pad:
        magnitude.reshape(-1)[-pad:] = 0
    return magnitude, mismatch_px


def heatmap(a: np.ndarray, b: np.ndarray, *, scale: float | None = None) -> Rendered:
    """Absolute difference per pixel (largest over channels), black = equal.

    Colours run from dark red (smallest difference) to white (`scale`, default the largest
    difference); NaN/Inf that disagree are magenta.
    """
    magnitude, mismatch = difference_magnitude(a, b)
    top = float(magnitude.max()) if magnitude.size else 0.0
    if scale is None or scale <= 0:
        scale = top if top > 0 else 1.0
    index = np.zeros(magnitude.shape, dtype=np.uint8)
    nonzero = magnitude > 0
    index[nonzero] = np.clip(np.ceil(magnitude[nonzero] * (255.0 / scale)), 1, 255)
    pixels = HOT[index]
    pixels[mismatch] = NONFINITE_RGB
    notes = [f"|A-B| scaled 0..{scale:.6g}; largest {top:.6g}"]
    if mismatch.any():
        notes.append(f"{int(mismatch.sum())} pixels with NaN/Inf disagreeing drawn magenta")
    return Rendered(Image.fromarray(pixels), (0.0, float(scale)), (), 0, notes)


def render_pair(
    a: np.ndarray,
    b: np.ndarray,
    *,
    value_range: tuple[float, float] | None = None,
    channels: str | Sequence[int] | None = None,
    alpha: bool = False,
) -> tuple[Rendered, Rendered, Rendered]:
    """A, B and the heatmap drawn for comparison: mapped data shares one value range, and
    4-channel data shows its colour channels, opaque, unless `alpha` keeps its alpha channel
    (the heatmap covers alpha either way)."""
    ia, _, _ = as_image_array(a)
    if channels is None and ia.shape[2] == 4 and not alpha:
        channels = (0, 1, 2)
    needs_range = value_range is None and not (
        ia.dtype == np.uint8 or (ia.dtype == np.uint16 and ia.shape[2] == 1)
    )
    if needs_range:
        ra, rb = finite_range(a), finite_range(b)
        found = [r for r in (ra, rb) if r is not None]
        if found:
            value_range = (min(r[0] for r in found), max(r[1] for r in found))
    left = render(a, value_range=value_range, channels=channels)
    right = render(b, value_range=value_range, channels=channels)
    if channels == (0, 1, 2) and ia.shape[2] == 4:
        left.notes.append("alpha not shown")
        right.notes.append("alpha not shown")
    return left, right, heatmap(a, b)


def side_by_side(
    images: Sequence[Rendered | Image.Image],
    labels: Sequence[str] | None = None,
    gap: int = 8,
) -> Image.Image:
    """Images next to each other on a dark background, each with an optional label above."""
    pics = [(i.image if isinstance(i, Rendered) else i) for i in images]
    pics = [p.convert("RGB") if p.mode != "RGB" else p for p in pics]
    label_h = 14 if labels else 0
    width = sum(p.width for p in pics) + gap * (len(pics) + 1)
    height = max(p.height for p in pics) + label_h + gap * 2
    canvas = Image.new("RGB", (width, height), (40, 40, 40))
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default() if labels else None
    x = gap
    for number, pic in enumerate(pics):
        if labels and number < len(labels):
            draw.text((x, gap // 2), labels[number], fill=(230, 230, 230), font=font)
        canvas.paste(pic, (x, gap + label_h))
        x += pic.width + gap
    return canvas
