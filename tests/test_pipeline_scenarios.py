"""Unit tests of the reference pipeline's scenarios: each plants its cause in the service and load
settings."""

from __future__ import annotations

import pytest

from reference_pipeline import span_model as sm
from reference_pipeline.scenarios import LoadShape, ServiceConfig, configure


@pytest.mark.parametrize(
    ("scenario", "check"),
    [
        ("steady", lambda s, load: s.warm_model and s.cache_prefill and s.gc_freeze and not load.bursts),
        ("burst", lambda s, load: load.bursts and load.bursts[0][2] > 1),
        (
            "gc-pressure",
            lambda s, load: s.gc_live_records > 0 and s.gc_nodes_per_request > 0 and not s.gc_freeze,
        ),
        ("lock-contention", lambda s, load: s.heavy_monitor and s.post_threads >= 4),
        ("cold-cache", lambda s, load: not s.cache_prefill and s.cache_capacity < s.n_entities),
        ("key-expiry", lambda s, load: s.cache_jitter == 0 and s.cache_ttl_s < load.duration_s),
        ("cold-start", lambda s, load: not s.warm_model and not s.cache_prefill),
    ],
)
def test_each_scenario_plants_its_cause(scenario, check) -> None:
    service, load = ServiceConfig(), LoadShape(rps=10, duration_s=10)
    downstream = configure(scenario, service, load)
    assert check(service, load)
    assert service.scenario == scenario
    assert (downstream.delay == "heavy-tail") == (scenario == "slow-downstream")


def test_gc_freeze_overrides_the_scenario_and_keeps_its_work() -> None:
    from reference_pipeline.runner import RunOptions, service_config

    planted, _, _ = service_config(RunOptions(scenario="gc-pressure"))
    frozen, _, _ = service_config(RunOptions(scenario="gc-pressure", gc_freeze=True))
    assert not planted.gc_freeze and frozen.gc_freeze
    assert (frozen.gc_live_records, frozen.gc_nodes_per_request) == (
        planted.gc_live_records,
        planted.gc_nodes_per_request,
    )
    steady, _, _ = service_config(RunOptions(scenario="steady", gc_freeze=False))
    assert not steady.gc_freeze


def test_every_span_model_scenario_is_configurable() -> None:
    for scenario in sm.SCENARIOS:
        configure(scenario, ServiceConfig(), LoadShape(rps=1, duration_s=1))
    with pytest.raises(ValueError, match="unknown scenario"):
        configure("nope", ServiceConfig(), LoadShape(rps=1, duration_s=1))


def test_bursts_are_sized_above_the_measured_capacity() -> None:
    from reference_pipeline.scenarios import size_bursts

    load = LoadShape(rps=8, duration_s=20)
    service = ServiceConfig()
    configure("burst", service, load)
    assert load.bursts[0][2] == 6.0  # 48 req/s: under a ~75 req/s service
    assert service.announce_capacity and not ServiceConfig().announce_capacity
    size_bursts(load, capacity_rps=60.0)
    assert load.rps * load.bursts[0][2] == pytest.approx(120.0)  # twice the capacity
    size_bursts(load, capacity_rps=2.0)  # a slow model: 6 × rps is already above twice its capacity
    assert load.rps * load.bursts[0][2] == pytest.approx(120.0)
    steady = LoadShape(rps=8, duration_s=20)
    size_bursts(steady, capacity_rps=60.0)
    assert steady.bursts == []
    size_bursts(load, capacity_rps=0.0)  # not measured (lazy load): unchanged
    assert load.rps * load.bursts[0][2] == pytest.approx(120.0)


def test_gc_off_keeps_gc_pressures_work_and_turns_the_collector_off() -> None:
    from reference_pipeline.runner import RunOptions, service_config

    planted, _, _ = service_config(RunOptions(scenario="gc-pressure"))
    off, _, _ = service_config(RunOptions(scenario="gc-pressure", gc_collect=False))
    assert planted.gc_collect and not off.gc_collect
    assert (off.gc_live_records, off.gc_nodes_per_request, off.gc_freeze) == (
        planted.gc_live_records,
        planted.gc_nodes_per_request,
        planted.gc_freeze,
    )


def test_explanation_trees_leaving_the_ring_are_freed_without_the_collector() -> None:
    # gc-pressure's pair without pauses runs with the collector off: the trees that leave the ring
    # must not be left as cyclic garbage (a leak of ~2 MB per request, and a heap that grows)
    import gc

    from reference_pipeline.postprocess import ExplanationLog

    log = ExplanationLog(live_records=10, nodes_per_request=200, ring=5)
    gc.collect()
    gc.disable()
    try:
        for i in range(20):
            log.record([0.5, 0.25, 0.125], score=i / 20)
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert len(log.ring) == 5
    assert unreachable < 200, f"{unreachable} objects left for the collector"
