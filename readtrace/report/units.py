"""Human-readable numbers for the rendered reports (analysis keeps numbers; only report/ formats them)."""

from __future__ import annotations

import math


def fmt_bytes(n: float | int | None) -> str:
    """1536 -> '1.5 KiB'; binary units, three significant figures."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"


def fmt_pct(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{100 * x:.0f}%"


def fmt_count(n: int | float) -> str:
    """2056 -> '2,056'."""
    return f"{int(n):,}"


def fmt_top(pairs, fmt=fmt_bytes, limit: int = 3) -> str:
    """[[4096, 2056], [8192, 3]] -> '4 KiB x 2,056, 8 KiB x 3' (top sizes / strides with their counts)."""
    return ", ".join(f"{fmt(v)} x {fmt_count(c)}" for v, c in list(pairs)[:limit]) or "-"


def fmt_seconds(s: float | None) -> str:
    """0.0123 -> '12.3 ms', 44.91 -> '44.9 s'."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    if abs(s) < 1:
        return f"{s * 1000:.3g} ms"
    return f"{s:.3g} s" if abs(s) < 10 else f"{s:.1f} s" if abs(s) < 100 else f"{s:.0f} s"
