-- Keeps otel_traces_trace_id_ts up to date on every insert into otel_traces (the exporter's
-- traces_id_ts_lookup_mv.sql, opentelemetry-collector-contrib, Apache-2.0; written from its
-- definition, not copied): per inserted block, each non-empty TraceId's earliest and latest span start.
CREATE MATERIALIZED VIEW IF NOT EXISTS otel_traces_trace_id_ts_mv TO otel_traces_trace_id_ts
AS SELECT TraceId, min(Timestamp) AS Start, max(Timestamp) AS End
FROM otel_traces
WHERE TraceId != ''
GROUP BY TraceId
