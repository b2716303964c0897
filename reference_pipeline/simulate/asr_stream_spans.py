"""How the blind family `asr-stream` (asr_stream.py) is instrumented, per seed: the resources (the OTel
operator's `service.instance.id`, host.name + process.pid, or a Zipkin endpoint), old or new semantic
conventions, the decoder's chunk decodes as span events or child spans, sampled micro-batch spans
linked to the streams they served, JVM GC pauses as span events or nothing, cudaFree retries as
span events or nothing; and the spans of one utterance, written from its timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.asr_stream_decoder import Batch
from reference_pipeline.simulate.asr_stream_flow import Run, Segment, Utterance
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

GW, DEC = "asr-gateway", "asr-decoder"
ROOT = "asr.v1.Recognizer/StreamingRecognize"
DECODE = "asr.decoder.v1.Decoder/Decode"
EOU, INSERT = "EndOfUtterance", "INSERT asr.transcripts"
FINALIZE, FLUSH, HINTS, HGETALL = "Finalize", "decoder.flush", "PhraseHints::Lookup", "HGETALL"
RESCORE, PUNCT, CHUNK = "lm.rescore", "punctuate", "decode_chunk"
REBUILD, BATCH = "StateRebuild", "am.forward"
PG_HOST, REDIS_HOST = "pg-asr-primary.db.internal", "redis-hints.cache.internal"
_SUFFIX = ("k2x9p", "7vq4m", "c8n2w", "r5t7h")
_JAVA, _CPP = "io.opentelemetry.grpc-1.6", "asr_decoder"
EVENT_LIMIT = 128  # the SDK's default span event count limit: it keeps the first 128
VERSION_OLD, VERSION_NEW = "2026.11.3", "2026.11.4"


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new; `ident` instance-id | host-pid | endpoint; `chunks`
    events | spans; `batches`: sampled micro-batch spans with links; `gc_events`; `gpu_events`."""

    semconv: str
    ident: str
    chunks: str
    batches: bool
    gc_events: bool
    gpu_events: bool

    def label(self, service: str, idx: int, gen: int = 0) -> str:
        """The instance as the store names it."""
        if self.ident == "endpoint":
            ip, port = endpoint(service, idx)
            return f"{ip}:{port}"
        if service == GW:
            pod = gateway_pod(idx)
            return f"asr.{pod}.gateway" if self.ident == "instance-id" else f"{pod}:1"
        if self.ident == "instance-id":
            return f"5f0c{idx:04x}-d2a1-4c7e-9b1a-{0x3c41e0 + 7 * idx + 0x1000 * gen:012x}"
        return f"gpu-node-{idx:02d}:{decoder_pid(idx, gen)}"


def gateway_pod(g: int) -> str:
    return f"asr-gateway-5d8f7c6b9-{_SUFFIX[g]}"


def decoder_pid(h: int, gen: int) -> int:
    return 3117 + 41 * h + 9_000 * gen


def endpoint(service: str, idx: int) -> tuple[str, int]:
    return (f"10.40.2.{10 + idx}", 8443) if service == GW else (f"10.40.8.{10 + idx}", 50061)


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def get(self, service: str, idx: int, gen: int = 0) -> int:
        key = (service, idx, gen)
        if key not in self.made:
            self.made[key] = self.table.resource(self._attrs(service, idx, gen), *endpoint(service, idx))
        return self.made[key]

    def _attrs(self, service: str, idx: int, gen: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {"service.name": service,
                                 "telemetry.sdk.language": "java" if service == GW else "cpp"}
        if self.style.ident == "endpoint":
            return attrs
        attrs["service.version"] = VERSION_NEW if gen else VERSION_OLD
        if service == GW:
            attrs.update({"k8s.namespace.name": "asr", "k8s.pod.name": gateway_pod(idx),
                          "host.name": gateway_pod(idx),
                          "process.pid": 1, "process.runtime.name": "OpenJDK Runtime Environment",
                          "process.runtime.version": "21.0.5+11-LTS"})
        else:
            attrs.update({"host.name": f"gpu-node-{idx:02d}", "process.pid": decoder_pid(idx, gen),
                          "host.type": "p4d.24xlarge", "gpu.model": "A100-SXM4-40GB"})
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, idx, gen)
        return attrs


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _rpc(service: str, method: str, code: int = 0) -> dict[str, Any]:
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method, "rpc.grpc.status_code": code}


def _db(style: Style, system: str, op: str, text: str, host: str, port: int, extra: dict[str, Any]
        ) -> dict[str, Any]:
    new = style.semconv == "new"
    attrs = {"db.system": system, ("db.operation.name" if new else "db.operation"): op,
             ("db.query.text" if new else "db.statement"): text, **_peer(style, host, port), **extra}
    return attrs


def write_utterance(table: TraceTable, res: Resources, run: Run, u: Utterance, stream_id: int,
                    servers: dict[tuple[int, int], int], i: int) -> None:
    style = res.style
    trace = table.new_trace()
    gw = res.get(GW, u.gw)
    customer = {"asr.customer": u.customer}
    root = table.span(trace, None, ROOT, "Server", gw, _JAVA, u.start, u.end,
                      {**_rpc("asr.v1.Recognizer", "StreamingRecognize"), **customer,
                       "asr.stream.id": f"{stream_id:016x}", "asr.audio.duration_ms": int(u.duration * 1000),
                       "asr.chunks.count": len(u.sent)})
    for seg in u.segments:
        _segment(table, res, run, u, seg, trace, root, servers, i)
    gc = []
    if style.gc_events:
        for a, b, cause in run.gc[u.gw]:
            if a < u.eou[1] and b > u.eou[0]:
                gc.append((b, "jvm.gc.pause", {"jvm.gc.name": "G1 Young Generation", "jvm.gc.cause": cause,
                                               "jvm.gc.duration_ms": round((b - a) / NS_PER_MS, 1)}))
    eou = table.span(trace, root, EOU, "Internal", gw, "com.callvox.asr.gateway", *u.eou,
                     {**customer, "asr.transcript.words": u.words}, events=gc)
    new = style.semconv == "new"
    table.span(trace, eou, INSERT, "Client", gw, "io.opentelemetry.jdbc", *u.insert,
               _db(style, "postgresql", "INSERT",
                   "INSERT INTO asr.transcripts (stream_id, customer_id, text, words) VALUES (?, ?, ?, ?)",
                   PG_HOST, 5432, {("db.namespace" if new else "db.name"): "asr",
                                   ("db.collection.name" if new else "db.sql.table"): "asr.transcripts"}),
               peer="postgresql")


def _gen(run: Run, h: int, t: float) -> int:
    cold = run.hosts[h].cold_from
    return int(cold is not None and t >= cold)


def _segment(table: TraceTable, res: Resources, run: Run, u: Utterance, seg: Segment, trace: int,
             root: int, servers: dict[tuple[int, int], int], i: int) -> None:
    style = res.style
    last = seg is u.segments[-1]
    end = u.fin_end if last else seg.ended
    code, message = (0, "") if last else (14, "UNAVAILABLE: Connection closed after GOAWAY (draining)")
    client = table.span(trace, root, DECODE, "Client", res.get(GW, u.gw), _JAVA, seg.opened,
                        end + (0.3 * NS_PER_MS if last else 0.1 * NS_PER_MS),
                        {**_rpc("asr.decoder.v1.Decoder", "Decode", code),
                         **_peer(style, f"gpu-node-{seg.host:02d}.asr.internal", 50061)},
                        "Unset" if last else "Error", message, peer=DEC)
    me = res.get(DEC, seg.host, _gen(run, seg.host, seg.opened))
    events = []
    if style.chunks == "events":
        events = [(c.done, "chunk.decoded", {"asr.chunk.index": c.index, "asr.batch.size": c.batch_size,
                                             "asr.chunk.wait_us": int((c.batch_start - c.ready) / 1000),
                                             "asr.beam.width": c.beam})
                  for c in seg.chunks[:EVENT_LIMIT] if c.done <= end]
    if style.gpu_events and last:
        for a, b in run.hosts[seg.host].gpu_stalls.overlapping(u.half_close_dec - 1e9, u.fin_end):
            events.append((b, "gpu.alloc.retry",
                           {"gpu.device": 0, "gpu.sync_ms": round((b - a) / NS_PER_MS, 1)}))
    server = table.span(trace, client, DECODE, "Server", me, _CPP, seg.opened + 0.2 * NS_PER_MS, end,
                        {**_rpc("asr.decoder.v1.Decoder", "Decode", code), "asr.customer": u.customer},
                        "Unset" if last else "Error", message, events=sorted(events, key=lambda e: e[0]))
    servers[(i, seg.host)] = server
    first = seg.chunks[0]
    if first.rebuild:
        table.span(trace, server, REBUILD, "Internal", me, _CPP, first.ready, first.done,
                   {"asr.rebuild.chunks": first.rebuild, "asr.rebuild.audio_ms": first.rebuild * 100})
    if style.chunks == "spans":
        for c in seg.chunks:
            if c.done <= end:
                table.span(trace, server, CHUNK, "Internal", me, _CPP, c.ready, c.done,
                           {"asr.chunk.index": c.index, "asr.batch.size": c.batch_size,
                            "asr.beam.width": c.beam})
    if last:
        _finalize(table, res, u, seg, trace, server, me)


def _finalize(table: TraceTable, res: Resources, u: Utterance, seg: Segment, trace: int, server: int,
              me: int) -> None:
    style = res.style
    fin = table.span(trace, server, FINALIZE, "Internal", me, _CPP, u.half_close_dec, u.fin_end,
                     {"asr.words": u.words})
    pending = sum(c.done > u.half_close_dec for c in seg.chunks)
    table.span(trace, fin, FLUSH, "Internal", me, _CPP, u.half_close_dec, seg.chunks[-1].done,
               {"asr.pending.chunks": pending})
    hints = table.span(trace, fin, HINTS, "Internal", me, _CPP, *u.hints,
                       {"asr.customer": u.customer, "cache.hit": u.hint_hit, "asr.hints.phrases": u.phrases})
    if u.redis is not None:
        table.span(trace, hints, HGETALL, "Client", me, _CPP, *u.redis,
                   _db(style, "redis", "HGETALL", f"HGETALL hints:{u.customer}", REDIS_HOST, 6379, {}),
                   peer="redis")
    table.span(trace, fin, RESCORE, "Internal", me, _CPP, *u.rescore,
               {"asr.nbest": u.beam, "asr.beam.width": u.beam, "asr.words": u.words})
    table.span(trace, fin, PUNCT, "Internal", me, _CPP, *u.punct,
               {"model.name": "punct-cap-small", "asr.tokens": int(1.3 * u.words)})


def write_batches(table: TraceTable, res: Resources, run: Run, servers: dict[tuple[int, int], int],
                  sample: float, pick: Any) -> None:
    """Micro-batches as their own traces (head-sampled: `sample` of them), linked to the streams served."""
    for h, host in enumerate(run.hosts):
        for batch in host.batches:
            if pick() >= sample:
                continue
            _batch(table, res, run, h, batch, servers)


def _batch(table: TraceTable, res: Resources, run: Run, h: int, batch: Batch,
           servers: dict[tuple[int, int], int]) -> None:
    links = [servers[(c.utt, h)] for c in batch.chunks if (c.utt, h) in servers][:64]
    rebuild = sum(c.rebuild for c in batch.chunks)
    table.span(table.new_trace(), None, BATCH, "Internal", res.get(DEC, h, _gen(run, h, batch.start)), _CPP,
               batch.start, batch.end, {"batch.size": len(batch.chunks), "asr.rebuild.chunks": rebuild,
                                        "model.name": "conformer-l-streaming"}, links=links)
