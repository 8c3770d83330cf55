"""Numbers as the reports show them: counts, shares, values, indices and tolerances."""

from __future__ import annotations

import math

from cudump.analysis.diff.metrics import Tolerance


def fmt_count(n: int) -> str:
    return f"{n:,}"


def ratio(part: int, whole: int) -> float:
    """part / whole, 0 for an empty whole (an empty array has nothing that differs)."""
    return part / whole if whole else 0.0


def fmt_share(share: float) -> str:
    if share == 0:
        return "0%"
    if share == 1:
        return "100%"
    return f"{share * 100:.3g}%"


def fmt_num(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if math.isnan(x):
        return "nan"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}"


def fmt_psnr(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else f"{x:.2f}"


def fmt_where(index: tuple[int, ...] | None) -> str:
    return "-" if index is None else "(" + ",".join(str(i) for i in index) + ")"


def fmt_tol(tol: Tolerance) -> str:
    return f"atol {fmt_num(tol.atol)}, rtol {fmt_num(tol.rtol)}"


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
