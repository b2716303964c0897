"""bench_pipeline.py's waterfall sections: do light mode and a span per stage give the same stages?

waterfall: spans and light runs alternate at an open-loop rate below saturation, each ingested, and
  the per-stage mean ms over all requests compared. Separate runs on the shared 2-core VM differ by
  more than the modes do (the same mode's runs by ±30 %), and a span per stage also slows the stages
  it measures, so this compares two services as much as two representations.
both: one run in tracing mode "both" (a span per stage and the light tally, from the same requests),
  its file split in two, a span-per-stage run (the stage attributes removed) and a light run (the
  service's INTERNAL spans removed, the request span and CLIENT spans kept), both ingested: the
  per-stage means of the very same requests through each representation.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path

from bench.pipeline_modes import ALL_STAGES, layers_text


def stage_means(db: Path, run: str) -> dict[str, float]:
    import duckdb

    cols = ", ".join(f"avg({c}_ns) / 1e6" for c in ALL_STAGES)
    with duckdb.connect(str(db), read_only=True) as conn:
        row = conn.execute(f"SELECT {cols}, count(*) FROM requests WHERE RunLabel = ?", [run]).fetchone()
    return dict(zip((*ALL_STAGES, "requests"), row, strict=True))


def bench_waterfall(args, machine: str) -> None:
    """Spans and light runs alternating at an open-loop rate; the per-stage means of each."""
    from ingest.loader import load_paths
    from reference_pipeline.runner import RunOptions, run_pipeline

    print(
        f"waterfall stage means, spans vs light ({args.rps:g} req/s open loop, {args.duration:g} s, "
        f"steady with downstream, {layers_text(args)}, {args.repeats} runs each, alternating) — {machine}\n"
    )
    means: dict[str, list[dict]] = {"spans": [], "light": []}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "w.duckdb"
        for repeat in range(args.repeats):
            for mode in means:
                out = Path(tmp) / f"{mode}{repeat}.jsonl"
                run_pipeline(
                    RunOptions(
                        duration_s=args.duration,
                        rps=args.rps,
                        out=out,
                        tracing_mode=mode,
                        seed=repeat + 1,
                        model_layers=args.layers,
                    )
                )
                label = f"{mode}{repeat}"
                load_paths([out], db, label)
                means[mode].append(stage_means(db, label))
                print(f"  {label}: {means[mode][-1]['requests']} requests, load {os.getloadavg()[0]:.1f}")
    print("\n| stage | spans mean ms (runs) | light mean ms (runs) | light vs spans |")
    print("|---|---|---|---|")
    for stage in ALL_STAGES:
        a = [m[stage] for m in means["spans"]]
        b = [m[stage] for m in means["light"]]
        diff = (
            100 * (statistics.mean(b) - statistics.mean(a)) / statistics.mean(a) if statistics.mean(a) else 0
        )
        runs = lambda xs: ", ".join(f"{x:.3f}" for x in xs)  # noqa: E731
        print(
            f"| {stage} | {statistics.mean(a):.3f} ({runs(a)}) | {statistics.mean(b):.3f} ({runs(b)}) | "
            f"{diff:+.1f} % |"
        )


def split_both(path: Path, spans_out: Path, light_out: Path) -> None:
    """A "both" run's OTLP/JSON lines as a span-per-stage file and a light file (see the docstring)."""
    from reference_pipeline import span_model as sm
    from tailscope.instrument.light import STAGE_END_US, STAGE_US

    def service(resource: dict) -> str:
        attrs = {a["key"]: a["value"] for a in resource["resource"]["attributes"]}
        return attrs.get("service.name", {}).get("stringValue", "")

    with open(path) as src, open(spans_out, "w") as a, open(light_out, "w") as b:
        for line in src:
            request = json.loads(line)
            spans_side, light_side = json.loads(line), request
            for res_a, res_b in zip(spans_side["resourceSpans"], light_side["resourceSpans"], strict=True):
                if service(res_a) != sm.SERVICE_NAME:
                    continue
                for scope_a, scope_b in zip(res_a["scopeSpans"], res_b["scopeSpans"], strict=True):
                    for span in scope_a["spans"]:
                        span["attributes"] = [
                            kv
                            for kv in span.get("attributes", [])
                            if not kv["key"].startswith((STAGE_US, STAGE_END_US))
                        ]
                    scope_b["spans"] = [s for s in scope_b["spans"] if s["kind"] != 1]  # INTERNAL
            a.write(json.dumps(spans_side) + "\n")
            b.write(json.dumps(light_side) + "\n")


def bench_both(args, machine: str) -> None:
    from ingest.loader import load_paths
    from reference_pipeline.runner import RunOptions, run_pipeline

    print(
        f"one run traced both ways, split ({args.rps:g} req/s open loop, {args.duration:g} s, steady with "
        f"downstream, {layers_text(args)}, {args.repeats} runs) — {machine}\n"
    )
    print("| stage | span per stage, mean ms | light, mean ms | light vs spans |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "b.duckdb"
        for repeat in range(args.repeats):
            out = Path(tmp) / f"both{repeat}.jsonl"
            run_pipeline(
                RunOptions(
                    duration_s=args.duration,
                    rps=args.rps,
                    out=out,
                    tracing_mode="both",
                    seed=repeat + 1,
                    model_layers=args.layers,
                )
            )
            split_both(out, Path(tmp) / f"s{repeat}.jsonl", Path(tmp) / f"l{repeat}.jsonl")
            load_paths([Path(tmp) / f"s{repeat}.jsonl"], db, f"spans{repeat}")
            load_paths([Path(tmp) / f"l{repeat}.jsonl"], db, f"light{repeat}")
        spans = [stage_means(db, f"spans{r}") for r in range(args.repeats)]
        lite = [stage_means(db, f"light{r}") for r in range(args.repeats)]
    worst = 0.0
    for stage in (*ALL_STAGES, "requests"):
        a = statistics.mean(m[stage] for m in spans)
        b = statistics.mean(m[stage] for m in lite)
        diff = 100 * (b - a) / a if a else 0.0
        if stage not in ("requests", "unattributed") and a > 0.05:
            worst = max(worst, abs(diff))
        print(f"| {stage} | {a:.4f} | {b:.4f} | {diff:+.2f} % |")
    print(f"\nlargest difference over the stages above 0.05 ms: {worst:.2f} %; load {os.getloadavg()[0]:.1f}")


SECTIONS = {"waterfall": bench_waterfall, "both": bench_both}
