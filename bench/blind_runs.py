"""Issue 25's figures for bench/accuracy.py: the blind families, external families, and per-family tables
over every run, with a leave-one-family-out reliability table.

A run is scored against its truth: a list of planted causes, each with its pattern, the other pattern
names that are also right for its mechanism (`accept`), and mechanisms it brings along (`side`:
present in the run, so reporting them is no false alarm, but they never count as naming the cause).
The project's own families get that truth from accuracy_runs' CAUSE / SIDE; the blind families
(reference_pipeline/simulate/blind.py) from their modules; an external directory from its
truth.json (`/work/shared/families/scoring_api.py OUT` writes one: per scenario `file`, `pattern`,
`patterns` for two causes, optionally `accept` as a list or a {pattern: [names]} map, and `side`).

Per family: top finding right (a healthy run: nothing but compute_bound / unexplained_tail at >= 0.5),
two-cause runs with every cause named at >= 0.5, false alarms (a finding at >= 0.5 of a mechanism the
run does not have), findings at >= 0.8 that are right, and whether the top finding's evidence names
the service where the cause acts. Leave one family out: each family's findings are re-scored with a
calibration (isotonic, pool-adjacent-violators, from reported confidence to how often a finding was
right) fitted on the other families' findings only.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ALLOWED = {"compute_bound", "unexplained_tail"}  # never planted; counted apart
BANDS = ((0.0, 0.5), (0.5, 0.8), (0.8, 1.01))


@dataclass
class Scored:
    family: str
    scenario: str
    seed: int
    fmt: str
    findings: list
    causes: list[dict[str, Any]]
    seconds: float

    def as_row(self) -> tuple:
        """(scenario, family, format, seed, findings, ok, seconds): accuracy.py's line."""
        return (self.scenario, self.family, self.fmt, self.seed, self.findings, self.top_ok(), self.seconds)

    def names(self) -> set[str]:
        return {n for c in self.causes for n in (c["pattern"], *c.get("accept", ()))}

    def present(self) -> set[str]:
        return self.names() | {n for c in self.causes for n in c.get("side", ())}

    def top_ok(self) -> bool:
        if not self.causes:
            return not self.false_alarms()
        return bool(self.findings) and self.findings[0].pattern in self.names()

    def both_ok(self) -> bool:
        loud = {f.pattern for f in self.findings if f.confidence >= 0.5}
        return all(loud & {c["pattern"], *c.get("accept", ())} for c in self.causes)

    def false_alarms(self, confidence: Callable[[Any], float] | None = None) -> list:
        conf = confidence or (lambda f: f.confidence)
        return [f for f in self.findings
                if conf(f) >= 0.5 and f.pattern not in self.present() and f.pattern not in ALLOWED]

    def judged(self) -> list[tuple[Any, bool]]:
        """(finding, right) for every finding that is a claim about a cause (the unexplained_tail
        accounting, and compute_bound where nothing is planted, left out)."""
        out = []
        for f in self.findings:
            if f.pattern == "unexplained_tail" or (not self.causes and f.pattern == "compute_bound"):
                continue
            part_of = (f.evidence or {}).get("stats", {}).get("part_of")
            out.append((f, f.pattern in self.present() or part_of in self.present()))
        return out

    def names_service(self) -> bool | None:
        if not self.causes or not self.findings or self.findings[0].pattern not in self.names():
            return None
        top = self.findings[0]
        services = {c.get("service") for c in self.causes
                    if top.pattern in (c["pattern"], *c.get("accept", ()))}
        services.discard(None)
        if not services:  # the truth does not say where (an external family's truth.json may not)
            return None
        text = json.dumps(top.evidence, default=str)
        return any(s in text for s in services)


def from_row(row, causes: Callable[[str], list[dict[str, Any]]]) -> Scored:
    """An accuracy_runs row (scenario, topology or naming, format, seed, findings, ok, seconds, ...)."""
    family = "pipeline" if row[1] in ("reference", "alt") else row[1]
    return Scored(family, row[0], row[3], row[2], row[4], causes(row[0]), row[6])


def _diagnose_file(path: Path):
    from bench.run_cache import load_file
    from tailscope.analysis.diagnosis import diagnose
    from tailscope.store.duckdb.store import DuckDBStore as Store

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.duckdb"
        load_file(path, db)
        return diagnose(Store(db), "run")


def blind_rows(families: list[str], requests: int, seeds: int, line: Callable[[tuple], str],
               cache_dir: Path | None = None) -> list[Scored]:
    """Every scenario x seed of each blind family, through a file in the seed's format and the loader
    (the loaded stores kept in `cache_dir` when given: bench/run_cache.py)."""
    from bench.run_cache import loaded_run
    from reference_pipeline.simulate.blind import family
    from tailscope.analysis.diagnosis import diagnose
    from tailscope.store.duckdb.store import DuckDBStore as Store

    out = []
    for name in families:
        for scenario in family(name).SCENARIOS:
            for seed in range(seeds):
                started = time.perf_counter()
                with loaded_run(name, scenario, requests, seed, cache_dir) as (db, summary):
                    result = diagnose(Store(db), "run")
                scored = Scored(name, scenario, seed, summary["format"], result.findings, summary["truth"],
                                time.perf_counter() - started)
                out.append(scored)
                print(line(scored.as_row()), flush=True)
    return out


def external_truth(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Causes from one truth.json entry: `patterns` (two causes) or `pattern` (None: healthy)."""
    patterns = entry.get("patterns") or ([entry["pattern"]] if entry.get("pattern") else [])
    accept = entry.get("accept") or []
    side = entry.get("side") or []
    return [{"pattern": p, "stage": entry.get("stage"), "service": entry.get("service"),
             "accept": accept.get(p, []) if isinstance(accept, dict) else accept, "side": side}
            for p in patterns]


def external_rows(directory: Path, line: Callable[[tuple], str]) -> list[Scored]:
    """Each file of an external family directory (with its truth.json), loaded and diagnosed."""
    truth = json.loads((directory / "truth.json").read_text(encoding="utf-8"))
    out = []
    for scenario, entry in truth.items():
        started = time.perf_counter()
        result = _diagnose_file(directory / entry["file"])
        fmt = "jaeger" if "jaeger" in entry["file"] else "otlp"
        scored = Scored(directory.name, scenario, 0, fmt, result.findings, external_truth(entry),
                        time.perf_counter() - started)
        out.append(scored)
        print(line(scored.as_row()), flush=True)
    return out


def isotonic(pairs: list[tuple[float, bool]]) -> Callable[[float], float]:
    """A non-decreasing map from confidence to the fraction right (pool-adjacent-violators)."""
    if not pairs:
        return lambda c: c
    pairs = sorted(pairs)
    xs = np.array([c for c, _ in pairs])
    ties: dict[float, list[float]] = {}
    for c, ok in pairs:
        tie = ties.setdefault(c, [0.0, 0.0])
        tie[0] += ok
        tie[1] += 1
    blocks: list[list[float]] = []  # [sum right, count, max confidence]
    for c, (right, count) in sorted(ties.items()):
        blocks.append([right, count, c])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n, top = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
            blocks[-1][2] = top
    tops = np.array([b[2] for b in blocks])
    values = np.array([b[0] / b[1] for b in blocks])

    def fitted(c: float) -> float:
        if c < xs[0]:
            return float(values[0])
        return float(values[min(int(np.searchsorted(tops, c, side="left")), len(values) - 1)])

    return fitted


def lofo(runs: list[Scored]) -> dict[str, Callable[[float], float]]:
    """Per family, the calibration fitted on every other family's findings."""
    families = sorted({r.family for r in runs})
    return {fam: isotonic([(f.confidence, ok) for r in runs if r.family != fam for f, ok in r.judged()])
            for fam in families}


def _pct(hits: int, n: int) -> str:
    return f"{hits}/{n} ({hits / n:.0%})" if n else "-"


def family_tables(runs: list[Scored]) -> str:
    """The per-family figures and the leave-one-family-out reliability table, as markdown."""
    families = sorted({r.family for r in runs})
    lines = ["| family | runs | top finding right | healthy runs quiet | two-cause: every cause >= 0.5 | "
             "false alarms >= 0.5 (runs) | findings >= 0.8 right | top names the service |",
             "|---|---|---|---|---|---|---|---|"]
    rows_all = []
    for fam in [*families, "total"]:
        mine = runs if fam == "total" else [r for r in runs if r.family == fam]
        healthy = [r for r in mine if not r.causes]
        two = [r for r in mine if len(r.causes) > 1]
        alarms = [f for r in mine for f in r.false_alarms()]
        high = [(f, ok) for r in mine for f, ok in r.judged() if f.confidence >= 0.8]
        named = [r.names_service() for r in mine if r.names_service() is not None]
        label = fam if fam != "total" else "**total**"
        rows_all.append(
            f"| {label} | {len(mine)} | {_pct(sum(r.top_ok() for r in mine), len(mine))} "
            f"| {_pct(sum(r.top_ok() for r in healthy), len(healthy))} "
            f"| {_pct(sum(r.both_ok() for r in two), len(two))} "
            f"| {len(alarms)} ({sum(bool(r.false_alarms()) for r in mine)}) "
            f"| {_pct(sum(ok for _, ok in high), len(high))} | {_pct(sum(named), len(named))} |")
    lines += rows_all
    calibrations = lofo(runs)
    lines += ["", "Leave one family out: each family's findings by reported (raw) confidence, and by the "
              "confidence a calibration fitted on the other families only gives them (LOFO). Cells: right/"
              "findings in the band; false alarms at >= 0.5 under each.", "",
              "| family | " + " | ".join(f"raw {lo:.1f}-{min(hi, 1):.1f}" for lo, hi in BANDS) + " | "
              + " | ".join(f"LOFO {lo:.1f}-{min(hi, 1):.1f}" for lo, hi in BANDS)
              + " | false alarms raw / LOFO |", "|---" * (2 * len(BANDS) + 2) + "|"]
    totals = np.zeros((2, len(BANDS), 2), dtype=int)
    alarms_total = [0, 0]
    for fam in families:
        mine = [r for r in runs if r.family == fam]
        cal = calibrations[fam]
        cells = []
        for which, conf in enumerate((lambda f: f.confidence, lambda f, cal=cal: cal(f.confidence))):
            for b, (lo, hi) in enumerate(BANDS):
                band = [ok for r in mine for f, ok in r.judged() if lo <= conf(f) < hi]
                totals[which, b] += (sum(band), len(band))
                cells.append(f"{sum(band)}/{len(band)}")
        raw_alarms = sum(len(r.false_alarms()) for r in mine)
        cal_alarms = sum(len(r.false_alarms(lambda f, cal=cal: cal(f.confidence))) for r in mine)
        alarms_total[0] += raw_alarms
        alarms_total[1] += cal_alarms
        lines.append(f"| {fam} | " + " | ".join(cells) + f" | {raw_alarms} / {cal_alarms} |")
    lines.append("| **total** | " + " | ".join(f"{h}/{n}" for which in range(2) for h, n in totals[which])
                 + f" | {alarms_total[0]} / {alarms_total[1]} |")
    return "\n".join(lines)


def misses(runs: list[Scored]) -> str:
    """One line per run whose top finding is wrong or that raised a false alarm."""
    out = []
    for r in runs:
        alarms = r.false_alarms()
        if r.top_ok() and not alarms:
            continue
        planted = "+".join(c["pattern"] for c in r.causes) or "(healthy)"
        tops = ", ".join(f"{f.pattern} {f.confidence:.2f}" for f in r.findings[:3]) or "(none)"
        out.append(f"- {r.family} {r.scenario} s{r.seed} ({r.fmt}): planted {planted}; found {tops}"
                   + (f"; false alarms: {', '.join(f'{f.pattern} {f.confidence:.2f}' for f in alarms)}"
                      if alarms else ""))
    return "\n".join(out) or "- none"
