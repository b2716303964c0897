-- Schema version 2 -> 3, in place (tailscope.store.duckdb.migrate runs it in one transaction, statement
-- by statement): requests gains Weight, what derive_requests.sql now writes: the root span's
-- `tailscope.sample.weight` (a head-sampled run), 1 without one. The derived rows of a sampled run
-- get their weights from their root spans in otel_traces (only spans that carry the key are read
-- as JSON). Nothing else changes.
ALTER TABLE requests ADD COLUMN Weight DOUBLE DEFAULT 1;
ALTER TABLE requests ALTER Weight SET NOT NULL;
UPDATE requests AS r SET Weight = w.Weight
FROM (
    SELECT RunLabel, TraceId, SpanId,
           try_cast(SpanAttributes->>'tailscope.sample.weight' AS DOUBLE) AS Weight
    FROM otel_traces
    WHERE contains(SpanAttributes, '"tailscope.sample.weight"')
) AS w
WHERE w.RunLabel = r.RunLabel AND w.TraceId = r.TraceId AND w.SpanId = r.SpanId AND w.Weight IS NOT NULL;
UPDATE schema_version SET version = 3;
