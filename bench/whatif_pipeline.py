"""The reference pipeline's what-if pairs on the CPU (bench_whatif.py pipeline): each run once per
repeat, the repeats in alternating order (A B ... then ... B A), every run's processes at a higher
priority than the rest of the machine (`chrt -r 10`, else `nice -n -10`, where allowed), the load
average before and after each run. Per pair: predicted (the fix on the faulty run) against measured
(the run without the cause) p50/p99, per repeat and pooled over the repeats, with the number of
requests each p99 rests on and its bootstrap spread, and stage by stage (span name: predicted against
measured p50/p99), so a mis-predicted stage shows which part of a request the lever gets wrong.

Each pair removes one mechanism and keeps everything else:
- cold vs warm cache: cold-cache (empty cache of 100 entries, remote store) against steady (the cache
  filled with every entity: no miss, so the remote round trip never happens);
- GC pauses vs collector off: gc-pressure against gc-pressure `--gc off` (the same live heap and
  allocation work, the cyclic collector disabled once ready: no collection at all);
- 1 vs 2 model workers; fp32 vs int8 (the forward's speed-up measured from the int8 run);
- the hardware lever: forward × 0.5 on the 6-layer encoder against a 3-layer one (and the speed-up
  measured from it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.whatif_common import OPEN, frame_of, table
from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.whatif import evaluate, measured_speedup
from tailscope.analysis.whatif.engine import lever_timings
from tailscope.analysis.whatif.retime import request_latency

ROOT = Path(__file__).resolve().parents[1]
# label -> (scenario, extra arguments of `tailscope pipeline run`)
RUNS = {
    "steady": ("steady", []),
    "cold-cache": ("cold-cache", []),
    "gc-pressure": ("gc-pressure", []),
    "gc-pressure, collector off": ("gc-pressure", ["--gc", "off"]),
    "2 model workers": ("steady", ["--workers", "2"]),
    "int8": ("steady", ["--dtype", "int8"]),
    "bf16": ("steady", ["--dtype", "bf16"]),
    "3 layers": ("steady", ["--layers", "3"]),
    # the replica pair where one worker queues: a rate near its capacity (the later --rps wins)
    "1 worker, 50 req/s": ("steady", ["--rps", "50"]),
    "2 workers, 50 req/s": ("steady", ["--workers", "2", "--rps", "50"]),
}
# label, run with the cause, run without it, lever (a key prefix; `forward_as`: the speed-up measured
# from the run without it)
PAIRS = (
    ("cold vs warm cache", "cold-cache", "steady", "cache_hits"),
    ("GC pauses vs collector off", "gc-pressure", "gc-pressure, collector off", "no_gc_stalls"),
    ("1 vs 2 model workers", "steady", "2 model workers", "replicas+1"),
    ("fp32 vs int8", "steady", "int8", "forward_as"),
    ("fp32 vs bf16", "steady", "bf16", "forward_as"),
    ("6 vs 3 layers, forward x 0.5", "steady", "3 layers", "forward_x0.5"),
    ("6 vs 3 layers, speed-up measured", "steady", "3 layers", "forward_as"),
    ("1 vs 2 model workers at 50 req/s", "1 worker, 50 req/s", "2 workers, 50 req/s", "replicas+1"),
)
OPT_IN = {"1 vs 2 model workers at 50 req/s"}  # run only when named (--pairs): its own duration
# int8 is CPU-only dynamic quantization (refused on CUDA); bf16 is emulated on a CPU, a GPU option
DEVICE_ONLY = {"fp32 vs int8": "cpu", "fp32 vs bf16": "cuda"}
NICE = -10
RT_PRIORITY = 10
BOOTSTRAP = 1000


@dataclass
class Run:
    label: str
    frames: list = field(default_factory=list)
    load: list[tuple[float, float]] = field(default_factory=list)  # 1-min load average before, after


def run_once(out: Path, scenario: str, extra: list[str], duration: float, rps: float, device: str) -> None:
    cmd = [sys.executable, "-c", "from tailscope.cli.main import entrypoint; entrypoint()", "pipeline", "run",
           "--scenario", scenario, "--device", device, "--duration", str(duration), "--rps", str(rps),
           "--out", str(out), *extra]
    if os.geteuid() == 0:  # above the other work on a shared machine (children inherit it): round-robin
        # real-time priority where the kernel allows it (the service idles between requests, and the
        # kernel keeps 5 % of each second for the rest), else a lower nice value
        rt = subprocess.run(["chrt", "-r", str(RT_PRIORITY), "true"], capture_output=True).returncode == 0
        cmd = ["chrt", "-r", str(RT_PRIORITY), *cmd] if rt else ["nice", "-n", str(NICE), *cmd]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def run_all(
    tmp: Path, labels: list[str], duration: float, rps: float, repeats: int, device: str = "cpu"
) -> dict[str, Run]:
    """Every run `repeats` times, alternating the order. A run whose trace file is already in `tmp`
    (with its load record) is read, not run again: a kept directory can be scored again."""
    runs = {label: Run(label) for label in labels}
    for r in range(repeats):
        for label in labels if r % 2 == 0 else labels[::-1]:
            scenario, extra = RUNS[label]
            out = tmp / f"{label.replace(' ', '_').replace(',', '')}-{r}.jsonl"
            record = out.with_suffix(".load.json")
            if not record.exists():
                before = os.getloadavg()[0]
                started = time.perf_counter()
                run_once(out, scenario, extra, duration, rps, device)
                after = os.getloadavg()[0]
                record.write_text(json.dumps({"load": [before, after], "at": time.strftime("%H:%M:%S"),
                                              "seconds": time.perf_counter() - started}))
            facts = json.loads(record.read_text())
            out.with_suffix(".duckdb").unlink(missing_ok=True)  # a kept run is loaded afresh
            runs[label].frames.append(frame_of(out, f"r{r}"))
            runs[label].load.append(tuple(facts["load"]))
            print(f"  {label} #{r + 1}: {facts['at']} UTC, {facts['seconds']:.0f} s, load "
                  f"{facts['load'][0]:.1f} -> {facts['load'][1]:.1f}", flush=True)
    return runs


def latency_ms(frame) -> np.ndarray:
    client = bool((frame.requests.client_span >= 0).mean() >= 0.5)
    return request_latency(frame, frame.dur, client) / 1e6


def p99_spread(lat: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """The p99's bootstrap 5th and 95th percentiles (requests resampled)."""
    rng = np.random.default_rng(seed)
    draws = np.percentile(lat[rng.integers(0, len(lat), (BOOTSTRAP, len(lat)))], 99, axis=1)
    return float(np.percentile(draws, 5)), float(np.percentile(draws, 95))


def prediction(faulty, fixed, lever: str):
    """(lever key, each request's predicted latency ms, each span's predicted duration ns) or None."""
    findings = [fd.to_dict(with_chart=True) for fd in diagnose_frame(faulty).findings]
    speedup = measured_speedup(faulty, fixed) if lever == "forward_as" else None
    result = evaluate(faulty, findings, speedup=speedup, speedup_from="other", only={lever})
    if not result.outcomes:
        return None
    key = min(result.outcomes, key=lambda o: o.p99_ms).key
    lat, dur = lever_timings(faulty, findings, key, speedup=speedup, speedup_from="other")
    return key, lat / 1e6, dur, speedup


def _durations(frames: list, durs: list, name: str) -> np.ndarray:
    """The durations (ms) of every span called `name` in these runs."""
    parts = [d[f.name == f.names.index(name)] for f, d in zip(frames, durs, strict=True) if name in f.names]
    return np.concatenate(parts) / 1e6 if parts else np.zeros(0)


def _cell(v: np.ndarray) -> str:
    return f"{np.percentile(v, 50):.1f} / {np.percentile(v, 99):.1f}" if len(v) else "-"


def stage_rows(faulty: list, fixed: list, predicted_dur: list, min_share: float = 0.3) -> list[str]:
    """Per span name (those on at least `min_share` of either run's requests): spans per request and
    p50/p99 (ms), predicted on the faulty run against measured on the run without the cause."""
    out = []
    req_a = sum(len(f.requests) for f in faulty)
    req_b = sum(len(f.requests) for f in fixed)
    for name in sorted({n for f in faulty + fixed for n in f.names}):
        pred = _durations(faulty, predicted_dur, name)
        meas = _durations(fixed, [f.dur for f in fixed], name)
        if max(len(pred) / req_a, len(meas) / req_b) < min_share:
            continue
        out.append(f"| {name} | {len(pred) / req_a:.2f} / {len(meas) / req_b:.2f} | {_cell(pred)} | "
                   f"{_cell(meas)} |")
    return out


def gc_evidence(frame) -> str:
    pauses = np.asarray(frame.gc_dur) / 1e6
    if len(pauses) == 0:
        return "no collection reported"
    return f"{len(pauses)} collections reported, {pauses.sum():.0f} ms in all, longest {pauses.max():.1f} ms"


def pipeline_report(
    duration: float, rps: float, repeats: int, only: list[str] | None = None, keep: Path | None = None,
    device: str = "cpu",
) -> None:
    """`keep`: the runs' trace files go (or are already) there, instead of a temporary directory.
    `device`: cpu or cuda[:N], every run on it (the int8 pair on a CPU only, the bf16 pair on CUDA only)."""
    kind = device.split(":")[0]
    pairs = [p for p in PAIRS if (only is None and p[0] not in OPT_IN) or (only and p[0] in only)]
    pairs = [p for p in pairs if DEVICE_ONLY.get(p[0], kind) == kind]
    labels = list(dict.fromkeys(run for p in pairs for run in p[1:3]))
    print(f"runs on {device}: {', '.join(labels)}; {repeats} repeats, {duration:.0f} s at {rps:g} req/s each",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
        runs = run_all(keep or Path(tmp), labels, duration, rps, repeats, device)
        print("\n| run | repeat | requests | p50 ms | p99 ms (bootstrap 5-95 %) | load before / after | GC |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for label, run in runs.items():
            for r, (frame, load) in enumerate(zip(run.frames, run.load, strict=True)):
                lat = latency_ms(frame)
                lo, hi = p99_spread(lat)
                print(f"| {label} | {r + 1} | {len(lat)} | {np.percentile(lat, 50):.1f} | "
                      f"{np.percentile(lat, 99):.1f} ({lo:.1f}-{hi:.1f}) | {load[0]:.1f} / {load[1]:.1f} | "
                      f"{gc_evidence(frame)} |")
        rows, pooled = [], []
        for label, a, b, lever in pairs:
            preds = [prediction(fa, fb, lever) for fa, fb in zip(runs[a].frames, runs[b].frames, strict=True)]
            if any(p is None for p in preds):
                print(f"\n{label}: no `{lever}` lever on the faulty run")
                continue
            per = []
            for r, (fa, fb, p) in enumerate(zip(runs[a].frames, runs[b].frames, preds, strict=True)):
                per.append(_row(f"{label} #{r + 1}", p[0], latency_ms(fa), p[1], latency_ms(fb)))
            rows += per
            pooled.append(_row(label, preds[0][0], np.concatenate([latency_ms(f) for f in runs[a].frames]),
                               np.concatenate([p[1] for p in preds]),
                               np.concatenate([latency_ms(f) for f in runs[b].frames])))
            ks = ", ".join(f"{p[3]:.2f}" for p in preds if p[3] is not None)
            lo, hi = pooled[-1]["spread"]
            print(f"\n{label} (`{pooled[-1]['lever']}`{', speed-up ' + ks if ks else ''}): measured p99 on "
                  f"{pooled[-1]['tail']} requests, bootstrap 5-95 % {lo:.1f}-{hi:.1f} ms")
            print("| span | per request (pred / meas) | predicted p50 / p99 ms | measured p50 / p99 ms |")
            print("|---|---:|---:|---:|")
            print("\n".join(stage_rows(runs[a].frames, runs[b].frames, [p[2] for p in preds])))
        OPEN.close()
    print("\nper repeat:")
    print(table(rows))
    print("\npooled over the repeats:")
    print(table(pooled))


def _row(label: str, key: str, faulty: np.ndarray, pred: np.ndarray, meas: np.ndarray) -> dict:
    b = np.percentile(faulty, [50, 99])
    p = np.percentile(pred, [50, 99])
    m = np.percentile(meas, [50, 99])
    return {
        "family": "reference pipeline", "cause": label, "lever": key,
        "faulty_p50": b[0], "faulty_p99": b[1], "pred_p50": p[0], "meas_p50": m[0],
        "pred_p99": p[1], "meas_p99": m[1], "error": abs(p[1] - m[1]) / m[1],
        "p50_error": abs(p[0] - m[0]) / m[0], "material": b[1] > 1.1 * m[1] or b[1] < 0.9 * m[1],
        "tail": int(np.ceil(len(meas) * 0.01)), "spread": p99_spread(meas),
    }

