"""The blind family `gpu-torch` (reference_pipeline/simulate/gpu_torch.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way a recompile, a co-tenant's time
slices, a power cap, allocator retries, pageable copies of bigger images, the GIL under a burst of
CPU-heavy decodes, gen2 collections of a leaking heap, a Redis eviction wave, read timeouts or a long
max_wait would produce it (a steady run of the same seed does not). Three runs go through the loader;
the other mechanisms are read from the generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache
from itertools import pairwise

import numpy as np
import pytest

from reference_pipeline.simulate import blind, gpu_torch
from reference_pipeline.simulate import gpu_torch_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_gpu_torch.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "gpu-torch"


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(gpu_torch, scenario, requests, seed)


def run_ns(requests: int, seed: int) -> float:
    return requests / gpu_torch.setup(seed)["rps"] * 1e9


def batches(spans) -> dict[tuple[str, int], dict]:
    """One forward span per (instance, batch number): the batch's run."""
    return {(x["instance"], x["attrs"]["batch.number"]): x for x in named(spans, sp.FORWARD)}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("gpu-torch")
    runs = {0: ("cache-leak", 700), 1: ("taxonomy-slowdown", 500), 2: ("shape-recompiles", 500)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == gpu_torch.SCENARIOS  # open now
    assert len(gpu_torch.SINGLES) == 10 and len(gpu_torch.PAIRS) == 3 and gpu_torch.SCENARIOS[0] == "steady"
    for seed, (spans, summary) in loaded.items():
        s, style = gpu_torch.setup(seed), gpu_torch.style(seed)
        assert summary["format"] == s["fmt"]
        assert {x["service"] for x in spans} == {sp.FE, sp.TAX} | ({sp.UP} if style.upstream else set())
        servers = named(spans, style.server, "Server")
        assert len(servers) == summary["requests"]
        roots = [x for x in spans if not x["parent"]]
        assert len(roots) == summary["requests"]
        assert all(x["service"] == (sp.UP if style.upstream else sp.FE) for x in roots)
        names = {x["name"].lower() for x in spans}
        assert (sp.DECODE in names) == (not s["coarse"]) and (sp.PREPROCESS in names) == s["coarse"]
        get = named(spans, sp.GET)[0]["attrs"]
        assert ("server.address" in get and "db.query.text" in get) == (s["semconv"] == "new")
        assert ("net.peer.name" in get and "db.statement" in get) == (s["semconv"] == "old")
        forward = named(spans, sp.FORWARD)[0]["attrs"]
        assert ("gpu.time_ms" in forward) == s["gpu_events"]
        fe = {x["instance"] for x in spans if x["service"] == sp.FE}
        assert len(fe) == s["pods"]
        assert ("service.instance.id" in servers[0]["resource"]) == (s["ident"] == "instance-id")
        reported = [e for x in spans for e in x["events"] if "gc" in str(e)]
        assert bool(reported) == s["gc_events"]
        for scenario in gpu_torch.SCENARIOS:
            for cause in gpu_torch.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                assert cause.service == sp.FE and set(cause.instances) <= fe, (scenario, cause)
                assert cause.stage in ("queue", "preprocessing", "feature_hydration", "model_forward",
                                       "downstream")
    with pytest.raises(ValueError, match="unknown gpu-torch scenario"):
        gpu_torch.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_producer_span_is_fire_and_forget(loaded) -> None:
    spans, _ = loaded[1]
    style = gpu_torch.style(1)
    by_id = {x["id"]: x for x in spans}
    producers = named(spans, style.producer, "Producer")
    late = [x["end"] > by_id[x["parent"]]["end"] for x in producers]
    assert len(producers) == 500 and np.mean(late) > 0.5


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_new_sequence_bucket_recompiles_and_the_requests_behind_it_wait(loaded) -> None:
    spans, _ = loaded[2]  # Zipkin: the SERVER span is the root, annotations for the recompiles
    first = min(x["start"] for x in spans)
    run = run_ns(500, 2)
    forwards = named(spans, sp.FORWARD)
    early = [int(x["attrs"]["model.seq_bucket"]) for x in forwards if x["start"] - first < 0.28 * run]
    assert early and max(early) <= 128
    for pod in {x["instance"] for x in forwards}:
        mine = sorted((x for x in forwards if x["instance"] == pod), key=lambda x: x["start"])
        long = [x for x in mine if x["attrs"]["model.seq_bucket"] == "256"]
        if not long:
            continue
        compile_ = long[0]
        assert compile_["duration"] > 1000 * MS
        assert any("torch.compile.recompile" in str(e) for e in compile_["events"])
        behind = [x for x in mine if compile_["start"] < x["start"] < compile_["end"] - MS]
        assert not behind  # nothing ran on the card meanwhile
    waits = [x["duration"] for x in named(spans, sp.WAIT)]
    assert max(waits) > 800 * MS
    steady = spans_of("steady", 500, 2)
    assert max(x["duration"] for x in named(steady, sp.FORWARD)) < 250 * MS
    assert p([x["duration"] for x in named(steady, sp.WAIT)], 99) < 60 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gen2_collections_of_a_leaking_heap_grow_and_stop_the_forwards_in_flight(loaded) -> None:
    spans, _ = loaded[0]
    gen2 = [e for x in spans for e in x["events"]
            if e["Name"] == "gc.collect" and e["Attributes"]["gc.generation"] == "2"]
    assert len(gen2) >= 3 and min(float(e["Attributes"]["gc.duration_ms"]) for e in gen2) > 50
    steady = spans_of("steady", 1000, 0)
    healthy = [e for x in steady for e in x["events"] if e[1] == "gc.collect" and e[2]["gc.generation"] == 2]
    assert len(healthy) <= len(gpu_torch.truth("cache-leak", 0)[0].instances) * 2
    table = spans_of("cache-leak", 700, 0)
    pauses = sorted((e[0], e[0] + e[2]["gc.duration_ms"] * MS, e[2]["gc.objects"], x["instance"])
                    for x in table for e in x["events"]
                    if e[1] == "gc.collect" and e[2]["gc.generation"] == 2)
    assert pauses[-1][2] > 1.2 * pauses[0][2]  # the heap grows: later collections walk more objects
    assert max(b - a for a, b, _, _ in pauses) > 1.2 * min(b - a for a, b, _, _ in pauses)
    hit = [x["duration"] for x in batches(table).values()
           if any(pod == x["instance"] and x["start"] < a and b < x["end"] for a, b, _, pod in pauses)]
    rest = [x["duration"] for x in batches(table).values()]
    assert hit and np.median(hit) > np.median(rest) + 20 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_read_timeouts_end_at_300_ms_in_error_and_are_made_again(loaded) -> None:
    spans, _ = loaded[1]  # Jaeger, old semconv
    style = gpu_torch.style(1)
    by_parent = kids(spans)
    calls = named(spans, style.taxonomy, "Client")
    failed = [x for x in calls if x["status"] == "Error"]
    assert len(failed) > 20
    for call in failed:
        assert 299 * MS < call["duration"] < 302 * MS
        (server,) = by_parent[call["id"]]
        assert server["end"] > call["end"]  # the server finishes the abandoned call
    for root in named(spans, style.server, "Server"):
        attempts = sorted((x for x in by_parent[root["id"]] if x["name"] == style.taxonomy),
                          key=lambda x: x["start"])
        assert 1 <= len(attempts) <= 2  # one retry, after a read timeout only
        assert [x["status"] == "Error" for x in attempts[:-1]] == [True] * (len(attempts) - 1)
        assert all(b["start"] >= a["end"] for a, b in pairwise(attempts))
    slow_pod = {x["instance"] for c in failed for x in by_parent[c["id"]]}
    assert len(slow_pod) == 1
    steady = [x for x in named(spans_of("steady", 500, 1), style.taxonomy, "Client")
              if x["status"] == "Error"]
    assert len(steady) <= 1


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_co_tenant_doubles_one_cards_kernel_time_in_its_windows() -> None:
    spans = spans_of("gpu-cotenant", 1000, 0)
    (cause,) = gpu_torch.truth("gpu-cotenant", 0)
    run = run_ns(1000, 0)
    first = min(x["start"] for x in spans)
    for pod in {x["instance"] for x in spans if x["service"] == sp.FE}:
        inside, outside = [], []
        for b in batches(spans).values():
            if b["instance"] != pod:
                continue
            at = (b["start"] - first) / run
            per_row = b["attrs"]["gpu.time_ms"] / b["attrs"]["batch.padded_size"]
            (inside if 0.27 < at < 0.48 or 0.67 < at < 0.83 else outside if at < 0.23 else []).append(per_row)
        ratio = np.median(inside) / np.median(outside)
        assert (1.7 < ratio < 2.3) if pod in cause.instances else (0.85 < ratio < 1.15), (pod, ratio)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_power_cap_slows_every_cards_kernels_for_the_rest_of_the_run() -> None:
    for scenario, low, high in (("power-capping", 1.25, 1.5), ("steady", 0.9, 1.1)):
        spans = spans_of(scenario, 1000, 0)
        run = run_ns(1000, 0)
        first = min(x["start"] for x in spans)
        for pod in {x["instance"] for x in spans if x["service"] == sp.FE}:
            early, late = [], []
            for b in batches(spans).values():
                if b["instance"] == pod and b["attrs"]["batch.padded_size"] == 1:
                    at = (b["start"] - first) / run
                    (early if at < 0.25 else late if at > 0.7 else []).append(b["attrs"]["gpu.time_ms"])
            assert low < np.median(late) / np.median(early) < high, (scenario, pod)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_allocator_retries_are_synchronising_stalls_in_the_forward() -> None:
    def stalls(scenario):
        seen = sorted(batches(spans_of(scenario, 1000, 0)).values(),
                      key=lambda b: (b["instance"], b["start"]))
        out, normal = [], []
        for prev, b in pairwise(seen):
            grew = prev["instance"] == b["instance"] and (
                b["attrs"]["torch.cuda.num_alloc_retries"] > prev["attrs"]["torch.cuda.num_alloc_retries"])
            (out if grew else normal).append(b["duration"] / MS / b["attrs"]["batch.padded_size"])
        return out, normal

    retried, normal = stalls("allocator-fragmentation")
    assert len(retried) >= 15 and np.median(retried) > np.median(normal) + 30
    assert len(stalls("steady")[0]) <= 4


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_bigger_images_make_the_pageable_copy_grow_with_its_bytes() -> None:
    for scenario in ("image-growth", "steady"):
        copies = named(spans_of(scenario, 1000, 0), sp.COPY)
        mb = np.array([x["attrs"]["h2d.bytes"] / 1e6 for x in copies])
        ms = np.array([x["duration"] / MS for x in copies])
        slope = np.polyfit(mb, ms, 1)[0]
        assert slope > 0.3  # ms per MB: ~2.9 GB/s from pageable memory, or slower when copies queue
        if scenario == "image-growth":
            assert np.percentile(mb, 75) > 40 and p(ms, 99) > 40
        else:
            assert np.percentile(mb, 99) < 40 and p(ms, 99) < 25


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_of_cpu_heavy_decodes_makes_every_decode_wait_for_the_gil() -> None:
    def per_megapixel(scenario):
        spans = spans_of(scenario, 1000, 0)
        run = run_ns(1000, 0)
        first = min(x["start"] for x in spans)
        out = []
        for x in named(spans, sp.DECODE):
            if x["attrs"]["image.mode"] == "RGB" and 0.42 < (x["start"] - first) / run < 0.52:
                pixels = x["attrs"]["image.width"] * x["attrs"]["image.height"] / 1e6
                out.append(x["duration"] / MS / pixels)
        return out

    burst, steady = per_megapixel("decode-burst"), per_megapixel("steady")
    assert np.median(burst) > 2.5 * np.median(steady)
    spans = spans_of("decode-burst", 1000, 0)
    heavy = [x for x in named(spans, sp.DECODE) if x["attrs"]["image.mode"] == "CMYK"]
    assert len(heavy) > 30


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_an_eviction_wave_sends_merchant_reads_to_postgres() -> None:
    def misses(scenario):
        spans = spans_of(scenario, 1000, 0)
        style = gpu_torch.style(0)
        run = run_ns(1000, 0)
        first = min(x["start"] for x in spans)
        servers = [x for x in named(spans, style.server, "Server") if 0.35 < (x["start"] - first) / run < 0.6]
        queried = {x["parent"] for x in named(spans, style.query)}
        durations = [x["duration"] for x in named(spans, style.query)]
        return np.mean([x["i"] in queried for x in servers]), durations

    (wave, slow), (base, fast) = misses("redis-evictions"), misses("steady")
    assert wave > 0.5 and base < 0.06 and np.median(slow) > 2.5 * np.median(fast)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_long_max_wait_makes_every_request_wait_for_its_batch_to_close() -> None:
    spans = spans_of("batcher-max-wait", 1000, 0)
    waits = [x["duration"] for x in named(spans, sp.WAIT)]
    assert p(waits, 50) > 40 * MS and max(waits) < 200 * MS
    assert np.mean([b["attrs"]["batch.size"] < 16 for b in batches(spans).values()]) > 0.95
    steady = [x["duration"] for x in named(spans_of("steady", 1000, 0), sp.WAIT)]
    assert p(steady, 50) < 8 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("scenario", gpu_torch.SINGLES)
def test_every_planted_cause_moves_the_p99(scenario: str) -> None:
    def p99(name):
        return p([x["duration"] for x in spans_of(name, 1000, 0) if x["parent"] < 0], 99)

    assert p99(scenario) > 1.25 * p99("steady")


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    style = gpu_torch.style(seed)
    if part == "shape-recompiles":
        return max(x["duration"] for x in named(spans, sp.FORWARD)) > 1000 * MS
    if part == "allocator-fragmentation":
        retries: dict[str, int] = {}  # the counter is cumulative per process
        for x in named(spans, sp.FORWARD):
            count = x["attrs"]["torch.cuda.num_alloc_retries"]
            retries[x["instance"]] = max(retries.get(x["instance"], 0), count)
        return sum(retries.values()) >= 8
    if part == "image-growth":
        return np.percentile([x["attrs"]["h2d.bytes"] for x in named(spans, sp.COPY)], 75) > 40e6
    if part == "gpu-cotenant":
        pod = gpu_torch.truth("gpu-cotenant", seed)[0].instances[0]
        mine = [x["attrs"]["gpu.time_ms"] / x["attrs"]["batch.padded_size"] for x in batches(spans).values()
                if x["instance"] == pod]
        return p(mine, 90) > 1.7 * p(mine, 10)
    if part == "redis-evictions":
        return len(named(spans, style.query)) > 0.2 * len(named(spans, style.server, "Server"))
    assert part == "taxonomy-slowdown"
    return sum(x["status"] == "Error" for x in named(spans, style.taxonomy)) > 10


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", gpu_torch.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    assert [c.pattern for c in gpu_torch.truth(pair, 0)] == [gpu_torch.truth(x, 0)[0].pattern for x in parts]
    both, steady = spans_of(pair, 1000, 0), spans_of("steady", 1000, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
