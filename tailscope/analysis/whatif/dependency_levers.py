"""A dependency slow in episodes (a backend's background work: segment merges, compactions, a noisy
neighbour): its calls are slow for stretches of the run and usual between them, so its p50 is itself
a slow one where the episodes cover most of the run. The fix (the episodes gone): each call of a
stretch whose mean time is over twice the quieter quarter's takes the time of a call in a calm stretch
(drawn from the run)."""

from __future__ import annotations

from typing import Any

from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever, _draw, _top_calls
from tailscope.analysis.whatif.retime import Edit


def dependency_as_calm(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """None where no stretch is disturbed, or fewer than 20 calls are calm (queue_levers._calm)."""
    from tailscope.analysis.whatif.queue_levers import _calm

    name = finding.get("span_name")
    spans = _top_calls(x, name)
    if len(spans) < 40:
        return None
    f = x.frame
    calm = _calm(f.start[spans], f.dur[spans].astype("float64"), deep=True)
    if calm is None:
        return None
    edit = Edit.none(len(f))
    rows = spans[~calm]
    edit.dur[rows] = _draw(x.rng(45), f.dur[spans[calm]], len(rows)).clip(max=f.dur[rows])
    return Lever(
        f"dependency_as_calm:{name}",
        f"'{name}' as in calm stretches (its slow episodes gone)",
        SOFTWARE,
        f"each '{name}' call of a stretch whose mean time is over twice the quieter quarter's takes the "
        "time of a call in a calm stretch (drawn from the run): the dependency's slow episodes (background "
        "work, a noisy neighbour) gone",
        edit,
        pattern="slow_dependency",
        span_name=name,
        params={"disturbed_share": round(float((~calm).mean()), 4)},
    )
