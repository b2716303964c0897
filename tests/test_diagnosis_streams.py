"""Streamed requests (streams.py): one trace is an utterance spoken into a gateway that streams it to a
decoder as it comes; at the speaker's end the gateway's final span waits for the decoder's result and
writes it to a database. The root lasts as long as the speech; what the user feels is the end of the
speech to the final result. Negative twins: a fan-out that merges its calls' answers at the end, and
batches whose time tracks their item count (worked through in the request, or by one call to a worker)."""

from __future__ import annotations

from tailscope.analysis.diagnosis import streams
from tailscope.analysis.diagnosis.runner import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

N = 600


def _speech(seed: int, chunks: bool = False, size: bool = True, slow_db: bool = False):
    """`chunks`: the decoder's chunks as child spans every 100 ms; `size`: the root records the audio's
    length; `slow_db`: the final INSERT is slow for 6 % of the utterances."""
    b = TraceBuilder(seed)
    for t in b.arrivals(N, 20.0):
        b.new_trace()
        gw, dec = f"gw/{int(b.rng.integers(3))}", f"dec/{int(b.rng.integers(4))}"
        audio = float(b.rng.uniform(1500.0, 9000.0))
        attrs = {"audio__duration_ms": int(audio)} if size else {}
        root = b.span(None, "Recognize", "Server", gw, t, 0.0, **attrs)
        call = b.span(root, "Decode", "Client", gw, t + 0.5, 0.0)
        srv = b.span(call, "Decode", "Server", dec, t + 0.7, 0.0)
        if chunks:
            for k in range(int(audio // 100)):
                b.span(srv, "chunk", "Internal", dec, t + 100.0 * (k + 1) + lognormal(b.rng, 2.0, 0.3),
                       lognormal(b.rng, 4.0, 0.3))
        spoken = t + audio
        fin_ms = lognormal(b.rng, 40.0, 0.25)
        fin = b.span(srv, "Finalize", "Internal", dec, spoken + 0.5, fin_ms)
        b.span(fin, "rescore", "Internal", dec, spoken + 1.0, fin_ms - 1.0)
        done = spoken + 0.5 + fin_ms
        b.set_end(srv, done)
        b.set_end(call, done + 0.3)
        db = lognormal(b.rng, 3.0, 0.3) * (30.0 if slow_db and b.rng.random() < 0.06 else 1.0)
        eou = b.span(root, "Finish", "Internal", gw, spoken, 0.0)
        b.span(eou, "INSERT", "Client", gw, done + 0.4, db)
        b.set_end(eou, done + 0.5 + db)
        b.set_end(root, done + 0.6 + db)
    return b.frame()


def test_a_stream_is_read_from_its_size_or_its_chunks_cadence() -> None:
    found = streams.cut(_speech(1))
    assert found is not None and found[2] == "size"
    found = streams.cut(_speech(1, chunks=True, size=False))
    assert found is not None and found[2] == "cadence"
    assert streams.cut(_speech(1, size=False)) is None  # nothing says the input was paced


def test_a_streams_final_result_is_diagnosed_not_its_length() -> None:
    whole = diagnose_frame(_speech(2, slow_db=True))
    # before: one population of whole utterances, whose tail is the longest speech (no finding >= 0.5
    # on the INSERT); now the time from the end of speech to the final result
    assert [p["unit"] for p in whole.populations] == ["stream"]
    top = whole.findings[0]
    assert top.pattern == "slow_dependency" and top.span_name == "INSERT" and top.confidence >= 0.5
    assert "end of their input to the final result" in top.evidence["summary"]
    assert whole.populations[0]["tail"]["p99_ms"] < 1000.0  # not the speech's 9 s


def test_a_healthy_stream_is_quiet() -> None:
    whole = diagnose_frame(_speech(3))
    assert not [fd for fd in whole.findings if fd.confidence >= 0.5 and fd.pattern != "compute_bound"]


def _fanout(seed: int):
    """A request that calls eight shards at once, then merges their answers in a span that ends it."""
    b = TraceBuilder(seed)
    for t in b.arrivals(N, 50.0):
        b.new_trace()
        api = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "search", "Server", api, t, 0.0, shards=8)
        last = t
        for k in range(8):
            d = lognormal(b.rng, 30.0, 0.4)
            b.span(root, "shard", "Client", api, t + 0.2 + 0.01 * k, d)
            last = max(last, t + 0.2 + d)
        merge = lognormal(b.rng, 2.0, 0.3)
        b.span(root, "merge", "Internal", api, last + 0.1, merge)
        b.set_end(root, last + 0.2 + merge)
    return b.frame()


def _batch(seed: int, worker: bool):
    """A batch of 20-400 items: each item's work back to back in the request (or, `worker`, one call to
    a worker whose time grows with the items), then the results written in a span that ends it."""
    b = TraceBuilder(seed)
    for t in b.arrivals(N, 10.0):
        b.new_trace()
        api = f"api/{int(b.rng.integers(3))}"
        items = int(b.rng.integers(20, 400))
        root = b.span(None, "batch", "Server", api, t, 0.0, items=items)
        at = t + 0.5
        if worker:
            d = sum(lognormal(b.rng, 3.0, 0.2) for _ in range(items))
            call = b.span(root, "score", "Client", api, at, d)
            b.span(call, "score", "Server", f"worker/{int(b.rng.integers(4))}", at + 0.2, d - 0.4)
            at += d
        else:
            for _ in range(items):
                d = lognormal(b.rng, 3.0, 0.2)
                b.span(root, "item", "Internal", api, at, d)
                at += d + 0.01
        write = lognormal(b.rng, 5.0, 0.3)
        b.span(root, "write", "Client", api, at + 0.1, write)
        b.set_end(root, at + 0.2 + write)
    return b.frame()


def test_a_fan_out_or_a_batch_is_no_stream() -> None:
    assert streams.cut(_fanout(4)) is None  # the merge is no late final span: the calls are short
    # a batch's time tracks its size as a stream's does, yet its items run back to back (no idle
    # cadence) and its call to a worker ends before the results are written (no call open across)
    assert streams.cut(_batch(5, worker=False)) is None
    assert streams.cut(_batch(5, worker=True)) is None
    assert not diagnose_frame(_batch(5, worker=True)).populations


def test_the_report_says_the_streams_are_read_from_their_inputs_end() -> None:
    from app.views.diagnosis_shares import population_note
    from tailscope.cli.diagnose_cmd import render_text

    result = diagnose_frame(_speech(2, slow_db=True)).to_dict()
    for text in (render_text(result), population_note(result)):
        assert "from the end of their input to the final result" in text and "gw Recognize" in text
    assert "units of work" not in render_text(result).splitlines()[0]
    assert population_note({"populations": []}) == ""  # a run diagnosed as its requests: no note
