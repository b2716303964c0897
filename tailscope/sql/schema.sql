-- tailscope store schema, version 1. Applied by tailscope.store.db.ensure_schema, statement by statement.
-- Column names and meanings follow the OpenTelemetry Collector ClickHouse exporter's otel_traces table,
-- so the same queries can later run on ClickHouse. DuckDB types: Timestamp TIMESTAMP_NS (ns precision),
-- Duration BIGINT nanoseconds, attributes MAP(VARCHAR, VARCHAR), Events/Links as lists of structs
-- (ClickHouse's Nested columns). RunLabel is ours: every span belongs to exactly one run.
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS otel_traces (
    Timestamp TIMESTAMP_NS NOT NULL,
    TraceId VARCHAR NOT NULL,
    SpanId VARCHAR NOT NULL,
    ParentSpanId VARCHAR NOT NULL,
    TraceState VARCHAR NOT NULL,
    SpanName VARCHAR NOT NULL,
    SpanKind VARCHAR NOT NULL,
    ServiceName VARCHAR NOT NULL,
    ResourceAttributes MAP(VARCHAR, VARCHAR) NOT NULL,
    ScopeName VARCHAR NOT NULL,
    ScopeVersion VARCHAR NOT NULL,
    SpanAttributes MAP(VARCHAR, VARCHAR) NOT NULL,
    Duration BIGINT NOT NULL,
    StatusCode VARCHAR NOT NULL,
    StatusMessage VARCHAR NOT NULL,
    Events STRUCT("Timestamp" TIMESTAMP_NS, "Name" VARCHAR, "Attributes" MAP(VARCHAR, VARCHAR))[] NOT NULL,
    Links STRUCT("TraceId" VARCHAR, "SpanId" VARCHAR, "TraceState" VARCHAR, "Attributes" MAP(VARCHAR, VARCHAR))[] NOT NULL,
    RunLabel VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    RunLabel VARCHAR PRIMARY KEY,
    SourceFiles VARCHAR[] NOT NULL,
    LoadedAt TIMESTAMP NOT NULL,
    SpanCount BIGINT NOT NULL,
    TraceCount BIGINT NOT NULL,
    SetupAttributes MAP(VARCHAR, VARCHAR) NOT NULL
);
