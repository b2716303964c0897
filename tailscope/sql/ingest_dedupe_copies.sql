-- The copies dedupe deletes (ingest_dedupe_run.sql), kept in a temp table so the span counts
-- (span_histogram_copies.sql) take them away before they go. Keep one copy of each span in a run:
-- the first one stored (lowest rowid), so re-ingesting a file adds nothing and a file that repeats
-- a span keeps its first copy. A span is identified by its ids AND its timing, name and service,
-- not by (TraceId, SpanId) alone: real exports carry distinct spans that share an id (Jaeger's own
-- UI fixture ui_01.json has two different spans with id ...0002), and those are both kept. Only
-- what the transaction touched is looked at: its traces (the Arrow table registered as
-- ingest_touched) within its time range (a copy has the same Timestamp, and the Timestamp range
-- lets DuckDB skip row groups by their min/max), so the cost follows the batch, not the run.
-- $1: run label, $2/$3: the batch's first and last span start (ns since the epoch).
CREATE OR REPLACE TEMP TABLE _ts_copies AS
SELECT rowid AS CopyRow, RunLabel, SpanName, Duration
FROM (
    SELECT rowid, RunLabel, SpanName, Duration,
           row_number() OVER (
               PARTITION BY TraceId, SpanId, ParentSpanId, Timestamp, Duration, SpanName, ServiceName
               ORDER BY rowid
           ) AS copy
    FROM otel_traces
    WHERE RunLabel = $1
      AND Timestamp BETWEEN make_timestamp_ns($2::BIGINT) AND make_timestamp_ns($3::BIGINT)
      AND TraceId IN (SELECT TraceId FROM ingest_touched)
)
WHERE copy > 1
