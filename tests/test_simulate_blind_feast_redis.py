"""The blind family `feast-redis` (reference_pipeline/simulate/feast_redis.py; held out): each seed's
format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way a Redis shard's fork or
slow command, a resharding's MIGRATE and ASK round, a hot key, ndots:5 resolution, dropped SYNs, TF
Serving's batch queue, THP compaction, a leaking Go heap or a full Kafka buffer would produce it (a
steady run of the same seed does not). Three runs go through the loader; the other mechanisms are read
from the generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, feast_redis
from reference_pipeline.simulate import feast_redis_spans as sp
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_feast_redis.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "feast-redis"


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def label(resource: dict) -> str:
    """The instance the store names: service.instance.id, host.name:process.pid, or Zipkin's ip:port."""
    if "service.instance.id" in resource:
        return resource["service.instance.id"]
    if "process.pid" in resource:
        return f"{resource['host.name']}:{resource['process.pid']}"
    return f"{resource['net.host.ip']}:{resource['net.host.port']}"


@cache
def table_spans(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    """The generated table's spans as dicts (times in ns from the run's start), without the loader."""
    table = feast_redis.generate(scenario, requests, seed)
    zipkin = feast_redis.setup(seed)["fmt"] == "zipkin"
    out = []
    for i, row in enumerate(table.rows):
        _t, parent, name, kind, res, _s, start, end, attrs, status, _m, events, _p = row
        service, ip, port = table.endpoints[res]
        resource = {"service.name": service, "net.host.ip": ip, "net.host.port": port} if zipkin else (
            table.resources[res])
        out.append({"i": i, "parent": parent, "name": name, "kind": kind, "service": service,
                    "instance": label(resource), "start": start - DEFAULT_START_NS,
                    "end": end - DEFAULT_START_NS, "duration": end - start, "attrs": attrs,
                    "status": status, "events": events})
    return tuple(out)


def named(spans, name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"].lower() == name.lower() and kind in (None, s["kind"])]


def kids(spans) -> dict:
    out: dict = {}
    for s in spans:
        out.setdefault(s["parent"], []).append(s)
    return out


def roots(spans) -> list[dict]:
    return [s for s in spans if s["parent"] == -1]


def shard_of(span: dict) -> str:
    return span["attrs"].get("server.address") or span["attrs"]["net.peer.name"]


def by_shard(spans) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for x in named(spans, sp.PIPE):
        out.setdefault(shard_of(x), []).append(x["duration"])
    return out


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("feast-redis")
    runs = {0: ("tf-batch-burst", 500), 1: ("slot-migration", 400), 2: ("conntrack-full", 400)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed) for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == feast_redis.SCENARIOS  # open now
    assert blind.MODULES[FAMILY] == "feast_redis" and FAMILY in blind.available()
    assert sum("+" in sc for sc in feast_redis.SCENARIOS) == 3 and feast_redis.SCENARIOS[0] == "steady"
    assert 9 <= len(feast_redis.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s, st = feast_redis.setup(seed), feast_redis.style(seed)
        assert summary["format"] == s["fmt"]
        top = [x for x in spans if not x["parent"]]
        assert len(top) == summary["requests"] and {x["name"].lower() for x in top} == {sp.ROOT.lower()}
        assert {x["service"] for x in spans} == ({sp.SCORER, sp.TFS} if st.tf_spans else {sp.SCORER})
        names = {x["name"].lower() for x in spans}
        assert (sp.PIPE.lower() in names) == (st.redis == "pipelines") != (sp.FANOUT.lower() in names)
        pipes = [x for x in spans if x["name"].lower() == sp.PIPE.lower()]
        if pipes:
            attrs = pipes[0]["attrs"]
            assert attrs["db.system"] == "redis"
            assert ("server.address" in attrs) == (s["semconv"] == "new") != ("net.peer.name" in attrs)
            assert ("db.statement" in attrs) == s["statements"]
        pods = {label(x["resource"]) for x in top}
        assert pods == {st.label(k) for k in range(feast_redis.PODS)}
        assert ("service.instance.id" in top[0]["resource"]) == (s["ident"] == "pod")
        gc_attrs = "runtime.go.gc.count" in top[0]["attrs"]
        assert gc_attrs == (s["gc"] == "attrs")
        if s["gc"] != "events":
            assert all(x["events"] in (None, "", "[]") for x in top)
        tf = {label(x["resource"]) for x in spans if x["service"] == sp.TFS}
        for scenario in feast_redis.SCENARIOS:
            for cause in feast_redis.truth(scenario, seed):
                assert cause.span.lower() in names or cause.span == sp.DIAL, (scenario, cause)
                assert set(cause.instances) <= (tf if cause.service == sp.TFS else pods), (scenario, cause)
                assert cause.stage in (None, "queue", "feature_hydration", "model_forward", "downstream")
    spans, _ = loaded[2]  # Zipkin, one span per Redis read: the dial's time shows there
    assert feast_redis.truth("conntrack-full", 2)[0].span == sp.FANOUT
    assert sp.DIAL not in {x["name"].lower() for x in spans}
    with pytest.raises(ValueError, match="unknown feast-redis scenario"):
        feast_redis.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gc_events_on_the_otlp_seed_and_a_batch_queue_time_on_tf_servings_spans(loaded) -> None:
    spans, _ = loaded[0]
    tops = [x for x in spans if not x["parent"]]
    marked = [x for x in tops if sp.GC_EVENT in (x["events"] or "")]  # a cycle began while in flight
    assert len(marked) >= 3
    server = [x for x in spans if x["service"] == sp.TFS]
    assert server and all(x["kind"] == "Server" and x["name"] == sp.PREDICT for x in server)
    queue = [int(x["attrs"]["tfs.batching.queue_time_us"]) for x in server]
    assert max(queue) > 5000 and min(queue) >= 0


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_fork_stalls_one_shard_for_hundreds_of_ms_and_everything_queued_behind_it() -> None:
    shards = by_shard(table_spans("bgsave-fork", 1500, 0))
    forked = sp.shard_host(feast_redis.FORK_SHARD)
    slow = [d for d in shards.pop(forked) if d > 50 * MS]
    assert len(slow) > 15 and max(slow) > 200 * MS
    assert all(p(v, 99) < 40 * MS for v in shards.values())
    steady = by_shard(table_spans("steady", 1500, 0))
    assert p(steady[forked], 99.5) < 40 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_hgetall_delays_the_commands_queued_behind_it_on_its_shard_only() -> None:
    shards = by_shard(table_spans("slow-hgetall", 1500, 0))
    hit = shards.pop(sp.shard_host(feast_redis.HGETALL_SHARD))
    assert p(hit, 98) > 15 * MS and p(hit, 50) < 2 * MS  # a head-of-line wait, not a slower shard
    assert all(p(v, 98) < 0.5 * p(hit, 98) for v in shards.values())


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_resharding_blocks_the_source_shard_and_adds_an_ask_round_after_the_first(loaded) -> None:
    spans, _ = loaded[1]  # Jaeger, with db.statement
    by_parent: dict[str, list[dict]] = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    asks = [x for x in spans if x["name"] == sp.ASK_PIPE]
    assert len(asks) > 10
    for ask in asks:
        assert ask["attrs"]["db.statement"].startswith("asking ")
        assert shard_of(ask) == sp.shard_host(feast_redis.NEW_SHARD)
        first = [x for x in by_parent[ask["parent"]] if x["name"] == sp.PIPE]
        assert ask["start"] >= max(x["end"] for x in first)  # after the whole first round
    source = sp.shard_host(feast_redis.SOURCE_SHARD)
    mig = [x["duration"] for x in spans if x["name"] == sp.PIPE and shard_of(x) == source]
    steady = by_shard(table_spans("steady", 400, 1))[source]
    assert p(mig, 75) > 2 * p(steady, 75) and p(mig, 95) > 4 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_hot_key_keeps_its_shard_near_saturation_so_waits_come_in_waves() -> None:
    spans = table_spans("hot-key", 1500, 0)
    hot = sp.shard_host(feast_redis.HOT_SHARD)
    shards = by_shard(spans)
    assert all(p(shards[hot], 90) > 2 * p(v, 90) for h, v in shards.items() if h != hot)
    # a queue that builds and drains: a pipeline's wait on the hot shard is close to the one before it
    def lag1(host):
        xs = sorted((x for x in named(spans, sp.PIPE) if shard_of(x) == host), key=lambda x: x["start"])
        d = np.array([x["duration"] for x in xs], dtype=float)
        return np.corrcoef(d[:-1], d[1:])[0, 1]

    assert lag1(hot) > 0.8 and lag1(sp.shard_host(1)) < 0.5


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_after_the_library_change_most_pipelines_dial_and_resolve_through_the_search_list() -> None:
    spans = table_spans("ndots-dns", 800, 0)
    dials, pipes = named(spans, sp.DIAL), named(spans, sp.PIPE)
    assert len(dials) > 0.8 * len(pipes) and p([x["duration"] for x in dials], 50) > 3 * MS
    steady = table_spans("steady", 800, 0)
    old = named(steady, sp.DIAL)
    assert len(old) < 0.06 * len(named(steady, sp.PIPE)) and p([x["duration"] for x in old], 90) < 2 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_full_conntrack_table_costs_1_s_or_3_s_syn_retransmits_on_its_nodes_pods_only(loaded) -> None:
    spans = table_spans("conntrack-full", 1500, 0)
    dials = named(spans, sp.DIAL)
    (cause,) = feast_redis.truth("conntrack-full", 0)
    retransmitted = [x for x in dials if x["duration"] > 900 * MS]
    assert len(retransmitted) >= 5 and {x["instance"] for x in retransmitted} == set(cause.instances)
    seconds = {round(x["duration"] / 1e9) for x in retransmitted}
    assert seconds <= {1, 3} and 1 in seconds
    zipkin, _ = loaded[2]  # one span per read: the retransmit shows there, on the node's pods
    (cause,) = feast_redis.truth("conntrack-full", 2)
    slow = [x for x in zipkin if x["name"] == sp.FANOUT and x["duration"] > 900 * MS]
    assert slow and {label(x["resource"]) for x in slow} <= set(cause.instances)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_surge_fills_tf_servings_batch_queues_and_batches_grow(loaded) -> None:
    spans, _ = loaded[0]
    server = [x for x in spans if x["service"] == sp.TFS]
    first = min(x["start"] for x in spans)
    run = 500 / feast_redis.setup(0)["rps"] * 1e9
    inside, before = [], []
    for x in server:
        at = (x["start"] - first) / run
        (inside if 0.45 < at < 0.6 else before if at < 0.3 else []).append(x)
    q_in = [int(x["attrs"]["tfs.batching.queue_time_us"]) for x in inside]
    q_out = [int(x["attrs"]["tfs.batching.queue_time_us"]) for x in before]
    assert p(q_in, 75) > 2 * p(q_out, 75) and p(q_in, 95) > 4000


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_thp_compaction_stretches_some_batches_on_one_tf_host_only() -> None:
    spans = table_spans("thp-compaction", 1500, 0)
    (cause,) = feast_redis.truth("thp-compaction", 0)
    server = [x for x in spans if x["service"] == sp.TFS]
    stretched = [x for x in server if x["duration"] > 30 * MS]
    assert len(stretched) >= 10 and {x["instance"] for x in stretched} == set(cause.instances)
    steady = [x["duration"] for x in table_spans("steady", 1500, 0) if x["service"] == sp.TFS]
    assert p(steady, 99.5) < 25 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_leaking_heap_makes_long_marks_on_its_pods_with_gc_counters_rising() -> None:
    spans = table_spans("gc-leak", 1500, 1)  # Jaeger: runtime.go.gc.* counters on the root span
    (cause,) = feast_redis.truth("gc-leak", 1)
    tops = roots(spans)
    leaky = [x for x in tops if x["instance"] in cause.instances]
    other = [x for x in tops if x["instance"] not in cause.instances]
    assert p([x["duration"] for x in leaky], 97) > 1.5 * p([x["duration"] for x in other], 97)

    def pause_per_cycle(xs):
        last = max(xs, key=lambda x: x["end"])["attrs"]
        return last["runtime.go.gc.pause_total_ns"] / last["runtime.go.gc.count"]

    assert pause_per_cycle(leaky) > 0  # counters exist; per pod the pauses of the leaking ones are longer
    by_pod: dict[str, list[dict]] = {}
    for x in tops:
        by_pod.setdefault(x["instance"], []).append(x)
    assert all(pause_per_cycle(by_pod[a]) > 3 * pause_per_cycle(by_pod[b])
               for a in cause.instances for b in by_pod if b not in cause.instances)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_full_producer_buffer_blocks_produce_until_the_broker_recovers() -> None:
    spans = table_spans("kafka-buffer", 1500, 0)
    st = feast_redis.style(0)
    produce = [x["duration"] for x in named(spans, st.produce, "Producer")]
    assert p(produce, 50) < 0.1 * MS and p(produce, 97) > 100 * MS
    steady = [x["duration"] for x in named(table_spans("steady", 1500, 0), st.produce, "Producer")]
    assert max(steady) < 1 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int) -> None:
    def p99(scenario):
        return p([x["duration"] for x in roots(table_spans(scenario, 2000, seed))], 99)

    base = p99("steady")
    for scenario in feast_redis.SINGLES:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    if part == "ndots-dns":
        return len(named(spans, sp.DIAL)) > 0.5 * len(named(spans, sp.PIPE))
    if part == "conntrack-full":
        return any(x["duration"] > 900 * MS for x in named(spans, sp.DIAL))
    if part == "bgsave-fork":
        return max(by_shard(spans)[sp.shard_host(feast_redis.FORK_SHARD)]) > 150 * MS
    if part == "gc-leak":
        cycles = [x for x in roots(spans) if x["events"]]
        pauses = [ev[2]["go.gc.pause_ns"] for x in cycles for ev in x["events"]]
        return max(pauses) > 1 * MS
    if part == "kafka-buffer":
        return max(x["duration"] for x in named(spans, feast_redis.style(seed).produce)) > 50 * MS
    assert part == "tf-batch-burst"
    queue = [int(x["attrs"]["tfs.batching.queue_time_us"]) for x in spans if x["service"] == sp.TFS]
    return p(queue, 95) > 3000


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", feast_redis.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    singles = [feast_redis.truth(x, 0)[0].pattern for x in parts]
    assert [c.pattern for c in feast_redis.truth(pair, 0)] == singles
    both, steady = table_spans(pair, 1500, 0), table_spans("steady", 1500, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
