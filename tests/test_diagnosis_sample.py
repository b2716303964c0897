"""A sampled diagnosis (a run above `max_spans` read as the requests of a few time windows, laid end to
end) names the same top cause as the full read, says what it read and its sampling error, and reads
only the windows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tailscope.analysis.diagnosis import diagnose, load
from tailscope.analysis.diagnosis.load import load_frame
from tailscope.analysis.diagnosis.sample import GRID_NS, MIN_WINDOWS, WINDOW_NS, plan
from tailscope.cli.main import main
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.store.interface import SPAN_WINDOWS
from tests.app_data import raw_simulated_store

pytest.importorskip("reference_pipeline.simulate.api")  # the store is the simulator's runs

REQUESTS = 6_000  # about 78,000 spans, 15 s of traffic
MAX_SPANS = 30_000  # a sample of about 2,300 requests in 11 windows of 0.5 s
SCENARIOS = ("gc-pressure", "cold-start", "burst")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    db = tmp_path_factory.mktemp("sample") / "store.duckdb"
    return Store(raw_simulated_store(db, [(s, s, REQUESTS, 40 + i) for i, s in enumerate(SCENARIOS)]))


def test_windows_spread_over_the_run_on_the_grid() -> None:
    start, end = 10**18, 10**18 + 3600 * 10**9  # an hour, 100 M spans, read as about 1 M
    sample = plan(100_000_000, start, end, 1_000_000)
    assert sample is not None and MIN_WINDOWS <= len(sample.starts) <= SPAN_WINDOWS
    assert sample.length_ns >= WINDOW_NS  # long windows: few row groups touched
    assert sample.starts[0] == start  # an instance's first requests (a cold start) are read
    assert end - (sample.starts[-1] + sample.length_ns) < len(sample.starts) * GRID_NS  # ... and its last
    assert sample.length_ns % GRID_NS == 0 and (sample.shifts() % GRID_NS == 0).all()  # a CFS period's phase
    assert np.all(np.diff(sample.starts) >= sample.length_ns)  # no request read twice
    assert 0.009 < sample.fraction <= 0.011
    short = plan(78_000, start, start + 15 * 10**9, 30_000)  # 15 s of traffic: 8 windows of 0.7 s
    assert short is not None and len(short.starts) == MIN_WINDOWS
    assert plan(1_000, start, end, 300_000) is None  # a small run is read whole
    assert plan(10**6, start, end, 0) is None  # 0: always whole


def test_the_read_holds_the_windows_requests_whole_and_end_to_end(store: Store) -> None:
    with store.reading() as conn:
        full = load_frame(conn, "gc-pressure", max_spans=None)
        sampled = load_frame(conn, "gc-pressure", max_spans=MAX_SPANS)
    sample = sampled.sample
    assert sample is not None and full.sample is None
    assert MAX_SPANS * 0.8 < len(sampled) < MAX_SPANS * 1.2  # the read is the sample's size, not the run's
    # every request read has all its spans: as many spans per request as the full read's
    spans_per_request = np.bincount(sampled.request[sampled.request >= 0])
    assert np.median(spans_per_request) == np.median(np.bincount(full.request[full.request >= 0]))
    # laid end to end: request starts cover the joined windows without a gap longer than a second
    starts = np.sort(sampled.requests.start)
    assert starts[-1] < len(sample.starts) * sample.length_ns + 0.1e9  # (a root starts after its client)
    assert np.diff(starts).max() < 1e9
    assert sampled.cut_requests == 0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sampled_diagnosis_names_the_same_top_cause_as_the_full_read(store: Store, scenario: str) -> None:
    full = diagnose(store, scenario, max_spans=0)
    sampled = diagnose(store, scenario, max_spans=MAX_SPANS)
    assert not full.sampling and sampled.sampling
    top_full, top_sampled = full.findings[0], sampled.findings[0]
    found = [(f.pattern, round(f.confidence, 2)) for f in sampled.findings]
    assert top_sampled.pattern == top_full.pattern, found
    assert top_sampled.confidence >= 0.5
    named = {f.pattern for f in full.findings if f.confidence >= 0.5}
    assert {f.pattern for f in sampled.findings if f.confidence >= 0.5} <= named | {"compute_bound"}
    # the stated sampling error covers the full read's figure
    lo, hi = sampled.sampling["p99_ms_95ci"]
    assert lo <= full.tail["p99_ms"] <= hi, (sampled.sampling, full.tail)


def test_the_report_and_json_state_the_sample_and_its_error(store: Store, capsys) -> None:
    db = str(store.path)
    args = ["diagnose", "--db", db, "--run", "gc-pressure"]
    assert main([*args, "--max-spans", str(MAX_SPANS), "--json"]) == 0
    sampling = json.loads(capsys.readouterr().out)["sampling"]
    assert sampling["spans_in_run"] > sampling["spans_read"] > 0
    assert sampling["windows"] >= 2 and sampling["tail_requests"] > 0
    assert sampling["excess_ms_95ci"][0] <= sampling["excess_ms_95ci"][1]
    assert main([*args, "--max-spans", str(MAX_SPANS)]) == 0
    assert "sampled:" in capsys.readouterr().out
    assert main([*args, "--max-spans", "0", "--json"]) == 0
    assert "sampling" not in json.loads(capsys.readouterr().out)


def test_the_cli_default_is_the_samples() -> None:
    from tailscope.analysis.diagnosis import sample
    from tailscope.cli import diagnose_cmd

    assert diagnose_cmd.DEFAULT_MAX_SPANS == sample.DEFAULT_MAX_SPANS


def _resampled_by_sorting(latency: np.ndarray, window: np.ndarray, windows: int, seed: int) -> dict:
    """The sampling error the plain way: each resample's requests concatenated and sorted."""
    from tailscope.analysis.diagnosis.sample import BOOTSTRAP
    from tailscope.analysis.diagnosis.stats import tail_split

    rng = np.random.default_rng(seed)
    members = [np.nonzero(window == w)[0] for w in range(windows)]
    p99s, excesses = [], []
    for _ in range(BOOTSTRAP):
        idx = np.concatenate([members[w] for w in rng.integers(0, windows, windows).tolist()])
        if len(idx) < 2:
            continue
        lat = np.sort(latency[idx].astype(np.float64))
        lo, hi, p99 = np.quantile(lat, [0.25, 0.75, 0.99])
        body = lat[np.searchsorted(lat, lo) : np.searchsorted(lat, hi, side="right")]
        tail = lat[np.searchsorted(lat, p99) :]
        p99s.append(p99)
        excesses.append(tail.mean() - body.mean() if len(body) and len(tail) else 0.0)
    lo, hi = np.percentile(excesses, [2.5, 97.5])
    p_lo, p_hi = np.percentile(p99s, [2.5, 97.5])
    return {
        "p99_ms_95ci": [round(float(p_lo) / 1e6, 3), round(float(p_hi) / 1e6, 3)],
        "excess_ms_95ci": [round(float(lo) / 1e6, 3), round(float(hi) / 1e6, 3)],
        "excess_relative_error": round(float(np.std(excesses)) / max(tail_split(latency).excess_ns, 1.0), 4),
        "tail_requests": int(tail_split(latency).tail.sum()),
    }


@pytest.mark.parametrize("seed", range(6))
def test_the_sampling_error_is_the_plain_resamples(seed: int) -> None:
    # sorted once and weighed by window counts, it is what sorting each resample gives, to the digit
    from tailscope.analysis.diagnosis.sample import sampling_error

    rng = np.random.default_rng(seed)
    n, windows = int(rng.integers(50, 5000)), int(rng.integers(1, 20))
    latency = (rng.lognormal(17, 0.6, n) if seed % 2 else rng.integers(1, 40, n) * 1_000_000).astype(np.int64)
    window = rng.integers(0, windows, n)
    expected = _resampled_by_sorting(latency, window, windows, seed)
    assert sampling_error(latency, window, windows, seed) == expected


def test_the_attribute_scan_stops_after_each_windows_last_span_kept(store: Store, monkeypatch) -> None:
    """The names' attribute scan reads each window up to its last span the frame kept, not its whole
    margin (the other requests' spans there are dropped anyway), and gives the frame's spans the same
    attributes as a scan of the whole margins."""
    captured = {}
    original = load._attribute_source

    def capture(conn, run, span_keys, plan=None, name_spans=None, scan_windows=None):
        captured.update(keys=span_keys, name_spans=name_spans, scan_windows=scan_windows)
        return original(conn, run, span_keys, plan, name_spans, scan_windows)

    monkeypatch.setattr(load, "_attribute_source", capture)
    with store.reading() as conn:
        frame = load_frame(conn, "gc-pressure", max_spans=MAX_SPANS)
        margins, cut = frame.sample.read_windows(), captured["scan_windows"]
        assert len(cut) == len(margins)
        pairs = zip(cut, margins, strict=True)
        assert all(a == first and first < end <= to for (a, end), (first, to) in pairs)
        assert sum(end for _, end in cut) < sum(to for _, to in margins)  # margins cut short
        whole = original(conn, "gc-pressure", captured["keys"], frame.sample, captured["name_spans"])
        for code, name in enumerate(frame.names):
            attributes, expected = frame.attributes(code), whole(name)
            assert list(attributes) == list(expected)
            for key, (idx, values) in expected.items():
                assert np.array_equal(attributes[key][0], idx) and attributes[key][1] == values
