"""What a comparison of two arrays gives (Metrics), under which tolerance (Tolerance)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cudump.errors import DiffTrouble


@dataclass(frozen=True)
class Tolerance:
    atol: float = 0.0
    rtol: float = 0.0

    def __post_init__(self) -> None:
        if not (self.atol >= 0 and self.rtol >= 0):
            raise DiffTrouble(f"tolerances must be >= 0 (atol {self.atol}, rtol {self.rtol})")

    @property
    def given(self) -> bool:
        """Whether elements within it count as equal (not exact)."""
        return self.atol > 0 or self.rtol > 0


@dataclass
class Metrics:
    dtype: str
    shape: tuple[int, ...]
    elements: int
    differing: int
    channels: int                              # 1, or the size of a last axis of 2..4
    channel_differing: list[int] | None        # per channel when channels > 1
    pixels_differing: int | None               # pixels (any channel differs) when channels > 1
    max_abs: float                             # largest finite |a - b|
    max_index: tuple[int, ...] | None          # where it is (None when all equal)
    a_at_max: float | None
    b_at_max: float | None
    mean_abs: float
    rmse: float
    psnr: float | None
    peak: float | None
    nonfinite_mismatch: int

    @property
    def equal(self) -> bool:
        return self.differing == 0

    @property
    def share(self) -> float:
        return self.differing / self.elements if self.elements else 0.0


def channel_count(shape: Sequence[int]) -> int:
    """Channels are a last axis of 2..4 on data of two or more dimensions."""
    if len(shape) >= 2 and 2 <= shape[-1] <= 4:
        return int(shape[-1])
    return 1


def check_comparable(a: np.ndarray, b: np.ndarray, what: str = "") -> None:
    where = f"{what}: " if what else ""
    if a.shape != b.shape:
        raise DiffTrouble(f"{where}shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise DiffTrouble(f"{where}dtypes differ: {a.dtype} vs {b.dtype}")
