"""One report from the diagnoses of a run's kinds of units of work (units.py: the requests, each
queue consumer's work).

Each kind was diagnosed as its own population: its findings' shares are of its own tail excess. A
finding names where it acts (`stats.unit`, `stats.entry_point`, with the service and instances
where.py gave it) and how many ms of its population's tail excess it carries (`stats.tail_excess_ms`:
share x that population's mean tail excess). The report ranks the named causes of all populations by
those ms (a cause that adds 300 ms to the work's end-to-end latency before one that adds 2 ms to the
API's answer), each followed by the findings judged part of it; then the possible causes by
confidence; the unexplained-tail accounting last. A population of fewer than MIN_UNITS units
(too few to diagnose) gives no findings when another has enough.
"""

from __future__ import annotations

from typing import Any

from tailscope.analysis.diagnosis.model import NAMED, Finding
from tailscope.analysis.diagnosis.shares import UNEXPLAINED, part_of

MIN_UNITS = 50
UNIT_WORDS = {"request": "requests",
              "stream": "streams, from the end of their input to the final result (not the stream's length),"}


def tag(population: Any, diagnosis: Any) -> list[Finding]:
    """The population's findings, each naming its kind of unit and entry point, its tail excess in ms."""
    excess = float(diagnosis.tail.get("excess_ms", 0.0)) if diagnosis.tail else 0.0
    for fd in diagnosis.findings:
        stats = fd.evidence.setdefault("stats", {})
        stats["unit"] = population.unit
        stats["entry_point"] = population.entry
        stats["tail_excess_ms"] = round((fd.share or 0.0) * excess, 3)
        what = UNIT_WORDS.get(population.unit, "consumer work")
        fd.evidence["summary"] = f"In the {what} of {population.entry}: " + fd.evidence.get("summary", "")
    return diagnosis.findings


def order(groups: list[list[Finding]]) -> list[Finding]:
    """Named causes of every population by their ms of tail excess, each followed by the findings
    judged part of it (same population); possible causes by confidence; unexplained tail last."""

    def named(fd: Finding) -> bool:
        return fd.confidence >= NAMED and fd.pattern != UNEXPLAINED and not part_of(fd)

    ranked: list[tuple[float, float, int, Finding]] = []
    children: list[tuple[int, Finding]] = []
    possible: list[Finding] = []
    rest: list[Finding] = []
    for g, findings in enumerate(groups):
        for fd in findings:
            if fd.pattern == UNEXPLAINED:
                rest.append(fd)
            elif named(fd):
                ranked.append((-fd.evidence["stats"]["tail_excess_ms"], -round(fd.confidence, 2), g, fd))
            elif part_of(fd) and fd.confidence >= NAMED:
                children.append((g, fd))
            else:
                possible.append(fd)
    out: list[Finding] = []
    for *_, g, fd in sorted(ranked, key=lambda r: r[:3]):
        out += [fd] + [c for cg, c in children if cg == g and part_of(c) == fd.pattern]
    placed = {id(fd) for fd in out}
    out += [c for _, c in children if id(c) not in placed]
    out += sorted(possible, key=lambda fd: -round(fd.confidence, 2))
    out += sorted(rest, key=lambda fd: -fd.evidence["stats"]["tail_excess_ms"])
    return out


def merge(parts: list[tuple[Any, Any]]) -> tuple[list[Finding], list[dict[str, Any]], int]:
    """(findings in report order, one summary per population, the index of the population the report's
    tail figures are of: the top finding's, else the one with the largest tail excess)."""
    enough = any(d.requests >= MIN_UNITS for _, d in parts)
    groups = [tag(p, d) if d.requests >= MIN_UNITS or not enough else [] for p, d in parts]
    findings = order(groups)
    summaries = [
        {"unit": p.unit, "entry_point": p.entry, "units": d.requests, "spans": d.spans, "tail": d.tail,
         **({"reason": d.reason} if d.reason else {}), **({"errors": d.errors} if d.errors else {})}
        for p, d in parts
    ]
    primary = max(range(len(parts)), key=lambda i: parts[i][1].tail.get("excess_ms", 0.0))
    if findings:
        top = findings[0]
        primary = next(i for i, g in enumerate(groups) if any(fd is top for fd in g))
    return findings, summaries, primary
