"""Numbers as the dashboard shows them: always with their unit, "—" when there is no value."""

from __future__ import annotations

import math

MISSING = "—"


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def ms(value: float | None) -> str:
    """Milliseconds: 0.042 ms, 3.41 ms, 41.2 ms, 1,234 ms."""
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    if abs(v) < 1:
        return f"{v:.3f} ms"
    if abs(v) < 10:
        return f"{v:.2f} ms"
    if abs(v) < 1000:
        return f"{v:.1f} ms"
    return f"{v:,.0f} ms"


def signed_ms(value: float | None) -> str:
    if _missing(value):
        return MISSING
    text = ms(value)
    return text if text.startswith("-") else f"+{text}"


def pct(fraction: float | None, digits: int = 1) -> str:
    """A fraction shown as a percentage: 0.0123 -> 1.2 %."""
    if _missing(fraction):
        return MISSING
    value = 100 * float(fraction)  # type: ignore[arg-type]
    if round(value, digits) == 0:
        value = 0.0  # no "-0.0 %"
    return f"{value:.{digits}f} %"


def signed_pct(fraction: float | None, digits: int = 1) -> str:
    if _missing(fraction):
        return MISSING
    text = pct(fraction, digits)
    return text if text.startswith("-") else f"+{text}"


def rps(value: float | None) -> str:
    if _missing(value):
        return MISSING
    return f"{float(value):,.1f} req/s"  # type: ignore[arg-type]


def usd(value: float | None, digits: int = 4) -> str:
    if _missing(value):
        return MISSING
    return f"{float(value):,.{digits}f} USD"  # type: ignore[arg-type]


def count(value: int | None) -> str:
    if value is None:
        return MISSING
    return f"{int(value):,}"


def seconds(value: float | None) -> str:
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    if v < 1:
        return f"{v * 1000:,.0f} ms"
    return f"{v:,.1f} s" if v < 600 else f"{v / 60:,.1f} min"
