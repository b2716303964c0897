-- The sampled traces' spans where a sampled view reads them (the run's time range, and the seconds
-- {seconds}: fixed SQL from tailscope.store.clickhouse.statements.seconds_where, or 1), once, into memory,
-- without the run's attribute filters and without their resource attributes (an empty map: the
-- span tree does not read them), for proven_traces.sql and the span tree's scope
-- (statements.sample_scope; {columns}: its SAMPLE_COLUMNS, the resource map replaced). At 10 M spans the resource maps of the granules read were 0.5 s
-- of the breakdown's 0.9 s read. Params: sample_ids, run_start, run_end, seconds_where's.
CREATE TEMPORARY TABLE _ts_sample_rows ENGINE = Memory AS
SELECT {columns}
FROM otel_traces PREWHERE TraceId IN {sample_ids:Array(String)}
WHERE Timestamp BETWEEN fromUnixTimestamp64Nano({run_start:Int64}) AND fromUnixTimestamp64Nano({run_end:Int64})
  AND {seconds}
