-- The span table as the OpenTelemetry Collector ClickHouse exporter creates it (map-typed attributes,
-- the exporter's default), so a table the Collector made and one tailscope made are the same shape.
-- Source of the schema: github.com/open-telemetry/opentelemetry-collector-contrib,
-- exporter/clickhouseexporter/internal/sqltemplates/traces_table.sql (commit 2bf6b9e1f8c8), licensed
-- Apache-2.0 like the rest of that repository. This file is written for tailscope from that schema's
-- column names, types, codecs and keys (an interface, recorded in /work/notes/i13_research.md); it is
-- not a copy of the template: the template's Go placeholders (database, cluster, engine, TTL) and its
-- optional full-text indexes are left out, and the table is created unqualified in the session's
-- current database.
-- Columns tailscope reads: Timestamp (span start, ns), TraceId/SpanId/ParentSpanId (lowercase hex,
-- '' for none), SpanName, SpanKind ('Server', 'Client', ...), ServiceName, ResourceAttributes and
-- SpanAttributes (Map of string values), Duration (ns), StatusCode ('Unset', 'Ok', 'Error'),
-- StatusMessage, Events.* and Links.* (Nested: parallel arrays).
CREATE TABLE IF NOT EXISTS otel_traces (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
