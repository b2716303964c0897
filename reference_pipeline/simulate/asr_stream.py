"""Blind family `asr-stream`: streaming speech recognition for a call-centre product
(asr_stream_flow.py: the run in time order; asr_stream_decoder.py: the decoders', Redis', Postgres' and
the JVM's physics; asr_stream_spans.py: the conventions and the spans).

One trace is one utterance. The client streams 100 ms audio chunks in real time over a bidirectional
gRPC stream to `asr-gateway` (Kotlin, gRPC-java on Netty, G1; one pod per client connection); the
trace ends when the utterance's final transcript has been written back. The root SERVER span
(`asr.v1.Recognizer/StreamingRecognize`) lasts as long as the audio (seconds: not latency). What users
feel is the finalization latency, from the client's half-close after the last chunk to the final
result: the gateway records it as `EndOfUtterance` (a `@WithSpan` method that runs from the half-close
to the final message's write), the decoder as `Finalize`.

The gateway routes each stream by consistent hash of its id to one `asr-decoder` process (C++, one
per GPU host, 4-8 hosts) over a gRPC stream (`asr.decoder.v1.Decoder/Decode`, CLIENT and SERVER).
A decoder batches the chunks waiting every 25-40 ms into one GPU micro-batch of a streaming conformer
(a fixed launch cost plus a cost per chunk; a chunk waits for its stream's previous chunk: the state
carries), then runs each chunk's beam search on one of its CPU threads (cost with the beam width). At
the half-close it flushes the pending chunks (`decoder.flush`), then finalizes: the customer's phrase
hints (`PhraseHints::Lookup`: in-process, 5 min TTL; a miss is an `HGETALL` on one Redis primary and a
compile of the hints, no single flight), LM rescoring of the n-best (`lm.rescore`, CPU, grows with
the words and the beam) and a punctuation model on the GPU (`punctuate`). Back at the gateway the
transcript is INSERTed into Postgres (synchronous commit: WAL group commit, one disk) and the final
message written to the client under HTTP/2 flow control (a client that reads slowly leaves the
window shut: the write waits for its next read). A drained decoder's streams move to the hosts of the
ring's next virtual nodes (spread over the others), which re-decode the audio so far (`StateRebuild`);
a fresh decoder process loads its CUDA modules lazily on its first batch and grows its allocator's pool
for a while.

Healthy noise: network jitter; 5 % of streams with a wider beam (background noise); G1 young pauses
(4-10 ms every ~2 s); the odd cudaFree retry (a device-wide stall every ~40 s per GPU); rare CFS
throttles; hint entries that expire during the run at their own times (a few misses); checkpoints
now and then slowing a WAL flush; 1 % of clients reading results a few tens of ms late.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, `service.instance.id` (the gateway's from
the OTel operator, the decoder's a UUID per process), chunk decodes as span events, 5 % of the
micro-batches as their own traces (`am.forward`) linked to the streams served, GC pauses as span
events on `EndOfUtterance`, no GPU events. 1: Jaeger, old semconv, host.name + process.pid (a restarted
decoder is a new process), chunk decodes as child spans (`decode_chunk`), no batches, no GC events,
cudaFree retries as `gpu.alloc.retry` events. 2: Zipkin v2, old semconv, endpoints (ip:port), chunk
decodes as annotations, no batches, GC pauses as annotations, no GPU events.

Mechanisms (scenario: truth):
- `humongous-gc`: audio buffers kept whole per utterance cross G1's humongous threshold: pauses of
  55-260 ms about every second on every gateway pod; chunks, the final result, the INSERT and the write
  all wait: gc_pause at `EndOfUtterance` (gateway).
- `slow-readers`: one customer's CRM connector reads results once every 0.3-1.2 s; its streams' windows
  are shut and the final write waits for the next read: network (a slow reader is transport back-
  pressure) at `EndOfUtterance`, stage serialization.
- `hash-skew`: one decoder host holds 2.15x the ring's share: its batches are bigger and later and, at
  the peaks, back to back: queueing at `decoder.flush` on that host.
- `cudafree-sync`: one GPU's caching allocator, fragmented, frees its cache and re-allocates: a
  device-wide sync (90-320 ms) every ~1 s stalls every stream's batches and punctuation on that GPU,
  no span for it: gc_pause (a memory manager's stop-the-world, of a device), accept lock_contention
  (cudaFree holds the context's lock and every other call waits on it), at `decoder.flush` on that host.
- `rolling-deploy`: decoders drained one after another: their streams re-decode on the other hosts (a
  burst of work there), and each fresh process pays lazy CUDA module loads (~1.2 s on its first batch)
  and allocator growth (batches up to 1.6x slower for 15 s): cold_start at `decoder.flush` on the fresh
  processes (side queueing).
- `noisy-lines`: one customer's lines are noisy: beams 24-32 wide: beam search and rescoring CPU grow
  3-4x on its streams: compute_bound at `lm.rescore` (side queueing).
- `hint-cache-expiry`: the large customers' hints were loaded together at the last deploy and expire
  together at 45 % of the run on every decoder: every finalization until a reload lands misses, each
  with a 30-48k-phrase HGETALL queued on the one Redis and its own compile: cache_miss at
  `PhraseHints::Lookup` (side slow_dependency, queueing).
- `wal-fsync-stalls`: a base backup reads the shared disk (15-85 % of the run): WAL fsyncs take ~18 ms
  with a heavy tail, commits queue behind them: slow_dependency at the INSERT (gateway).
- `long-utterances`: a product change (a longer end-of-speech silence) makes utterances 2.75x longer
  (the same lines: fewer per second): rescoring's n-best and punctuation's input grow with the
  words: large_payload at `lm.rescore`, accept compute_bound.
- `cfs-throttling`: the decoders' CFS quota is below what beam search and rescoring need in bursts:
  in 55 % of the 100 ms periods the process is throttled for the period's last 20-70 ms: cpu_throttling
  at `lm.rescore` (the CPU work of finalization; the flush's beam searches too).
- Two causes: `hash-skew+cudafree-sync` (different hosts), `wal-fsync-stalls+hint-cache-expiry`,
  `humongous-gc+slow-readers`.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import asr_stream_spans as sp
from reference_pipeline.simulate.asr_stream_flow import simulate
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "asr-stream"
SINGLES = ("humongous-gc", "slow-readers", "hash-skew", "cudafree-sync", "rolling-deploy", "noisy-lines",
           "hint-cache-expiry", "wal-fsync-stalls", "long-utterances", "cfs-throttling")
PAIRS = ("hash-skew+cudafree-sync", "wal-fsync-stalls+hint-cache-expiry", "humongous-gc+slow-readers")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
BATCH_SAMPLE = 0.05
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "chunks": "events", "batches": True,
     "gc_events": True, "gpu_events": False, "gateways": 3, "decoders": 6, "interval_ms": 30.0, "threads": 8,
     "rps": 40.0},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "chunks": "spans", "batches": False,
     "gc_events": False, "gpu_events": True, "gateways": 4, "decoders": 4, "interval_ms": 25.0, "threads": 8,
     "rps": 28.0},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "chunks": "events", "batches": False,
     "gc_events": True, "gpu_events": False, "gateways": 3, "decoders": 8, "interval_ms": 40.0, "threads": 6,
     "rps": 52.0},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["chunks"], s["batches"], s["gc_events"], s["gpu_events"])


def hot_host(seed: int) -> int:
    return 0


def sync_host(seed: int) -> int:
    return 1 + seed % (setup(seed)["decoders"] - 1)


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    gws = tuple(st.label(sp.GW, g) for g in range(s["gateways"]))
    decs = tuple(st.label(sp.DEC, h) for h in range(s["decoders"]))
    fresh = tuple(dict.fromkeys(st.label(sp.DEC, h, 1) for h in range(s["decoders"])))
    causes = {
        "humongous-gc": Cause("gc_pause", "ingress", sp.EOU, sp.GW, gws, side=("queueing",)),
        "slow-readers": Cause("network", "serialization", sp.EOU, sp.GW, gws),
        "hash-skew": Cause("queueing", "queue", sp.FLUSH, sp.DEC, (decs[hot_host(seed)],),
                           side=("slow_dependency",)),
        "cudafree-sync": Cause("gc_pause", "model_forward", sp.FLUSH, sp.DEC, (decs[sync_host(seed)],),
                               accept=("lock_contention",), side=("queueing", "slow_dependency")),
        "rolling-deploy": Cause("cold_start", "model_forward", sp.FLUSH, sp.DEC, fresh,
                                side=("queueing", "slow_dependency")),
        "noisy-lines": Cause("compute_bound", "postprocessing", sp.RESCORE, sp.DEC, decs, side=("queueing",)),
        "hint-cache-expiry": Cause("cache_miss", "feature_hydration", sp.HINTS, sp.DEC, decs,
                                   side=("slow_dependency", "queueing")),
        "wal-fsync-stalls": Cause("slow_dependency", "downstream", sp.INSERT, sp.GW, gws),
        "long-utterances": Cause("large_payload", "postprocessing", sp.RESCORE, sp.DEC, decs,
                                 accept=("compute_bound",)),
        "cfs-throttling": Cause("cpu_throttling", "postprocessing", sp.RESCORE, sp.DEC, decs,
                                side=("queueing",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    run = simulate(s, parts, requests, seed, hot_host(seed), sync_host(seed))
    table = TraceTable(seed, 0x30A)
    res = sp.Resources(table, style(seed))
    ids = random.Random(seed * 7 + 30)
    servers: dict[tuple[int, int], int] = {}
    for i, u in enumerate(run.utterances):
        sp.write_utterance(table, res, run, u, ids.getrandbits(64), servers, i)
    if s["batches"]:
        sp.write_batches(table, res, run, servers, BATCH_SAMPLE, ids.random)
    return table
