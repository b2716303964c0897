"""The blind family `mobile-edge` (reference_pipeline/simulate/mobile_edge.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way a lossy cellular link, lost keep-alive
connections, a resolver that drops queries, a CFS quota under a too-large GOMAXPROCS, a GC squeezed by
GOMEMLIMIT, bigger photos, TF Serving's batch timeout, a model rollout, S3 SlowDown or a throttled
DynamoDB partition would produce it (a steady run of the same seed does not). The phones' clocks are
skewed: the server spans are the time reference. Three runs go through the loader; the other mechanisms
are read from the generated tables, 2,000 requests each, shared by the tests of a seed."""

from __future__ import annotations

from functools import cache
from itertools import pairwise

import numpy as np
import pytest

from reference_pipeline.simulate import blind, mobile_edge
from reference_pipeline.simulate import mobile_edge_spans as sp
from reference_pipeline.simulate.mobile_edge_api import PERIOD_NS
from reference_pipeline.simulate.mobile_edge_net import CARRIERS
from tests.blind_support import kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_mobile_edge.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
S = 1e9
FAMILY = "mobile-edge"


def label(resource: dict) -> str:
    """The instance the store names: service.instance.id, host.name:process.pid, or Zipkin's endpoint
    (a phone's has no port)."""
    if "service.instance.id" in resource:
        return resource["service.instance.id"]
    if "process.pid" in resource:
        return f"{resource['host.name']}:{resource['process.pid']}"
    if "net.host.port" in resource:
        return f"{resource['net.host.ip']}:{resource['net.host.port']}"
    return resource.get("net.host.ip", resource["service.name"])


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(mobile_edge, scenario, requests, seed, instance=label)


def run_ns(requests: int, seed: int) -> float:
    return requests / mobile_edge.setup(seed)["rps"] * S


def api_roots(spans, seed: int) -> list[dict]:
    return named(spans, mobile_edge.style(seed).server, "Server", sp.API)


def client_roots(spans, platform: str) -> list[dict]:
    return [x for x in spans if x["parent"] == -1 and x["service"] == sp.SERVICE_OF[platform]]


def network(span: dict) -> dict:
    """(link, carrier) of a phone span, in either convention."""
    a = span["attrs"]
    return {"link": a.get("network.connection.type", a.get("net.host.connection.type")),
            "carrier": a.get("network.carrier.name", a.get("net.host.carrier.name"))}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("mobile-edge")
    runs = {0: ("s3-slowdown", 500), 1: ("dns-resolver-timeout", 600), 2: ("batch-timeout-raise", 400)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=label)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == mobile_edge.SCENARIOS  # open now
    assert blind.MODULES[FAMILY] == "mobile_edge" and FAMILY in blind.available()
    assert sum("+" in sc for sc in mobile_edge.SCENARIOS) == 3 and mobile_edge.SCENARIOS[0] == "steady"
    assert 9 <= len(mobile_edge.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s, st = mobile_edge.setup(seed), mobile_edge.style(seed)
        assert summary["format"] == s["fmt"]
        services = {sp.IOS, sp.ANDROID, sp.API} | ({sp.EDGE} if s["edge"] else set())
        assert {x["service"] for x in spans} == services
        by_id = {x["id"]: x for x in spans}
        phones = [x for x in spans if not x["parent"]]
        assert {x["service"] for x in phones} == {sp.IOS, sp.ANDROID} and len(phones) == summary["requests"]
        servers = [x for x in spans if x["service"] == sp.API and x["kind"] == "Server"]
        assert len(servers) == summary["requests"]
        caller = {by_id[x["parent"]]["service"] for x in servers}  # the edge, or the phone's HTTP span
        assert caller == ({sp.EDGE} if s["edge"] else {sp.IOS, sp.ANDROID})
        http = next(x for x in spans if x["name"].lower() == st.http_client.lower())["attrs"]
        assert ("http.request.method" in http and "server.address" in http) == (s["semconv"] == "new")
        assert ("http.method" in http and "net.peer.name" in http) == (s["semconv"] == "old")
        assert {network(x)["link"] for x in phones} == {"cell", "wifi"}
        names = {x["name"].lower() for x in spans}
        assert (sp.RESIZE in names) == (sp.DECODE in names) == s["internals"]
        assert {sp.PREDICT.lower(), sp.S3_PUT.lower(), st.server.lower()} <= names
        pods = {x["instance"] for x in servers}
        assert pods == set(mobile_edge.api_instances(seed))
        assert ("service.instance.id" in servers[0]["resource"]) == (s["ident"] == "instance-id")
        # the phones' clocks are off: some server spans start before the phone's request did, or end
        # after it ended, by the phone's timestamps; no server span lasts longer than its phone request
        outside = 0
        for x in servers:
            up = x
            while up["service"] not in (sp.IOS, sp.ANDROID):
                up = by_id[up["parent"]]
            outside += x["start"] < up["start"] or x["end"] > up["end"]
            assert x["duration"] < up["duration"]
        assert 0.05 < outside / len(servers) < 0.8
        for scenario in mobile_edge.SCENARIOS:
            for cause in mobile_edge.truth(scenario, seed):
                mine = {x["name"].lower() for x in spans if x["service"] == cause.service}
                assert cause.span.lower() in mine, (scenario, cause)
                assert set(cause.instances) <= pods, (scenario, cause)
                assert cause.stage in (None, "ingress", "preprocessing", "queue", "model_forward",
                                       "downstream")
    with pytest.raises(ValueError, match="unknown mobile-edge scenario"):
        mobile_edge.truth("healthy", 0)
    first, again = mobile_edge.generate("steady", 150, 2), mobile_edge.generate("steady", 150, 2)
    assert first.rows == again.rows and first.span_ids == again.span_ids  # a seed gives the same run


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_s3_slowdown_retries_after_full_jitter_waits_in_one_region_only(loaded) -> None:
    spans, _ = loaded[0]  # OTLP: each attempt's HTTP span under the SDK operation
    by_parent: dict[str, list[dict]] = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    (cause,) = mobile_edge.truth("s3-slowdown", 0)
    retried = []
    for op in named(spans, sp.S3_PUT, "Client"):
        attempts = sorted(by_parent[op["id"]], key=lambda a: a["start"])
        assert 1 <= len(attempts) <= 3
        codes = [a["attrs"]["http.response.status_code"] for a in attempts]
        assert all(c == "503" for c in codes[:-1])
        if len(attempts) > 1:
            retried.append(op)
            waits = [b["start"] - a["end"] for a, b in pairwise(attempts)]
            assert waits[0] < 2 * S + 5 * MS and (len(waits) < 2 or waits[1] < 4 * S + 5 * MS)
    assert len(retried) > 20
    assert {x["instance"] for x in retried} <= set(cause.instances)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_resolver_that_drops_queries_makes_android_wait_its_5_s_timeout_on_one_carrier(loaded) -> None:
    spans, _ = loaded[1]
    by_id = {x["id"]: x for x in spans}
    lookups = [x for x in spans if x["name"].lower() in (sp.DNS["ios"], sp.DNS["android"])]
    slow = [x for x in lookups if x["duration"] > 4 * S]
    assert len(slow) >= 4
    carrier = {"link": "cell", "carrier": CARRIERS[mobile_edge.DNS_CARRIER]}
    for x in slow:  # (the odd healthy query is lost elsewhere too)
        assert x["service"] == sp.ANDROID and x["duration"] > 5 * S and int(x["attrs"]["dns.queries"]) >= 2
    assert np.mean([network(by_id[x["parent"]]) == carrier for x in slow]) > 0.7
    steady = [x for x in spans_of("steady", 2000, 1) if x["name"] in (sp.DNS["ios"], sp.DNS["android"])]
    assert sum(x["duration"] > 4 * S for x in steady) <= 3  # the odd healthy lost query


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_raised_batch_timeout_makes_every_predict_wait_for_a_batch_that_never_fills(loaded) -> None:
    spans, _ = loaded[2]
    waits = [x["duration"] for x in named(spans, sp.PREDICT, "Client")]
    assert p(waits, 10) > 20 * MS and p(waits, 50) > 80 * MS and p(waits, 99) < 230 * MS
    steady = [x["duration"] for x in named(spans_of("steady", 2000, 1), sp.PREDICT, "Client")]
    assert p(steady, 50) < 15 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_cellular_loss_slows_one_carriers_uploads_with_retransmission_timeouts() -> None:
    def upload(scenario):  # the phone's HTTP span minus tagging-api's: the network's share
        spans = spans_of(scenario, 2000, 0)
        by_i = {x["i"]: x for x in spans}
        out: dict[tuple, list[float]] = {}
        for x in api_roots(spans, 0):
            client = by_i[by_i[x["parent"]]["parent"]]  # edge -> phone HTTP span
            net = network(by_i[client["parent"]])
            out.setdefault((net["link"], net["carrier"]), []).append(client["duration"] - x["duration"])
        return out

    lossy, steady = upload("cellular-loss"), upload("steady")
    bad = ("cell", CARRIERS[mobile_edge.LOSS_CARRIER])
    assert p(lossy[bad], 50) > 1.5 * p(steady[bad], 50) and p(lossy[bad], 90) > 2 * p(steady[bad], 90)
    assert max(lossy[bad]) > 3 * S
    for key in lossy:
        if key != bad:
            assert p(lossy[key], 50) == pytest.approx(p(steady[key], 50), rel=0.05), key


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_losing_keep_alive_in_the_background_makes_ios_connect_again_on_almost_every_action() -> None:
    def shares(scenario):
        spans = spans_of(scenario, 2000, 0)
        parents = {x["parent"] for x in spans if x["name"] in (sp.CONNECT["ios"], sp.CONNECT["android"])}
        return {pf: np.mean([r["i"] in parents for r in client_roots(spans, pf)]) for pf in sp.SERVICE_OF}

    lost, steady = shares("background-reconnect"), shares("steady")
    assert lost["ios"] > 0.8 and steady["ios"] < 0.5 and steady["android"] < 0.5
    assert lost["android"] == pytest.approx(steady["android"], abs=0.01)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gomaxprocs_above_the_quota_stalls_the_pod_until_the_next_cfs_period() -> None:
    spans = spans_of("cfs-gomaxprocs", 2000, 0)
    # a call that returned while the pod was throttled is seen by its goroutine at the next period
    stalled = [x["end"] for x in named(spans, sp.PREDICT, "Client") if x["duration"] > 30 * MS]
    assert len(stalled) > 30
    phase = np.asarray(stalled) % PERIOD_NS
    assert np.mean(phase < 0.5 * MS) > 0.9
    steady = [x["duration"] for x in named(spans_of("steady", 2000, 0), sp.PREDICT, "Client")]
    assert p(steady, 99.5) < 30 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_tight_gomemlimit_slows_the_image_work_of_one_regions_pods_only() -> None:
    def work(scenario):
        out: dict[bool, list[float]] = {}
        region = set(mobile_edge.api_instances(0, (mobile_edge.GC_REGION,)))
        for x in named(spans_of(scenario, 2000, 0), sp.DECODE):
            pixels = int(x["attrs"]["image.width"]) * int(x["attrs"]["image.height"])
            out.setdefault(x["instance"] in region, []).append(x["duration"] / pixels)
        return out

    tight, steady = work("gomemlimit-gc"), work("steady")
    assert p(tight[True], 50) > 1.35 * p(steady[True], 50)
    assert p(tight[False], 50) == pytest.approx(p(steady[False], 50), rel=0.08)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_bigger_ios_photos_grow_the_upload_and_the_resize_with_the_pixels() -> None:
    spans = spans_of("camera-upgrade", 2000, 0)
    steady = spans_of("steady", 2000, 0)

    def sizes(run, platform):
        return [int(r["attrs"]["photo.bytes"]) for r in client_roots(run, platform)]

    assert p(sizes(spans, "ios"), 50) > 2 * p(sizes(steady, "ios"), 50)
    assert p(sizes(spans, "android"), 50) == p(sizes(steady, "android"), 50)
    resize = named(spans, sp.RESIZE)
    pixels = np.array([int(x["attrs"]["image.pixels"]) for x in resize]) / 1e6
    slope = np.polyfit(pixels, [x["duration"] / MS for x in resize], 1)[0]
    assert slope > 5 and pixels.max() > 15  # ms per megapixel; up to 24 MP photos


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_rollout_loads_the_new_version_and_its_first_batches_are_slow() -> None:
    spans = spans_of("model-rollout", 2000, 1)
    predict = sorted(named(spans, sp.PREDICT, "Client"), key=lambda x: x["start"])
    versions = {x["attrs"]["model.version"] for x in predict}
    assert versions == {1, 2}
    slow = [x for x in predict if x["duration"] > 250 * MS]
    assert len(slow) >= 6 and all(x["attrs"]["model.version"] == 2 for x in slow)
    late = [x["duration"] for x in predict if x["attrs"]["model.version"] == 2][-100:]
    assert p(late, 90) < 30 * MS  # warmed up
    steady = named(spans_of("steady", 2000, 1), sp.PREDICT, "Client")
    assert p([x["duration"] for x in steady], 99.5) < 40 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_hot_partition_throttles_tag_writes_and_the_sdk_backs_off() -> None:
    spans = spans_of("dynamodb-hot-partition", 2000, 1)  # Jaeger: attempts exported
    children = kids(spans)
    ops = named(spans, sp.DDB_PUT, "Client")
    retried = [op for op in ops if len(children[op["i"]]) > 1]
    assert 0.1 < len(retried) / len(ops) < 0.4
    assert len({x["instance"] for x in retried}) > 10  # every region's pods write to the table
    for op in retried:
        attempts = sorted(children[op["i"]], key=lambda a: a["start"])
        assert all(a["attrs"]["http.status_code"] == 400 for a in attempts[:-1])
        assert attempts[1]["start"] - attempts[0]["end"] < 2 * S + 5 * MS
    failed = [op for op in ops if op["status"] == "Error"]
    assert failed and all(len(children[op["i"]]) == 3 for op in failed)


def _p99(scenario: str, seed: int, service: str, instances=None, q: float = 99) -> float:
    spans = spans_of(scenario, 2000, seed)
    if service in (sp.IOS, sp.ANDROID):
        chosen = [x for x in spans if x["parent"] == -1 and x["service"] == service]
    else:
        chosen = [x for x in api_roots(spans, seed) if instances is None or x["instance"] in instances]
    return p([x["duration"] for x in chosen], q)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("seed", "scenarios"), [(0, mobile_edge.SINGLES[:6]), (1, mobile_edge.SINGLES[6:])])
def test_every_planted_cause_moves_the_p99_of_the_requests_it_acts_on(seed: int, scenarios) -> None:
    """Measured on the requests of the service (and instances) the cause acts on: the phone's root span
    for the phones' causes, tagging-api's SERVER span for the server's (the phones' uploads dominate
    the end-to-end tail, a server cause moves it much less)."""
    for scenario in scenarios:
        for cause in mobile_edge.truth(scenario, seed):
            instances = set(cause.instances) if cause.instances else None
            base = _p99("steady", seed, cause.service, instances)
            moved = _p99(scenario, seed, cause.service, instances)
            if scenario == "background-reconnect":
                # losing keep-alive adds ~2-8 round trips to most iOS actions, but the steady tail is
                # already made of new connections (a session's first action): its p99 moves least,
                # its p90 more
                assert moved > 1.03 * base and _p99(scenario, seed, cause.service, q=90) > 1.15 * _p99(
                    "steady", seed, cause.service, q=90)
            else:
                assert moved > 1.3 * base, (scenario, cause)


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    if part == "cellular-loss":
        return max(x["duration"] for x in named(spans, mobile_edge.style(seed).http_client)) > 8 * S
    if part == "dns-resolver-timeout":
        return sum(x["duration"] > 5 * S for x in named(spans, sp.DNS["android"])) >= 3
    if part == "cfs-gomaxprocs":  # calls whose return waited for the next CFS period
        return sum(x["duration"] > 30 * MS and x["end"] % PERIOD_NS < 0.5 * MS
                   for x in named(spans, sp.PREDICT)) > 20
    if part == "gomemlimit-gc":  # decode time per pixel (mark assists) in one region's pods
        region = set(mobile_edge.api_instances(seed, (mobile_edge.GC_REGION,)))
        per_px: dict[bool, list[float]] = {True: [], False: []}
        for x in named(spans, sp.DECODE):
            pixels = int(x["attrs"]["image.width"]) * int(x["attrs"]["image.height"])
            per_px[x["instance"] in region].append(x["duration"] / pixels)
        return p(per_px[True], 50) > 1.2 * p(per_px[False], 50)
    if part == "model-rollout":
        return sum(x["duration"] > 250 * MS for x in named(spans, sp.PREDICT)) >= 5
    assert part == "s3-slowdown"
    return sum(x["duration"] > 1 * S for x in named(spans, sp.S3_PUT)) >= 10


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", mobile_edge.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    truth = [c.pattern for c in mobile_edge.truth(pair, 0)]
    assert truth == [c.pattern for x in parts for c in mobile_edge.truth(x, 0)]
    both, steady = spans_of(pair, 2000, 0), spans_of("steady", 2000, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
