-- One staged batch (ingest_stage_ddl.sql) into {target}, converted by ClickHouse: event and link
-- arrays to the Nested columns' parallel arrays (their attribute objects to
-- Map(LowCardinality(String), String) with JSONExtract); the span and resource attributes come
-- staged as maps already, the resource attributes with tailscope.run, the run's selection filter
-- (write.attribute_maps).
-- {target} (a bound identifier, tailscope.store.clickhouse.write): otel_traces (the receiver's flushes), or
-- the loader's ready table (_ts_ready: ingest_ready_ddl.sql, or a shared one), converted batch by
-- batch while the file decodes and moved into otel_traces once it decoded whole
-- (ingest_ready_move.sql).
INSERT INTO {target:Identifier} (
    Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
    ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage,
    `Events.Timestamp`, `Events.Name`, `Events.Attributes`,
    `Links.TraceId`, `Links.SpanId`, `Links.TraceState`, `Links.Attributes`
)
SELECT
    Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
    ResourceAttributes,
    ScopeName, ScopeVersion,
    SpanAttributes,
    toUInt64(greatest(Duration, 0)),
    StatusCode, StatusMessage,
    arrayMap(e -> fromUnixTimestamp64Nano(JSONExtract(e, 'Timestamp', 'Int64')), JSONExtractArrayRaw(Events)),
    arrayMap(e -> JSONExtractString(e, 'Name'), JSONExtractArrayRaw(Events)),
    arrayMap(e -> JSONExtract(e, 'Attributes', 'Map(LowCardinality(String), String)'), JSONExtractArrayRaw(Events)),
    arrayMap(e -> JSONExtractString(e, 'TraceId'), JSONExtractArrayRaw(Links)),
    arrayMap(e -> JSONExtractString(e, 'SpanId'), JSONExtractArrayRaw(Links)),
    arrayMap(e -> JSONExtractString(e, 'TraceState'), JSONExtractArrayRaw(Links)),
    arrayMap(e -> JSONExtract(e, 'Attributes', 'Map(LowCardinality(String), String)'), JSONExtractArrayRaw(Links))
FROM _ts_stage
