-- Per-run pre-aggregates of `requests`, kept by every derive (tailscope.store.duckdb.histogram) so the
-- unfiltered views of a large run read a few thousand rows instead of every request
-- (tailscope.analysis.histogram). Buckets are log-spaced: Bucket = floor(100 ln(ns)) for a value
-- > 0 (each bucket 1.005 % wide), -1 for 0 (or a negative rounding remainder). Sums are of
-- Weight × value (requests.Weight), so weighted and plain means come from the same rows.
-- request_histogram: per run × e2e (Duration) bucket, the requests' counts, error weight, and their
-- weighted sums of Duration and of each stage's exclusive time (the waterfall's band means).
CREATE TABLE IF NOT EXISTS request_histogram (
    RunLabel VARCHAR NOT NULL,
    Bucket INTEGER NOT NULL,
    Requests BIGINT NOT NULL,
    Weight DOUBLE NOT NULL,
    Errors DOUBLE NOT NULL,
    DurationNs DOUBLE NOT NULL,
    ingress_ns DOUBLE NOT NULL,
    queue_ns DOUBLE NOT NULL,
    parsing_ns DOUBLE NOT NULL,
    feature_hydration_ns DOUBLE NOT NULL,
    preprocessing_ns DOUBLE NOT NULL,
    model_forward_ns DOUBLE NOT NULL,
    postprocessing_ns DOUBLE NOT NULL,
    downstream_ns DOUBLE NOT NULL,
    serialization_ns DOUBLE NOT NULL,
    unattributed_ns DOUBLE NOT NULL
);
-- stage_histogram: per run × stage × bucket of that stage's exclusive time, the requests' count and weight.
CREATE TABLE IF NOT EXISTS stage_histogram (
    RunLabel VARCHAR NOT NULL,
    Stage VARCHAR NOT NULL,
    Bucket INTEGER NOT NULL,
    Requests BIGINT NOT NULL,
    Weight DOUBLE NOT NULL
);
-- span_histogram: per run × span name × bucket of the span's Duration, how many of the run's spans
-- (otel_traces) lie there, in finer buckets than the requests' (span_bucket.sql: floor(1000 ln ns),
-- 0.1 % wide) for the Gantt's rank of a span among the run's spans of its name (gantt_rank_buckets.sql,
-- tailscope.store.span_ranks). Kept by the writes: each INSERT's batch added, dedupe's copies taken
-- away (tailscope.store.duckdb.span_histogram), built whole for a run whose spans it does not count.
CREATE TABLE IF NOT EXISTS span_histogram (
    RunLabel VARCHAR NOT NULL,
    SpanName VARCHAR NOT NULL,
    Bucket INTEGER NOT NULL,
    Spans BIGINT NOT NULL
);
-- heatmap_histogram: per run × stage ('' for e2e, else a stage's exclusive time) × second of the
-- request's start (epoch_ns(Timestamp) // 1e9) × bucket of the value (as request_histogram's, 1.005 %
-- wide) × the heatmap's latency cell at 10 per decade (heatmap_bins.sql's, values under 1 us in the
-- 1 us cell), the requests' count and weight: what the latency heatmap of a whole large run reads
-- (tailscope.analysis.heatmap_histogram) instead of every request. Cells are exact (a bucket that
-- straddles a cell's edge has a row per cell), the p50 / p99 lines come from the buckets.
CREATE TABLE IF NOT EXISTS heatmap_histogram (
    RunLabel VARCHAR NOT NULL,
    Stage VARCHAR NOT NULL,
    Second BIGINT NOT NULL,
    Bucket INTEGER NOT NULL,
    Cell INTEGER NOT NULL,
    Requests BIGINT NOT NULL,
    Weight DOUBLE NOT NULL
)
