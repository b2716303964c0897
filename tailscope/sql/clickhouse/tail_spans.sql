-- Tail vs body's sampled spans on ClickHouse, once into a temporary table for tail_kv.sql: the trace
-- id, start, service, name and span attributes of every span of the sampled traces (s_ids; not the
-- span id: 0.06 s more at 10 M spans, the start is read anyway), read by trace id in
-- the seconds they start in (the placeholder in the WHERE: fixed SQL from
-- tailscope.store.clickhouse.statements.seconds_where, or 1 when the read is not bounded), and only
-- the spans of the run's selection (its time range and resource-attribute filters, as DuckDB reads
-- the run's RunLabel: two runs may share trace ids; an empty range and no filters for every run).
CREATE TEMPORARY TABLE _ts_tail_spans ENGINE = Memory AS
SELECT TraceId, toUnixTimestamp64Nano(Timestamp) AS StartNs, ServiceName, SpanName, SpanAttributes
FROM otel_traces PREWHERE TraceId IN {s_ids:Array(String)}
WHERE {seconds}
  AND ({run_end:Int64} = 0 OR Timestamp BETWEEN fromUnixTimestamp64Nano({run_start:Int64})
                                            AND fromUnixTimestamp64Nano({run_end:Int64}))
  AND arrayAll((k, v) -> ResourceAttributes[k] = v, {run_filter_keys:Array(String)},
               {run_filter_values:Array(String)})
