-- The exporter's trace-id lookup table: first and last span start (second precision) per TraceId,
-- filled by otel_traces_trace_id_ts_mv_ddl.sql. Source of the schema: opentelemetry-collector-contrib,
-- exporter/clickhouseexporter/internal/sqltemplates/traces_id_ts_lookup_table.sql (commit 1b08503058e5,
-- Apache-2.0), written for tailscope from its columns and keys, not copied. Older exporter versions
-- made Start/End plain DateTime (or DateTime64(9)) in a MergeTree ordered by (TraceId, Start); a
-- reader must therefore always aggregate: min(Start), max(End) ... WHERE TraceId = {trace:String}.
-- The engine is the exporter's configured table engine, MergeTree by default (so rows of one TraceId
-- are not merged and the min/max on read is needed in any case).
CREATE TABLE IF NOT EXISTS otel_traces_trace_id_ts (
    TraceId String CODEC(ZSTD(1)),
    Start SimpleAggregateFunction(min, DateTime) CODEC(ZSTD(1)),
    End SimpleAggregateFunction(max, DateTime) CODEC(ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toStartOfWeek(Start)
ORDER BY (TraceId)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
