-- Every derived row into the migration's table with the weight its root span carries in otel_traces
-- (`tailscope.sample.weight` of a head-sampled run; 1 without it). Only spans that carry the key
-- are read (the exporter's bloom filter index on the attribute keys skips the others' granules).
INSERT INTO _tailscope_requests_new
SELECT r.*, coalesce(w.Weight, 1) AS Weight
FROM tailscope_requests AS r
LEFT JOIN (
    SELECT TraceId, SpanId, any(toFloat64OrNull(SpanAttributes['tailscope.sample.weight'])) AS Weight
    FROM otel_traces
    WHERE mapContains(SpanAttributes, 'tailscope.sample.weight')
    GROUP BY TraceId, SpanId
) AS w ON w.TraceId = r.TraceId AND w.SpanId = r.SpanId
SETTINGS join_use_nulls = 1
