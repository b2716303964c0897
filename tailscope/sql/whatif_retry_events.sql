-- What if: the refusals a span's events report (a rate limit's 429 with its Retry-After, as an
-- OpenInference or LangChain client records each retry on its call's span), for the spans of one
-- name: per event, the span (SpanKey matches diagnosis_spans.sql), when it came (ns after the span's
-- start: a sampled read moves the spans' times, not this) and the wait
-- it asked for (ns; the first attribute whose key names a retry-after, in seconds unless its suffix
-- says _ms). Only spans with an event whose name or attributes say retry or 429 are parsed.
-- {windows}: the spans starting in the read's time windows (a sampled run; all time otherwise).
-- Events is JSON text (schema.sql). Param: span_name.
SELECT SpanKey, OffsetNs, CAST(AfterS * CASE WHEN regexp_matches(lower(AfterKey), 'ms$') THEN 1e6 ELSE 1e9 END
                              AS BIGINT) AS WaitNs
FROM (
    SELECT SpanKey, ev.Timestamp - StartNs AS OffsetNs, AfterKey,
           TRY_CAST(ev.Attributes->>AfterKey AS DOUBLE) AS AfterS
    FROM (
        SELECT SpanKey, StartNs, ev, list_filter(json_keys(ev.Attributes), lambda k: regexp_matches(lower(k),
               'retry[._-]?after'))[1] AS AfterKey
        FROM (
            SELECT CAST(hash(TraceId, SpanId) >> 1 AS BIGINT) AS SpanKey, epoch_ns(Timestamp) AS StartNs,
                   unnest(from_json(Events, '[{"Timestamp": "BIGINT", "Name": "VARCHAR", "Attributes": "JSON"}]')) AS ev
            FROM otel_traces
            WHERE RunLabel = $run AND SpanName = $span_name AND {windows}
              AND Events <> '[]' AND regexp_matches(Events, 'retry|429', 'i')
        )
    )
    WHERE AfterKey IS NOT NULL
)
WHERE AfterS > 0
