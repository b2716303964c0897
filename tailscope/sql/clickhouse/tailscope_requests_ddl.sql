-- Derived per-request rows on ClickHouse: the DuckDB store's `requests` (../schema.sql, same columns
-- and meanings), filled by derive_requests.sql (INSERT ... SELECT inside ClickHouse). Ordered by run
-- and time: every view reads one run, often a time range of it.
CREATE TABLE IF NOT EXISTS tailscope_requests (
    RunLabel LowCardinality(String),
    TraceId String,
    SpanId String,
    Timestamp DateTime64(9),
    ServiceName LowCardinality(String),
    Route LowCardinality(String),
    Instance LowCardinality(String),
    Duration Int64,
    IsError Bool,
    ClientDuration Nullable(Int64),
    SpanCount Int32,
    DominantStage LowCardinality(String),
    ingress_ns Int64,
    queue_ns Int64,
    parsing_ns Int64,
    feature_hydration_ns Int64,
    preprocessing_ns Int64,
    model_forward_ns Int64,
    postprocessing_ns Int64,
    downstream_ns Int64,
    serialization_ns Int64,
    unattributed_ns Int64,
    Weight Float64 DEFAULT 1  -- how many requests it stands for (a head-sampled run's weight), 1 without
)
ENGINE = MergeTree
ORDER BY (RunLabel, Timestamp)
