-- How many traces a run's selection holds (after an ingest). Params: the selection's.
SELECT uniqExact(TraceId)
FROM otel_traces
WHERE Timestamp BETWEEN fromUnixTimestamp64Nano({run_start:Int64}) AND fromUnixTimestamp64Nano({run_end:Int64})
  AND arrayAll((k, v) -> ResourceAttributes[k] = v, {run_filter_keys:Array(String)},
               {run_filter_values:Array(String)})
