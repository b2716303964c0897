-- Each run's span durations by name (tailscope.store.clickhouse.span_durations): what the Gantt ranks a span's
-- duration against (its share of the run's spans of the same name that are shorter). Filled where the
-- run's requests are derived (derive_durations.sql) or its spans received (durations_fresh.sql), so a
-- rank reads two sorted columns of one name's rows instead of every span of the run with its
-- resource attributes (10 M spans on chdb: 3.0 s -> well under 0.1 s). Rows are spans: one per span
-- of the run, phase spans excepted. Param: table (the name: span_durations.ensure fills a new one under
-- another name first).
CREATE TABLE IF NOT EXISTS {table:Identifier} (
    RunLabel LowCardinality(String),
    SpanName LowCardinality(String),
    Duration Int64 CODEC(T64, ZSTD(1)),
    StartNs Int64 CODEC(Delta(8), ZSTD(1))
)
ENGINE = MergeTree
ORDER BY (RunLabel, SpanName, Duration)
