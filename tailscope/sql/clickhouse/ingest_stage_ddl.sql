-- The loader's staging table (per session, in memory): one decoded batch of spans in the decoders'
-- column form (ingest/columns.py: events and links JSON array text), but the attributes already
-- maps (write.attribute_maps, each distinct text parsed once), which ingest_stage_move.sql
-- converts into the exporter's columns inside ClickHouse.
CREATE TEMPORARY TABLE IF NOT EXISTS _ts_stage (
    Timestamp DateTime64(9, 'UTC'),
    TraceId String,
    SpanId String,
    ParentSpanId String,
    TraceState String,
    SpanName String,
    SpanKind String,
    ServiceName String,
    ResourceAttributes Map(LowCardinality(String), String),
    ScopeName String,
    ScopeVersion String,
    SpanAttributes Map(LowCardinality(String), String),
    Duration Int64,
    StatusCode String,
    StatusMessage String,
    Events String,
    Links String
) ENGINE = Memory
