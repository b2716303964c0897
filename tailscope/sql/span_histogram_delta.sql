-- A write's signed span counts for span_histogram (tailscope.store.duckdb.span_histogram): each
-- appended batch adds its own, dedupe takes its copies away, the commit merges them. Emptied at the
-- start of each write (CREATE OR REPLACE), created if missing for an append outside one.
CREATE {or_replace} TEMP TABLE {if_not_exists} _ts_span_delta (
    RunLabel VARCHAR NOT NULL,
    SpanName VARCHAR NOT NULL,
    Bucket INTEGER NOT NULL,
    Spans BIGINT NOT NULL
)
