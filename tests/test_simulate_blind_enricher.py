"""The blind family `event-enricher` (reference_pipeline/simulate/event_enricher.py): it generates in
each of its formats and consumer modes, loads through the real loader, its truth names spans, services
and instances the run has, and each planted mechanism shows in the timings the way the broker, the
interpreter or the services would produce it (and a steady run of the same seed does not)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from reference_pipeline.simulate.blind import scenarios, truth
from reference_pipeline.simulate.event_enricher import BROKERS, SCENARIOS, setup
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_enricher.py::test_every_format_and_consumer_mode_loads_and_the_truth_names_what_the_run_has[0]",
    "tests/test_simulate_blind_enricher.py::test_every_format_and_consumer_mode_loads_and_the_truth_names_what_the_run_has[1]",
    "tests/test_simulate_blind_enricher.py::test_every_format_and_consumer_mode_loads_and_the_truth_names_what_the_run_has[2]",
    "tests/test_simulate_blind_enricher.py::test_every_format_and_consumer_mode_loads_and_the_truth_names_what_the_run_has[4]",
)

MS = 1e6
FAMILY = "event-enricher"


def load(tmp: Path, scenario: str, requests: int, seed: int) -> tuple[list[dict], dict]:
    """The run's spans as the store holds them (links included), after the loader read the file."""
    spans, summary = load_run(tmp, FAMILY, scenario, requests, seed, lists=True)
    assert summary["format"] == setup(seed)["fmt"]
    return spans, summary


def instance(span: dict) -> str:
    """The truth's instance label: host.name:process.pid, a pod's name, or a Zipkin endpoint's ip:port."""
    r = span["resource"]
    if "net.host.ip" in r:
        return f"{r['net.host.ip']}:{r['net.host.port']}"
    return r.get("k8s.pod.name") or f"{r['host.name']}:{r['process.pid']}"


def named(spans: list[dict], name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"].lower() == name.lower() and (kind is None or s["kind"] == kind)]


def process_name(seed: int) -> str:
    return f"process {BROKERS[setup(seed)['broker']]['queue']}"


def broker_waits(spans: list[dict], seed: int) -> list[tuple[float, float]]:
    """(publish time, publish end -> process start) per message: through the parent (one message per
    process span) or through the links (a batch's process span links each message's producer; in
    Jaeger the first of them comes back as the parent, as the Collector's translator reads it)."""
    by_id = {s["id"]: s for s in spans}
    out = []
    for proc in named(spans, process_name(seed), "Consumer"):
        ids = {link["SpanId"] for link in proc["links"]} | ({proc["parent"]} if proc["parent"] else set())
        out += [(by_id[i]["start"], proc["start"] - by_id[i]["end"]) for i in ids]
    return sorted(out)


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


@pytest.mark.parametrize("seed", [0, 1, 2, 4])
def test_every_format_and_consumer_mode_loads_and_the_truth_names_what_the_run_has(
        tmp_path: Path, seed: int) -> None:
    s = setup(seed)
    spans, summary = load(tmp_path, "autoscale-burst", 600, seed)
    assert summary["format"] == s["fmt"] and scenarios(FAMILY) == SCENARIOS
    services = {x["service"] for x in spans}
    peer = {"profile-store"} if s["peer_traced"] else set()
    assert services == {"event-intake", "enricher-worker"} | peer
    producers = named(spans, f"{BROKERS[s['broker']]['op']} {BROKERS[s['broker']]['dest']}", "Producer")
    consumers = named(spans, process_name(seed), "Consumer")
    assert len(producers) == 600 and all(x["attrs"]["messaging.system"] == s["broker"] for x in producers)
    if s["batch"]:  # a new trace per batch, a link per message, no parent (Jaeger: the first link's
        # target comes back as the parent too, as the Collector's translator reads FOLLOWS_FROM)
        jaeger = s["fmt"] == "jaeger"
        assert all((c["parent"] != "") == jaeger for c in consumers)
        assert sum(len(c["links"]) for c in consumers) == 600
        assert max(len(c["links"]) for c in consumers) > 1 and len(named(spans, "handle_event")) == 600
    else:  # the producer's child, in its trace, started after it ended
        by_id = {x["id"]: x for x in spans}
        assert len(consumers) == 600
        assert all(by_id[c["parent"]]["kind"] == "Producer" and c["start"] > by_id[c["parent"]]["end"]
                   and c["trace"] == by_id[c["parent"]]["trace"] for c in consumers)
    roots = {x["trace"]: x for x in named(spans, "POST /v1/events", "Server")}
    assert all(x["end"] >= x["start"] and roots[x["trace"]]["end"] > x["end"] for x in producers)
    writes = {x["attrs"]["server.address"] for x in named(spans, "POST", "Client")}
    for scenario in SCENARIOS:
        for cause in truth(FAMILY, scenario, seed):
            where = [x for x in spans if x["service"] == cause["service"]]
            assert named(spans, cause["span"]) and (where or cause["service"] in writes)
            if where:  # the untraced peer is seen only as the writes' server.address
                assert set(cause["instances"]) <= {instance(x) for x in where}
            assert cause["instances"] and set(cause["accept"]) | set(cause["side"]) <= {"queueing"}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_backlog_grows_the_broker_wait_in_the_burst_and_leaves_the_work_alone(tmp_path: Path) -> None:
    for seed in (1, 0):  # single-message consumers (Jaeger), then batches with links (OTLP)
        spans, summary = load(tmp_path, "consumer-backlog", 1500, seed)
        steady, _ = load(tmp_path, "steady", 1500, seed)
        assert [c["pattern"] for c in summary["truth"]] == ["queueing"]
        waits = broker_waits(spans, seed)
        sent = np.array([t for t, _ in waits])
        wait = np.array([w for _, w in waits])
        before = slice(0, len(waits) // 5)  # the first bursts starts at 30 % of the run's time
        peak = int(np.argmax(wait))
        assert wait.max() > 300 * MS > 60 * MS > p(wait[before], 99)
        # what led up to the peak: publishing well above the rate before the burst
        rate_before = (before.stop - 1) / (sent[before.stop - 1] - sent[0])
        rate_peak = 100 / (sent[peak] - sent[peak - 100])
        assert rate_peak > 1.5 * rate_before
        assert np.median(wait[-len(waits) // 10:]) < 3 * np.median(wait[before])  # drained after it
        assert p([w for _, w in broker_waits(steady, seed)], 99) < 120 * MS
        work = "handle_event" if setup(seed)["batch"] else process_name(seed)
        assert p([x["duration"] for x in named(spans, work)], 90) == pytest.approx(
            p([x["duration"] for x in named(steady, work)], 90), rel=0.2)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gc_pauses_stretch_the_message_in_flight_and_are_reported_on_seed_1_only(tmp_path: Path) -> None:
    paused, summary = load(tmp_path, "worker-gc", 1200, 1)
    steady, _ = load(tmp_path, "steady", 1200, 1)
    assert summary["truth"][0]["pattern"] == "gc_pause"
    proc = named(paused, process_name(1), "Consumer")
    long_gc = [x for x in proc if any(e["Attributes"].get("gc.generation") == "2" for e in x["events"])]
    assert len(long_gc) > 20
    assert min(x["duration"] for x in long_gc) > 60 * MS > p([x["duration"] for x in proc], 50)
    assert p([x["duration"] for x in named(steady, process_name(1))], 99) < 60 * MS
    # a pause stretches CPU work (predict) as well as I/O whose reply came during it, on every step
    for name in ("predict", "POST"):
        assert p([x["duration"] for x in named(paused, name)], 99.5) > 3 * p(
            [x["duration"] for x in named(steady, name)], 99.5)
    quiet, _ = load(tmp_path, "worker-gc", 300, 2)  # Zipkin, no GC reporting
    assert not any(x["events"] for x in quiet)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_autoscaled_workers_start_cold_and_the_old_ones_stay_warm(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "autoscale-burst", 2000, 2)
    causes = {c["pattern"]: c for c in summary["truth"]}
    assert set(causes) == {"queueing", "cold_start"}
    predict = named(spans, "predict")
    for worker in causes["cold_start"]["instances"]:
        mine = sorted((x for x in predict if instance(x) == worker), key=lambda x: x["start"])
        assert len(mine) >= 12
        assert mine[0]["duration"] > 500 * MS > 5 * np.median([x["duration"] for x in mine[-4:]])
    old = [x for x in predict if instance(x) in causes["queueing"]["instances"]]
    assert max(x["duration"] for x in old) < 60 * MS
    assert max(w for _, w in broker_waits(spans, 2)) > 300 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_slow_writes_are_the_peers_tail(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "slow-write", 1200, 2)  # the peer traced (Zipkin)
    steady, _ = load(tmp_path, "steady", 1200, 2)
    assert summary["truth"][0]["service"] == "profile-store"
    server = {x["parent"]: x for x in named(spans, "POST /v1/profiles/{id}/signals", "Server")}
    calls = named(spans, "POST", "Client")
    assert p([x["duration"] for x in calls], 99) > 10 * p([x["duration"] for x in named(steady, "POST")], 99)
    slow = [c for c in calls if c["duration"] > 40 * MS]
    assert len(slow) > 50 and all(server[c["id"]]["duration"] > 0.9 * c["duration"] for c in slow)
    assert p([x["duration"] for x in named(spans, "predict")], 99) < 30 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_key_expiry_sends_lookups_to_the_postgres_fallback(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "key-expiry", 1500, 0)
    assert summary["truth"][0]["pattern"] == "cache_miss"
    kids: dict[str, list[dict]] = {}
    for x in spans:
        kids.setdefault(x["parent"], []).append(x)
    lookups = sorted(named(spans, "features.lookup"), key=lambda x: x["start"])
    missed = np.array([any(k["attrs"].get("db.system") == "postgresql" for k in kids[x["id"]])
                       for x in lookups])
    assert all(any(k["attrs"].get("db.system") == "redis" for k in kids[x["id"]]) for x in lookups)
    third = len(lookups) // 3
    assert missed[: third - 50].mean() < 0.1 < 0.4 < missed[third + 50 :].mean()
    duration = np.array([x["duration"] for x in lookups])
    assert np.median(duration[missed]) > 5 * MS + np.median(duration[~missed])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_steady_runs_tail_is_no_planted_mechanism(tmp_path: Path) -> None:
    """Steady's truth says nothing is planted: its few misses (keys newer than the bulk load) are not
    what its slowest messages are made of."""
    for seed in (1, 2):
        spans, summary = load(tmp_path, "steady", 2000, seed)
        assert summary["truth"] == []
        by_id = {x["id"]: x for x in spans}
        fallback = {by_id[x["parent"]]["parent"] for x in named(spans, "SELECT features.user_profile")}
        proc = named(spans, process_name(seed))
        slowest = sorted(proc, key=lambda x: x["duration"])[-len(proc) // 100:]
        assert len(fallback) < 0.01 * len(proc)
        assert sum(x["id"] in fallback for x in slowest) < 0.3 * len(slowest)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_heavy_model_dominates_and_grows_with_the_features(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "heavy-model", 600, 1)
    assert summary["truth"][0]["pattern"] == "compute_bound"
    predict = named(spans, "predict")
    proc = named(spans, process_name(1))
    assert sum(x["duration"] for x in predict) > 0.7 * sum(x["duration"] for x in proc)
    features = [int(x["attrs"]["event.features"]) for x in predict]
    assert np.corrcoef(features, [x["duration"] for x in predict])[0, 1] > 0.6


def test_an_unknown_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event-enricher scenario 'gc-pressure'"):
        truth(FAMILY, "gc-pressure", 0)
