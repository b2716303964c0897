"""The blind family `asr-stream` (reference_pipeline/simulate/asr_stream.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way G1's humongous pauses, a slow-reading
client's shut window, a hot decoder host, cudaFree's device syncs, a rolling deploy, noisy lines,
a phrase-hint cache expiring at once, slow WAL fsyncs, longer utterances or a CFS quota would produce
it (a steady run of the same seed does not). Three runs go through the loader; the other mechanisms
are read from the generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import asr_stream, blind
from reference_pipeline.simulate import asr_stream_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

CONTRACT = (
    "tests/test_simulate_blind_asr_stream.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)
MS = 1e6
FAMILY = "asr-stream"


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(asr_stream, scenario, requests, seed)


def run_ns(spans) -> float:
    roots = [s for s in spans if s["name"] == sp.ROOT]
    return max(s["start"] for s in roots) - min(s["start"] for s in roots)


def eou_p99(scenario: str, requests: int, seed: int) -> float:
    return p([s["duration"] for s in named(spans_of(scenario, requests, seed), sp.EOU)], 99)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("asr-stream")
    runs = {0: ("hint-cache-expiry", 400), 1: ("cudafree-sync", 150), 2: ("slow-readers", 400)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == asr_stream.SCENARIOS  # open now
    assert sum("+" in sc for sc in asr_stream.SCENARIOS) == 3 and asr_stream.SCENARIOS[0] == "steady"
    assert 9 <= len(asr_stream.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s = asr_stream.setup(seed)
        assert summary["format"] == s["fmt"]
        assert {x["service"] for x in spans} == {sp.GW, sp.DEC}
        roots = [x for x in spans if not x["parent"]]
        utterances = [x for x in roots if x["name"].lower() == sp.ROOT.lower()]
        batches = [x for x in roots if x["name"] == sp.BATCH]
        assert len(utterances) + len(batches) == summary["requests"] and len(utterances) in (150, 400)
        assert bool(batches) == s["batches"]
        if batches:  # linked to the decoder SERVER spans of the streams they served
            assert all(x["links"] for x in batches)
        insert = next(x for x in spans if x["name"].lower() == sp.INSERT.lower())["attrs"]
        assert ("db.query.text" in insert and "server.address" in insert) == (s["semconv"] == "new")
        assert ("db.statement" in insert and "net.peer.name" in insert) == (s["semconv"] == "old")
        names = {x["name"].lower() for x in spans}
        assert (sp.CHUNK.lower() in names) == (s["chunks"] == "spans")
        server = [x for x in spans if x["name"].lower() == sp.DECODE.lower() and x["kind"] == "Server"]
        with_chunks = [x for x in server if any(e["Name"] == "chunk.decoded" for e in x["events"])]
        assert bool(with_chunks) == (s["chunks"] == "events")  # Zipkin's annotations: events too
        gw = {x["instance"] for x in spans if x["service"] == sp.GW}
        dec = {x["instance"] for x in spans if x["service"] == sp.DEC}
        assert len(gw) == s["gateways"] and len(dec) == s["decoders"]
        assert ("service.instance.id" in utterances[0]["resource"]) == (s["ident"] == "instance-id")
        for scenario in asr_stream.SCENARIOS:
            for cause in asr_stream.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                if scenario != "rolling-deploy":  # fresh processes: test_a_rolling_deploy...
                    assert set(cause.instances) <= (gw if cause.service == sp.GW else dec), (scenario, cause)
    with pytest.raises(ValueError, match="unknown asr-stream scenario"):
        asr_stream.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gc_pauses_are_events_on_some_seeds_and_the_gpu_syncs_on_another(loaded) -> None:
    for seed, (spans, _) in loaded.items():
        s = asr_stream.setup(seed)
        events = {e["Name"] for x in spans for e in x["events"]}
        assert ("jvm.gc.pause" in events) == s["gc_events"]
        assert ("gpu.alloc.retry" in events) == s["gpu_events"]
    spans, _ = loaded[1]  # cudafree-sync on seed 1: retries only on the fragmented GPU's streams
    (cause,) = asr_stream.truth("cudafree-sync", 1)
    retried: dict[str, int] = {}  # the others' are the odd healthy retry
    for x in spans:
        retried[x["instance"]] = retried.get(x["instance"], 0) + sum(e["Name"] == "gpu.alloc.retry"
                                                                     for e in x["events"])
    (sync,) = cause.instances
    assert retried[sync] > 30 and retried[sync] > 5 * max(n for i, n in retried.items() if i != sync)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_humongous_allocations_pause_the_gateway_and_stretch_end_of_utterance() -> None:
    spans = spans_of("humongous-gc", 800, 0)
    pauses = [e for x in named(spans, sp.EOU) for e in x["events"] if e[1] == "jvm.gc.pause"]
    humongous = [e[2]["jvm.gc.duration_ms"] for e in pauses
                 if e[2]["jvm.gc.cause"] == "G1 Humongous Allocation"]
    assert len(humongous) > 20 and np.median(humongous) > 60
    paused = [x["duration"] for x in named(spans, sp.EOU) if x["events"]]
    clean = [x["duration"] for x in named(spans, sp.EOU) if not x["events"]]
    assert np.median(paused) > np.median(clean) + 30 * MS
    steady = [e[2] for x in named(spans_of("steady", 800, 0), sp.EOU) for e in x["events"]]
    assert all(e["jvm.gc.duration_ms"] < 12 and e["jvm.gc.cause"] == "G1 Evacuation Pause" for e in steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_reading_client_waits_for_its_window_after_the_commit(loaded) -> None:
    spans, _ = loaded[2]
    by_parent = kids_by_id(spans)

    def waits(customer_is_slow: bool) -> list[float]:
        out = []
        for eou in (x for x in spans if x["name"].lower() == sp.EOU.lower()):
            if (eou["attrs"]["asr.customer"] == "ledgerline-crm") != customer_is_slow:
                continue
            (insert,) = by_parent[eou["id"]]
            out.append(eou["end"] - insert["end"])
        return out

    assert p(waits(True), 50) > 100 * MS and p(waits(False), 99) < 70 * MS


def kids_by_id(spans) -> dict:
    out: dict = {}
    for x in spans:
        out.setdefault(x["parent"], []).append(x)
    return out


def _batch_sizes(spans) -> dict[str, list[int]]:
    """Each decoder's micro-batch sizes, as its chunk events report them."""
    sizes: dict[str, list[int]] = {}
    for x in named(spans, sp.DECODE, "Server"):
        sizes.setdefault(x["instance"], []).extend(e[2]["asr.batch.size"] for e in x["events"]
                                                   if e[1] == "chunk.decoded")
    return sizes


def _flush_by_instance(spans) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for x in named(spans, sp.FLUSH):
        out.setdefault(x["instance"], []).append(x["duration"])
    return out


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_hot_host_on_the_ring_batches_more_and_later() -> None:
    (cause,) = asr_stream.truth("hash-skew", 0)
    spans = spans_of("hash-skew", 800, 0)
    flush = _flush_by_instance(spans)
    (hot,) = cause.instances
    assert all(p(flush[hot], 90) > 1.4 * p(v, 90) for inst, v in flush.items() if inst != hot)
    sizes = _batch_sizes(spans)
    assert all(np.mean(sizes[hot]) > 1.5 * np.mean(v) for inst, v in sizes.items() if inst != hot)
    share = sum(x["instance"] == hot for x in named(spans, sp.FINALIZE)) / len(named(spans, sp.FINALIZE))
    assert 0.22 < share < 0.45
    steady = _flush_by_instance(spans_of("steady", 800, 0))
    assert max(p(v, 90) for v in steady.values()) < 2 * min(p(v, 90) for v in steady.values())


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_device_sync_stalls_every_stream_on_that_gpu_at_once(loaded) -> None:
    spans, _ = loaded[1]  # chunk decodes as spans on seed 1
    (cause,) = asr_stream.truth("cudafree-sync", 1)
    chunks = named(spans, sp.CHUNK)
    (sync,) = cause.instances
    slow = [x for x in chunks if x["duration"] > 80 * MS]
    on_sync = [x for x in slow if x["instance"] == sync]  # elsewhere: the odd healthy retry
    assert len(on_sync) > 30 and len(on_sync) > 0.8 * len(slow)
    ends = np.sort([x["end"] for x in on_sync])  # released together when the sync ends
    assert np.mean(np.diff(ends) < 5 * MS) > 0.5


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_rolling_deploy_moves_streams_and_each_fresh_process_starts_cold() -> None:
    spans = spans_of("rolling-deploy", 1500, 0)
    (cause,) = asr_stream.truth("rolling-deploy", 0)
    versions = {x["instance"]: x["resource"]["service.version"] for x in spans if x["service"] == sp.DEC}
    fresh = {i for i, v in versions.items() if v == sp.VERSION_NEW}
    assert fresh == set(cause.instances) and len(fresh) == asr_stream.setup(0)["decoders"]
    cut = [x for x in named(spans, sp.DECODE, "Client") if x["status"] == "Error"]
    rebuilds = named(spans, sp.REBUILD)
    assert len(cut) > 20 and len(rebuilds) > 20
    assert min(x["attrs"]["asr.rebuild.chunks"] for x in rebuilds) >= 1
    flush = _flush_by_instance(spans)
    steady = [d for v in _flush_by_instance(spans_of("steady", 1500, 0)).values() for d in v]
    waits: dict[str, float] = {}  # a fresh process' first batch waits for its lazy CUDA module loads
    for x in named(spans, sp.DECODE, "Server"):
        mine = [e[2]["asr.chunk.wait_us"] for e in x["events"] if e[1] == "chunk.decoded"]
        waits[x["instance"]] = max([waits.get(x["instance"], 0.0), *mine])
    assert all(waits[i] > 600_000 for i in fresh)
    assert max(w for i, w in waits.items() if i not in fresh) < 400_000
    assert p([d for i in fresh for d in flush[i]], 99) > 3 * p(steady, 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_noisy_lines_widen_the_beam_and_rescoring_costs_grow_with_it() -> None:
    spans = spans_of("noisy-lines", 800, 2)
    parent = {x["i"]: x for x in spans}
    per_word: dict[bool, list[float]] = {True: [], False: []}
    for x in named(spans, sp.RESCORE):
        customer = parent[parent[x["parent"]]["parent"]]["attrs"]["asr.customer"]
        noisy = customer == "bluepeak-logistics"
        assert (x["attrs"]["asr.beam.width"] >= 24) == noisy
        per_word[noisy].append(x["duration"] / x["attrs"]["asr.words"])
    assert np.median(per_word[True]) > 2.2 * np.median(per_word[False])
    assert max(x["attrs"]["asr.beam.width"] for x in named(spans_of("steady", 800, 2), sp.RESCORE)) <= 16


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_large_customers_hints_expire_together_and_every_finalization_misses_until_a_reload(loaded) -> None:
    spans, _ = loaded[0]
    lookups = [x for x in spans if x["name"] == sp.HINTS]
    first = min(x["start"] for x in spans)
    run = 400 / asr_stream.setup(0)["rps"] * 1e9
    misses = [x for x in lookups if x["attrs"]["cache.hit"] in (False, "false")]
    large = [x for x in misses if int(x["attrs"]["asr.hints.phrases"]) >= 20_000]
    at = np.array([(x["start"] - first) / run for x in large])
    assert len(at) >= 5 and np.mean((at > 0.4) & (at < 0.6)) > 0.8, at
    assert p([x["duration"] for x in large], 50) > 80 * MS
    steady = [x for x in named(spans_of("steady", 400, 0), sp.HINTS) if not x["attrs"]["cache.hit"]]
    assert len(steady) < 0.03 * 400


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_backup_on_the_wal_disk_slows_commits_while_it_runs() -> None:
    spans = spans_of("wal-fsync-stalls", 1000, 1)
    inserts = named(spans, sp.INSERT)
    first = min(x["start"] for x in named(spans, sp.ROOT))
    run = 1000 / asr_stream.setup(1)["rps"] * 1e9  # the backup: from 15 % to 85 % of it
    during = [x["duration"] for x in inserts if 0.3 < (x["start"] - first) / run < 0.8]
    outside = [x["duration"] for x in inserts if (x["start"] - first) / run < 0.1]
    assert p(during, 50) > 5 * p(outside, 50) and p(during, 99) > 100 * MS
    assert p([x["duration"] for x in named(spans_of("steady", 1000, 1), sp.INSERT)], 50) < 5 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_longer_utterances_grow_rescoring_and_punctuation_with_the_words() -> None:
    long, steady = spans_of("long-utterances", 500, 2), spans_of("steady", 500, 2)
    words = [x["attrs"]["asr.words"] for x in named(long, sp.RESCORE)]
    assert np.median(words) > 2.3 * np.median([x["attrs"]["asr.words"] for x in named(steady, sp.RESCORE)])
    rescore = named(long, sp.RESCORE)
    words = [x["attrs"]["asr.words"] for x in rescore]
    slope = np.polyfit(words, [x["duration"] / MS for x in rescore], 1)[0]
    assert slope > 0.8  # ms a word (1.3 ms at beam 8)
    punct = named(long, sp.PUNCT)
    assert np.corrcoef([x["attrs"]["asr.tokens"] for x in punct], [x["duration"] for x in punct])[0, 1] > 0.5


def _rescore_ms(span: dict) -> float:
    """A beam-8 rescoring's running time in ms (6 ms + 3.4 ms a second of audio, 2.6 words a second)."""
    return 6.0 + 3.4 * span["attrs"]["asr.words"] / 2.6


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_cfs_quota_stalls_rescoring_until_the_period_ends() -> None:
    spans = spans_of("cfs-throttling", 800, 0)
    steady = spans_of("steady", 800, 0)

    def stretch(run) -> list[float]:
        return [x["duration"] / MS / _rescore_ms(x) for x in named(run, sp.RESCORE)
                if x["attrs"]["asr.beam.width"] == 8]

    assert p(stretch(spans), 90) > 1.8 and p(stretch(steady), 90) < 1.4
    for inst in {x["instance"] for x in named(spans, sp.RESCORE)}:
        ends = [x["end"] % (100 * MS) for x in named(spans, sp.RESCORE)
                if x["instance"] == inst and x["duration"] > 1.8 * _rescore_ms(x) * MS]
        bins = np.bincount(np.asarray(ends, dtype=np.int64) // int(5 * MS), minlength=20)
        densest = max(np.roll(bins, -k)[:8].sum() for k in range(20))  # 40 ms of the 100 ms period
        assert len(ends) > 8 and densest / len(ends) > 0.7, inst  # resumed at the period boundary


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("seed", "scenarios"), [(0, asr_stream.SINGLES[:5]), (2, asr_stream.SINGLES[5:])])
def test_every_planted_cause_moves_the_p99_of_end_of_utterance(seed: int, scenarios: tuple[str, ...]) -> None:
    base = eou_p99("steady", 1000, seed)
    for scenario in scenarios:
        assert eou_p99(scenario, 1000, seed) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    if part == "hash-skew":
        (hot,) = asr_stream.truth("hash-skew", seed)[0].instances  # the ring sends it more streams
        held: dict[str, int] = {}
        for x in named(spans, sp.FINALIZE):
            held[x["instance"]] = held.get(x["instance"], 0) + 1
        return all(held[hot] > 1.5 * n for i, n in held.items() if i != hot)
    if part == "cudafree-sync":
        (inst,) = asr_stream.truth("cudafree-sync", seed)[0].instances
        slow = {x["instance"] for x in named(spans, sp.PUNCT) if x["duration"] > 60 * MS}
        return slow == {inst}
    if part == "wal-fsync-stalls":
        return p([x["duration"] for x in named(spans, sp.INSERT)], 75) > 10 * MS
    if part == "hint-cache-expiry":
        big = [x for x in named(spans, sp.HINTS) if not x["attrs"]["cache.hit"]
               and x["attrs"]["asr.hints.phrases"] >= 20_000]
        return len(big) >= 10
    if part == "humongous-gc":
        return any(e[2]["jvm.gc.duration_ms"] > 50 for x in named(spans, sp.EOU) for e in x["events"])
    assert part == "slow-readers"
    by_parent = kids(spans)
    waits = [x["end"] - by_parent[x["i"]][0]["end"] for x in named(spans, sp.EOU)
             if x["attrs"]["asr.customer"] == "ledgerline-crm"]
    return p(waits, 50) > 100 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", asr_stream.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    patterns = [asr_stream.truth(x, 0)[0].pattern for x in parts]
    assert [c.pattern for c in asr_stream.truth(pair, 0)] == patterns
    both, steady = spans_of(pair, 800, 0), spans_of("steady", 800, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
