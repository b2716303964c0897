"""What-if accuracy, shared by bench_whatif.py's modes: load a run, measure its percentiles, predict
"fix the cause" on the faulty run and score the prediction against the run without the cause."""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.whatif import evaluate, measured_speedup
from tailscope.analysis.whatif.engine import CLIENT_SIDE, MIN_CONFIDENCE
from tailscope.analysis.whatif.retime import unit_latency

# the readers of the runs loaded so far: kept open while their frames are used, since the diagnosis
# and the payload lever read span attributes from the store (closed per family: OPEN.close())
OPEN = contextlib.ExitStack()


def frame_of(path: Path, run: str = "run", whole: bool = False, reuse: bool = False):
    """The run's frame (`whole`: every span, never the loader's sample of a large run; `reuse`: the
    store loaded from `path` before, where one is marked complete, is read again)."""
    from ingest.loader import load_paths
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading
    from tailscope.store.engine import open_store

    db = path.with_suffix(".duckdb")
    done = path.with_suffix(".loaded")
    if not (reuse and done.exists() and db.exists()):
        db.unlink(missing_ok=True)
        loaded = load_paths([path], db, run)
        if loaded.failed:
            raise SystemExit(f"bench_whatif: {path}: {loaded.failed[0].error}")
        done.touch()
    conn = OPEN.enter_context(reading(open_store(str(db))))
    return load_frame(conn, run, max_spans=None) if whole else load_frame(conn, run)


def source_key() -> str:
    """A digest of the code that writes and loads a run (the simulator, the loader, the store): a
    cached run is reused only while that code is the same."""
    import hashlib

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for folder in ("reference_pipeline/simulate", "ingest", "tailscope/store"):
        for file in sorted((root / folder).rglob("*")):
            if file.suffix in (".py", ".sql") and file.is_file():
                digest.update(str(file.relative_to(root)).encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def simulated(tmp: Path, label: str, scenario: str, seed: int, requests: int, whole: bool = False,
              **options):
    from reference_pipeline.simulate.api import simulate_to_file

    out = tmp / f"{label}.jsonl"
    simulate_to_file(out, scenario, requests, seed, **options)
    return frame_of(out, whole=whole)


@dataclass(frozen=True)
class Units:
    """The units a pair compares: `frame` holds them as requests; `unit` "request" or "consumer",
    `entry` the service and name of their most common root (units.Population), `client` whether their
    latency is client-observed (engine.CLIENT_SIDE: where at least half the requests have a client
    span), `paired` False where the other run of the pair has no population of that kind and entry."""

    frame: Any
    unit: str
    entry: str
    client: bool
    paired: bool = True


def _kinds(frame) -> list:
    """The run's populations of units (diagnosis/units.py), or its requests as the one population."""
    from tailscope.analysis.diagnosis.units import Population, _entry, populations

    kinds = populations(frame) if frame.requests is not None else None
    return kinds or [Population("request", _entry(frame), frame)]


def unit_frame(frame):
    """The units whose latency a run's what-if is scored on: in a run with asynchronous consumer work
    (units of work, diagnosis/units.py), the busiest consumer's units, from the publish to the end of
    the processing (an API that answers at the publish ack shows none of a consumer's causes); else the
    run's requests."""
    return units_of(frame).frame


def units_of(frame, like: Units | None = None, spans: tuple[str, ...] = ()) -> Units:
    """The population a pair measures. The faulty run (`like` None): its busiest consumer's units, else
    its requests. The run without the cause (`like` the faulty run's): the population of the same kind
    and entry point, its latency taken on the same side (client-observed or server), so that both runs
    of a pair measure the same units: a cause can make a consumer's work outlast its request (a
    population of its own in one run only), or change which consumer is busiest. `spans`: the planted
    causes' span names; where the busiest consumer's units hold none of them and another population's
    do (a request that waits for a consumer working in traces of its own, linked: the cause acts on
    the request), that population is measured: a cause is scored where it acts."""
    kinds = _kinds(frame)
    if like is None:
        consumers = [p for p in kinds if p.unit == "consumer" and p.frame.requests is not None]
        pick = max(consumers, key=lambda p: len(p.frame.requests)) if consumers else kinds[0]
        acting = [p for p in kinds if p.frame.requests is not None and _holds(p.frame, spans)]
        if consumers and spans and not _holds(pick.frame, spans) and acting:
            pick = acting[0]
        if not consumers:  # no consumer: the run's requests as they are (every root, as the what-if),
            # less a traced callee's work for a caller the trace does not show
            from tailscope.analysis.diagnosis.units import _entry

            entry = entry_requests(frame)
            pick = type(pick)(pick.unit, pick.entry if entry is None else _entry(entry),
                              frame if entry is None else entry)
        client = bool((pick.frame.requests.client_span >= 0).mean() >= CLIENT_SIDE)
        return Units(pick.frame, pick.unit, pick.entry, client)
    same = [p for p in kinds if (p.unit, _bare(p.entry)) == (like.unit, _bare(like.entry))]
    same = same or [p for p in kinds if _bare(p.entry) == _bare(like.entry)]
    if same:
        pick = same[0]
        whole = len(kinds) == 1 and pick.unit == "request"
        return Units(frame if whole else pick.frame, like.unit, like.entry, like.client)
    fallback = units_of(frame)  # no such population: as the run would be scored alone, flagged
    return Units(fallback.frame, fallback.unit, fallback.entry, like.client, paired=False)


def entry_requests(frame):
    """The run's requests at its entry points, as a frame of their own, where some of its roots are
    a callee's work for a caller the trace does not show (an untraced batch job filling a model
    server: its calls are roots of the callee's SERVER span, a span that other traces show called by
    a traced CLIENT span): those are work added to the system, not its requests; None where no root is
    such a callee's, or every root is (the callee is what the run serves)."""
    from tailscope.analysis.diagnosis.frame import KIND_CLIENT
    from tailscope.analysis.diagnosis.units import _subframe

    f, reqs = frame, frame.requests
    if getattr(reqs, "root", None) is None or len(reqs.root) == 0:  # (a test's stand-in: no roots)
        return None
    child = np.nonzero(f.parent >= 0)[0]
    called = child[f.kind[f.parent[child]] == KIND_CLIENT]
    key = f.service.astype(np.int64) * (len(f.names) + 1) + f.name
    callee = np.isin(key[reqs.root], np.unique(key[called]))
    callee &= f.parent[reqs.root] < 0  # a root its own trace shows called (a browser's fetch) has its caller
    if not callee.any() or callee.all():
        return None
    spans = np.nonzero(np.isin(f.request, np.nonzero(~callee)[0]))[0]
    built = _subframe(f, spans, np.zeros(0, np.int64), np.zeros(0, np.int64), roots_given=False)
    return built if built.requests is not None and len(built.requests) else None


def _holds(frame, spans: tuple[str, ...]) -> bool:
    """Whether the frame's units have a span of one of these names."""
    codes = [frame.names.index(n) for n in spans if n in frame.names]
    return bool(codes) and bool(np.isin(frame.name, codes).any())


def _bare(entry: str) -> str:
    """An entry point without the wait's suffix: a consumer's population is named by its unit root,
    the wait span above the CONSUMER span or the CONSUMER span itself, whichever its first unit has."""
    from tailscope.analysis.diagnosis.units import WAIT_SUFFIX

    return entry.removesuffix(WAIT_SUFFIX)


def shared(units: Units, other: Units) -> np.ndarray | None:
    """The units of `units` whose entry (root service and name) the other run's units have too, where
    some have an entry the other run has none of (a partner's requests a fix removes with its cause:
    the pair compares the units both runs serve); None where all are shared, or none is."""
    f, g = units.frame, other.frame
    if getattr(f.requests, "root", None) is None or getattr(g.requests, "root", None) is None or getattr(
            f.requests, "message_span", None) is not None:  # (a test's stand-in: no roots)
        return None
    def entries(h) -> list[tuple[str, str]]:
        roots = h.requests.root
        pairs = zip(h.service[roots], h.name[roots], strict=True)
        return [(h.services[int(a)], h.names[int(b)]) for a, b in pairs]

    theirs = set(entries(g))
    mine = np.array([e in theirs for e in entries(f)], bool)
    return None if mine.all() or not mine.any() else mine


def measured(frame, units: Units | None = None, scored: np.ndarray | None = None) -> tuple[float, float]:
    """(p50, p99) in ms of the run's units (`units`: those of this run to measure; else units_of;
    `scored`: only these of them)."""
    units = units or units_of(frame)
    lat = unit_latency(units.frame, None, None, units.client)  # a batch consumer's: per message
    lat = lat if scored is None else lat[scored]
    p50, p99 = np.percentile(lat, [50, 99]) / 1e6
    return float(p50), float(p99)


def predicted(
    frame, lever: str | tuple[str, ...], other=None, truth: list[dict] | None = None, units=None,
    at: tuple[str, ...] = (),
    scored: np.ndarray | None = None,
) -> tuple[float, float, str, float]:
    """(p50, p99, the fix evaluated or 'no lever', seconds) for the faulty run. `truth`: planted causes
    the diagnosis did not name are added as findings (pattern, span, service, instances: no more than
    the truth says), to measure the lever where it is applied. `lever` a tuple: the fixes at once
    (a run with two causes). `at`: the planted causes' spans (a prefix 'p@' answers only there)."""
    diagnosis = diagnose_frame(frame)
    if diagnosis.errors:
        print(f"  (diagnosis errors: {diagnosis.errors})", flush=True)
    findings = [fd.to_dict(with_chart=True) for fd in diagnosis.findings]
    # a cause named below the what-if's floor gets no lever (engine.MIN_CONFIDENCE): missed, as unnamed;
    # so is one named without the span its lever acts on (LOCATED) where the truth names one
    named = {fd["pattern"] for fd in findings if (fd.get("confidence") or 0) >= MIN_CONFIDENCE
             and (fd.get("span_name") or fd["pattern"] not in LOCATED)}
    # ... and one named only at other spans than the truth's is given at the truth's too (a cache's miss
    # path named at the step that holds it, the cause's own call beside it)
    named_at = {(fd["pattern"], fd.get("span_name")) for fd in findings
                if (fd.get("confidence") or 0) >= MIN_CONFIDENCE}
    for cause in truth or []:
        elsewhere = (cause["pattern"] in LOCATED and cause.get("span")
                     and (cause["pattern"], cause["span"]) not in named_at)
        if cause["pattern"] not in named or elsewhere:
            stats = {"service": cause.get("service"), "instances": cause.get("instances") or []}
            if cause["pattern"] == "large_payload":
                stats.update(_size_attribute(frame, cause.get("span")))
            findings.append({"pattern": cause["pattern"], "confidence": 1.0, "span_name": cause.get("span"),
                             "evidence": {"stats": stats}})
    speedup = measured_speedup(frame, other) if other is not None else None
    # the findings name spans and instances, the same in the units' frame (`units`: those to measure)
    units = unit_frame(frame) if units is None else units
    started = time.perf_counter()
    both = isinstance(lever, tuple)
    combine = [lever] if both else None
    result = evaluate(units, findings, speedup=speedup, speedup_from="other", combine=combine, scored=scored)
    seconds = time.perf_counter() - started
    if both:  # all the fixes at once where the run has a lever for each, else those it has
        hits = [o for o in result.outcomes if _composed_of(o.key, lever, at)]
        full = [o for o in hits if len(o.key.split("+")) == len(lever)]
        hits = full or [o for o in hits if len(o.key.split("+")) == max(len(h.key.split("+")) for h in hits)]
    else:
        hits = [o for o in result.outcomes if _starts(o.key, lever, at)]
    if not hits:
        return result.measured.p50_ms, result.measured.p99_ms, "no lever", seconds
    best = min(hits, key=lambda o: o.p99_ms)
    return best.p50_ms, best.p99_ms, best.key, seconds


# the patterns whose lever acts on the finding's span (engine.plan): a finding of one without a span
# gets no lever: the cause counts as missed, and the truth's finding is added beside it
LOCATED = frozenset({"lock_contention", "cache_miss", "slow_dependency", "queueing", "large_payload",
                     "timeout_retry", "network"})


def _composed_of(key: str, prefixes: tuple[str, ...], at: tuple[str, ...] = ()) -> bool:
    """The fix for all the prefixes (composed), or for those of them the run has levers for."""
    parts, rest = key.split("+"), list(prefixes)
    for part in parts:
        while rest and not _starts(part, rest[0], at):
            rest.pop(0)
        if not rest:
            return False
        rest.pop(0)
    return True


def _starts(key: str, prefix: str, at: tuple[str, ...] = ()) -> bool:
    """Whether a lever's key answers a pattern's prefix ('a|b': either; 'a@': a only where the lever
    acts on one of the planted causes' spans `at`, the part of its key after ':')."""
    for alt in prefix.split("|"):
        if alt.endswith("@"):
            if key.startswith(alt[:-1]) and key.partition(":")[2] in at:
                return True
        elif key.startswith(alt):
            return True
    return False


def _size_attribute(frame, name: str | None) -> dict:
    """For a payload cause the diagnosis missed: the numeric attribute of the truth's span that
    follows its duration best (Spearman), a byte size first (the truth says a payload), as the finding
    would name it (empty where none)."""
    from tailscope.analysis.diagnosis.attributes import numeric_attributes
    from tailscope.analysis.diagnosis.stats import spearman

    if name not in frame.names:
        return {}
    code = frame.names.index(name)
    best = None
    for key, (idx, values) in numeric_attributes(frame, code, 50).items():
        rho = spearman(values, frame.dur[idx].astype(np.float64))
        rank = (any(w in key.lower() for w in ("size", "bytes", "length")), rho)
        if np.isfinite(rho) and rho > 0 and (best is None or rank > best[0]):
            best = (rank, key)
    return {"size_attribute": best[1], "size_on": "span"} if best else {}


def pair_row(
    family: str, cause: str, faulty, fixed, lever: str | tuple[str, ...], planted: list[dict] | None = None,
    spans: tuple[str, ...] = (),
) -> dict:
    """`planted`: the causes given as findings where the diagnosis missed them; `spans`: the planted
    causes' span names, to measure the population they act on (units_of)."""
    units = units_of(faulty, spans=spans)  # what the what-if evaluates, read in the run without the cause
    other = units_of(fixed, like=units)
    scored = shared(units, other) if other.paired else None
    before = measured(faulty, units, scored)
    truth = measured(fixed, other)
    guess = predicted(faulty, lever, other=fixed if lever == "forward_as" else None, truth=planted,
                      units=units.frame, at=spans, scored=scored)
    return {
        "family": family,
        "cause": cause,
        "lever": guess[2],
        "faulty_p50": before[0],
        "faulty_p99": before[1],
        "pred_p50": guess[0],
        "meas_p50": truth[0],
        "pred_p99": guess[1],
        "meas_p99": truth[1],
        "error": abs(guess[1] - truth[1]) / truth[1],
        "p50_error": abs(guess[0] - truth[0]) / truth[0],
        "material": before[1] > 1.1 * truth[1] or before[1] < 0.9 * truth[1],
        "seconds": guess[3],
        "population": f"{units.unit} {units.entry}",
        "paired": other.paired,
    }


def line(r: dict) -> str:
    flag = "" if r["material"] else "  (cause not material)"
    flag += "" if r.get("paired", True) else f"  (no {r['population']} in the run without it)"
    return (
        f"{r['family']:18s} {r['cause']:20s} {r['lever']:34s} faulty p99 {r['faulty_p99']:8.1f}  "
        f"p50 {r['pred_p50']:7.1f}/{r['meas_p50']:7.1f}  p99 {r['pred_p99']:8.1f}/{r['meas_p99']:8.1f}  "
        f"error {r['error']:6.1%}{flag}"
    )


def table(rows: list[dict]) -> str:
    out = [
        "| family | cause removed | lever | faulty p50 / p99 | predicted p50 / measured "
        "| predicted p99 / measured | p99 error |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        mark = "" if r["material"] else " (not material)"
        mark += "" if r.get("paired", True) else f" (no {r['population']} without it)"
        out.append(
            f"| {r['family']} | {r['cause']}{mark} | `{r['lever']}` | "
            f"{r['faulty_p50']:.1f} / {r['faulty_p99']:.1f} | "
            f"{r['pred_p50']:.1f} / {r['meas_p50']:.1f} | {r['pred_p99']:.1f} / {r['meas_p99']:.1f} | "
            f"{r['error']:.1%} |"
        )
    errors = [r["error"] for r in rows]
    material = [r["error"] for r in rows if r["material"]]
    out.append("")
    out.append(
        f"{len(rows)} pairs: median p99 error {statistics.median(errors):.1%}, largest {max(errors):.1%}, "
        f"over 25 %: {sum(e > 0.25 for e in errors)}; material causes only ({len(material)}): median "
        f"{statistics.median(material) if material else 0:.1%}, largest {max(material, default=0):.1%}."
    )
    return "\n".join(out)


