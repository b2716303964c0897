-- Diagnosis: the attributes of the spans of several names at once (`span_names`), as
-- diagnosis_span_attributes.sql reads one name's: one scan of the run (or of the sampled read's
-- windows) instead of one per name (a sampled 1 M-span run: 12 names, 0.54 s -> 0.2 s CPU). No
-- per-name limit here (a window function over the read cost +50 %): load.py asks this for the names
-- with at most 50,000 spans in the frame and reads a name alone (diagnosis_span_attributes.sql, its
-- 50,000-span limit) where this found more. SpanName tells the names apart.
-- Long values are skipped; a span's error status comes along as otel.status_code = 'Error'.
-- Each distinct attribute text is parsed once (`texts`) and its pairs joined back to the spans that
-- carry it, by the text itself: spans of one name mostly repeat a few texts (a sampled 1 M-span run:
-- 220,042 spans, 5,391 texts; json_each on every span was this read's cost: bench/RESULTS.md "Scale",
-- scale18). Not by hash(text): DuckDB's string hash collides on such texts (a 2,000-request run:
-- 5,522 texts, 5,520 hashes), and a collision would give a span another's attributes.
WITH s AS (
    SELECT SpanName, CAST(hash(TraceId, SpanId) >> 1 AS BIGINT) AS SpanKey, SpanAttributes, StatusCode
    FROM otel_traces WHERE RunLabel = $run AND list_contains($span_names, SpanName)
      AND {windows}
),
texts AS (
    SELECT t.SpanAttributes, kv.key AS AttrKey, kv.value ->> '$' AS AttrValue
    FROM (SELECT DISTINCT SpanAttributes FROM s) AS t, json_each(t.SpanAttributes) AS kv
    WHERE length(kv.value ->> '$') <= 64
)
SELECT s.SpanName, s.SpanKey, t.AttrKey, t.AttrValue
FROM s JOIN texts AS t ON s.SpanAttributes = t.SpanAttributes
UNION ALL
SELECT SpanName, SpanKey, 'otel.status_code' AS AttrKey, 'Error' AS AttrValue FROM s WHERE StatusCode = 'Error'
