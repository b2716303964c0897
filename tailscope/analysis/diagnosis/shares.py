"""Each finding's share of the run's tail excess, and the order findings are reported in.

A detector measures the share of the tail excess its mechanism carries (`stats.tail_excess_share`:
the slow requests' mean time in the mechanism minus the others', over the latency excess). Causes can
overlap (a GC pause also queues the requests behind it), so the shares of the named causes
(confidence >= 0.5) are scaled down together when they add up past 100 %: the `share` of every finding
is what the report attributes to it, and all shares together never pass 100 %. A cause judged part of
another (a cold cache inside a cold start) keeps its measured share for reading but is not counted
again. Findings below 0.5 are possibilities, not causes: they get no share.

Order: the named causes by share (then confidence), those part of another right after it, then the
possible causes by confidence, then the unexplained-tail accounting (its own shares fit in what the
named causes leave).
"""

from __future__ import annotations

from tailscope.analysis.diagnosis.model import NAMED, Finding

UNEXPLAINED = "unexplained_tail"


def measured_share(finding: Finding) -> float:
    """The detector's own share of the tail excess, within [0, 1] (0 when it measured none)."""
    value = finding.evidence.get("stats", {}).get("tail_excess_share")
    return min(1.0, max(0.0, float(value or 0.0)))


def part_of(finding: Finding) -> str | None:
    """The pattern of the finding this one is judged part of (see runner.arbitrate), if any."""
    return finding.evidence.get("stats", {}).get("part_of")


def apportion(findings: list[Finding]) -> float:
    """Set `share` on every finding and return the share the named causes account for (<= 1). The
    unexplained-tail findings' shares are their own (they were cut to fit what the causes leave)."""
    total = sum(measured_share(fd) for fd in findings if _named(fd))
    scale = 1.0 / total if total > 1.0 else 1.0
    for fd in findings:
        if _named(fd):
            fd.share = round(measured_share(fd) * scale, 4)
        elif fd.pattern == UNEXPLAINED:
            fd.share = round(measured_share(fd), 4)
        else:
            fd.share = None
    return min(1.0, total)


def rank(findings: list[Finding]) -> list[Finding]:
    """Named causes by share, each followed by the findings part of it; possible causes by confidence;
    the unexplained-tail accounting last (in its own order)."""
    named = sorted(
        (fd for fd in findings if _named(fd)),
        key=lambda fd: (-(fd.share or 0.0), -round(fd.confidence, 2)),
    )
    children = [fd for fd in findings if part_of(fd) and fd.confidence >= NAMED]
    ordered: list[Finding] = []
    placed: set[int] = set()
    for fd in named:  # a part after the first named cause of its parent's pattern, once
        ordered += [fd] + [c for c in children if part_of(c) == fd.pattern and id(c) not in placed]
        placed = {id(x) for x in ordered}
    ordered += [c for c in children if id(c) not in placed]
    placed = {id(fd) for fd in ordered}
    possible = sorted(
        (fd for fd in findings if id(fd) not in placed and fd.pattern != UNEXPLAINED),
        key=lambda fd: (-round(fd.confidence, 2), -measured_share(fd)),
    )
    return ordered + possible + [fd for fd in findings if fd.pattern == UNEXPLAINED]


def _named(finding: Finding) -> bool:
    return finding.confidence >= NAMED and finding.pattern != UNEXPLAINED and not part_of(finding)
